"""The human side of a movement: create, approve, reject, cancel, resume,
retry a failed node, complete a manual node — and reading movements back.

Every operation runs in one transaction that locks the request row first, so
it cannot interleave with a worker that holds the same request, and writes
its audit_outbox row in that transaction. State changes go through the
database's transition guard; a move the current state does not allow is a
`Conflict` carrying `current_state`, never a half-applied change.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from qtg.config import Settings
from qtg.db import Database, Jsonb, Tx, sql_family
from qtg.domain.custody import approval_seal
from qtg.domain.derive import NodeView
from qtg.domain.execution import approval_releases, frontier_keys
from qtg.domain.faults import completed_side_effects, four_eyes_violation
from qtg.domain.plan import Plan, canonical_json, compile_graph, compiled_plan_hash
from qtg.domain.states import IN_FLIGHT_NODE_STATES, NodeState, RequestState
from qtg.providers.base import IntentRejected
from qtg.providers.registry import ProviderRegistry, UnknownExecutorError
from qtg.services import policies, progress
from qtg.services.auditing import record_audit
from qtg.services.errors import (
    Conflict,
    Forbidden,
    IdempotencyConflict,
    InvalidInput,
    NotFound,
    uuid_or_not_found,
)
from qtg.services.paging import decode_cursor, encode_cursor

SQL = sql_family(
    "movements",
    "find_by_idempotency_key",
    "load_active_version",
    "insert_request",
    "insert_nodes",
    "get_request",
    "lock_request",
    "list_nodes",
    "list_edges",
    "list_requests",
    "approve_request",
    "decide_request",
    "release_roots",
    "skip_unstarted_nodes",
    "retry_node",
    "rearm_timed_out_nodes",
    "failure_proven",
)

DB_SQL = sql_family("db", "now")

N, R = NodeState, RequestState
MAX_PAGE = 200


# ------------------------------------------------------------------ input rules


def validate_intent(intent: Any) -> dict[str, Any]:
    """An intent carries at least asset, amount (a positive decimal string) and destination."""
    if not isinstance(intent, Mapping):
        raise InvalidInput("intent must be an object", detail={"field": "intent"})
    for field in ("asset", "destination"):
        value = intent.get(field)
        if not isinstance(value, str) or not value.strip():
            raise InvalidInput(
                f"intent.{field} must be a non-empty string", detail={"field": f"intent.{field}"}
            )
    amount = intent.get("amount")
    if not isinstance(amount, str):
        raise InvalidInput(
            'intent.amount must be a decimal string such as "125.50" (never a number)',
            detail={"field": "intent.amount"},
        )
    try:
        value = Decimal(amount)
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or value <= 0:
        raise InvalidInput(
            f"intent.amount must be a positive decimal string, got {amount!r}",
            detail={"field": "intent.amount"},
        )
    return dict(intent)


def request_fingerprint(
    template_key: str,
    intent: Mapping[str, Any],
    input_params: Mapping[str, Any],
    callback_url: str | None,
) -> str:
    """What "the same body" means for an idempotency key."""
    body = {
        "template_key": template_key,
        "intent": dict(intent),
        "input_params": dict(input_params),
        "callback_url": callback_url,
    }
    return hashlib.sha256(canonical_json(body)).hexdigest()


def _request_uuid(request_id: object) -> uuid.UUID:
    return uuid_or_not_found(request_id, what="movement", key="request_id")


# ------------------------------------------------------------------ reading


async def _movement(tx: Tx, request_id: uuid.UUID) -> dict[str, Any]:
    params = {"request_id": request_id}
    # one round trip: the three reads are independent
    rows, nodes, edges = await tx.fetch_each(
        (SQL.get_request, params), (SQL.list_nodes, params), (SQL.list_edges, params)
    )
    if not rows:
        raise NotFound(f"movement {request_id} not found", detail={"request_id": str(request_id)})
    row = rows[0]
    row["nodes"] = nodes
    row["edges"] = [[e["from_key"], e["to_key"]] for e in edges]
    if row.get("policy_version") is not None:  # issue 45: what its rule asks, and has
        row["policy"] = await policies.policy_view(tx, row)
    return row


async def read_movement(tx: Tx, request_id: uuid.UUID) -> dict[str, Any]:
    """The movement with its nodes and edges as `tx` sees it (for the operations
    of other modules, e.g. qtg.services.node_attention)."""
    return await _movement(tx, request_id)


async def get_movement(db: Database, request_id: object) -> dict[str, Any]:
    rid = _request_uuid(request_id)
    async with db.transaction() as tx:
        return await _movement(tx, rid)


async def list_movements(
    db: Database,
    *,
    state: str | None = None,
    template_key: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> tuple[list[dict[str, Any]], str | None]:
    if state is not None and state not in RequestState.__members__:
        raise InvalidInput(f"unknown request state {state!r}", detail={"field": "state"})
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}", detail={"field": "limit"})
    after_created_at, after_id = decode_cursor(cursor) if cursor else (None, None)
    rows = await db.fetch(
        SQL.list_requests,
        {
            "state": state,
            "template_key": template_key,
            "after_created_at": after_created_at,
            "after_id": after_id,
            "limit": limit + 1,
        },
    )
    next_cursor = encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return rows[:limit], next_cursor


# ------------------------------------------------------------------ create


def check_intent(providers: ProviderRegistry, plan: Plan, intent: Mapping[str, Any]) -> None:
    """Refuse `intent` (InvalidInput naming `intent.<field>`) if an executor of
    one of the plan's nodes says it can never carry it out. A node whose
    executor is not loaded here is left to dispatch, as before."""
    for node in plan.nodes:
        try:
            executor = providers.executor_for(node.action_type, node.executor_key)
        except UnknownExecutorError:
            continue
        check = getattr(executor, "check_intent", None)
        if check is None:
            continue
        try:
            check(intent, node.config)
        except IntentRejected as exc:
            field = f"intent.{exc.field}"
            raise InvalidInput(
                f"{field}: {exc.detail} (node {node.key}, provider {executor.key})",
                detail={
                    "field": field,
                    "node_key": node.key,
                    "executor": executor.key,
                    "reason": exc.code,
                },
            ) from None


async def create_movement(
    db: Database,
    settings: Settings,
    *,
    template_key: str,
    intent: Any,
    input_params: Any = None,
    idempotency_key: str,
    callback_url: str | None = None,
    actor: str,
    providers: ProviderRegistry | None = None,
    network_class: str | None = None,
) -> tuple[dict[str, Any], bool]:
    """Create a PENDING_APPROVAL movement from the template's active version.

    With `providers`, the intent is first checked by every executor that would
    run one of the plan's nodes and has a format to check (`check_intent`): an
    evm destination that is no address is a 422 naming `intent.destination`
    now, not a movement approved by a second person that then fails.

    Its network class is `network_class` when given — a worker creating a
    movement for something of another origin passes that origin's class — else
    this runtime's (MG_NETWORK_CLASS).

    The same idempotency key with the same body returns the first movement
    (created_now False); with another body it is refused. Keys are scoped per
    principal (`actor`): another principal's use of the same key is a
    different movement, so a replayed key never hands out someone else's.
    """
    from qtg.services.callbacks import validate_callback_url

    if not isinstance(idempotency_key, str) or not 1 <= len(idempotency_key) <= 200:
        raise InvalidInput(
            "the idempotency key must be 1-200 characters", detail={"field": "Idempotency-Key"}
        )
    intent = validate_intent(intent)
    input_params = {} if input_params is None else input_params
    if not isinstance(input_params, Mapping):
        raise InvalidInput("input_params must be an object", detail={"field": "input_params"})
    if callback_url is not None:
        callback_url = validate_callback_url(callback_url, settings)
    fingerprint = request_fingerprint(template_key, intent, input_params, callback_url)

    async with db.transaction() as tx:
        existing = await tx.fetchrow(
            SQL.find_by_idempotency_key, {"created_by": actor, "idempotency_key": idempotency_key}
        )
        if existing is None:
            version = await tx.fetchrow(SQL.load_active_version, {"template_key": template_key})
            if version is None:
                raise NotFound(
                    f"template {template_key!r} not found or has no active version",
                    detail={"field": "template_key", "template_key": template_key},
                )
            plan = compile_graph(version["graph"])
            if providers is not None:
                check_intent(providers, plan, intent)
            # Issue 45: the active policy decides first; a block raises (403 naming
            # the rule) and this transaction stores nothing.
            governed = await policies.decide_at_creation(
                tx,
                template_key=template_key,
                plan=plan,
                network_class=network_class or settings.network_class,
                intent=intent,
                input_params=input_params,
                initiator=actor,
            )
            request_id = await tx.fetchval(
                SQL.insert_request,
                {
                    "network_class": network_class or settings.network_class,
                    "template_id": version["template_id"],
                    "template_version_id": version["template_version_id"],
                    "compiled_plan_hash": compiled_plan_hash(plan, intent, input_params),
                    "intent": Jsonb(intent),
                    "input_params": Jsonb(dict(input_params)),
                    "idempotency_key": idempotency_key,
                    "request_fingerprint": fingerprint,
                    "callback_url": callback_url,
                    "created_by": actor,
                    "approval_ttl_seconds": settings.approval_ttl_seconds,
                },
            )
            if request_id is not None:
                await tx.execute(
                    SQL.insert_nodes,
                    {
                        "request_id": request_id,
                        "template_version_id": version["template_version_id"],
                    },
                )
                if governed is not None:
                    policies.record_decision(tx, request_id, *governed)
                await record_audit(
                    tx,
                    actor=actor,
                    action="movement.created",
                    object_type="movement",
                    object_id=request_id,
                    detail={"template_key": template_key, "idempotency_key": idempotency_key},
                )
                return await _movement(tx, request_id), True
            # lost a race with a concurrent create using the same key
            existing = await tx.fetchrow(
                SQL.find_by_idempotency_key,
                {"created_by": actor, "idempotency_key": idempotency_key},
            )
            assert existing is not None
        if existing["request_fingerprint"] != fingerprint:
            raise IdempotencyConflict(
                "this idempotency key was already used with a different body",
                detail={"field": "Idempotency-Key", "request_id": str(existing["id"])},
            )
        return await _movement(tx, existing["id"]), False


# ------------------------------------------------------------------ decisions


async def _locked(tx: Tx, request_id: object) -> dict[str, Any]:
    rid = _request_uuid(request_id)
    row = await tx.fetchrow(SQL.lock_request, {"request_id": rid})
    if row is None:
        raise NotFound(f"movement {rid} not found", detail={"request_id": str(rid)})
    return row


@dataclass(slots=True)
class _Decision:
    """One human decision in progress: the transaction, the locked request row, who."""

    tx: Tx
    row: dict[str, Any]
    actor: str

    async def snapshot(self) -> progress.Snapshot:
        return await progress.load_snapshot(self.tx, self.row["id"])

    async def finish(self, action: str, **detail: Any) -> dict[str, Any]:
        """Write the decision's audit row and return the movement as it now is."""
        await record_audit(
            self.tx,
            actor=self.actor,
            action=f"movement.{action}",
            object_type="movement",
            object_id=self.row["id"],
            detail=detail,
        )
        return await _movement(self.tx, self.row["id"])


@asynccontextmanager
async def _deciding(
    db: Database, request_id: object, actor: str, verb: str, allowed: frozenset[RequestState]
) -> AsyncIterator[_Decision]:
    """Lock the request and check that its state allows `verb` (else a Conflict
    carrying current_state); everything in the block is one transaction."""
    async with db.transaction() as tx:
        row = await _locked(tx, request_id)
        if row["request_state"] not in allowed:
            raise Conflict(
                f"cannot {verb} a movement that is {row['request_state']}",
                code="ILLEGAL_STATE",
                detail={"current_state": row["request_state"], "allowed_states": sorted(allowed)},
            )
        yield _Decision(tx, row, actor)


def _node_conflict(node: Mapping[str, Any], message: str, code: str) -> Conflict:
    return Conflict(
        message,
        code=code,
        detail={"current_state": node["node_state"], "node_key": node["node_key"]},
    )


def _node_or_404(snap: progress.Snapshot, node_key: str) -> dict[str, Any]:
    try:
        return snap.node(node_key)
    except KeyError:
        raise NotFound(
            f"movement has no node {node_key!r}", detail={"node_key": node_key}
        ) from None


def _check_four_eyes(d: _Decision, decision: str, node: Mapping[str, Any]) -> None:
    why = four_eyes_violation(decision, d.row["created_by"], d.actor, node)
    if why is not None:
        raise Forbidden(
            why,
            code="FOUR_EYES",
            detail={"created_by": d.row["created_by"], "node_key": node["node_key"]},
        )


_PENDING = frozenset({R.PENDING_APPROVAL})


async def approve_movement(
    db: Database, request_id: object, *, actor: str, actor_role: str = "operator"
) -> dict[str, Any]:
    """PENDING_APPROVAL → APPROVED; the frontier nodes become READY (a qtg_dispatch
    notify follows on commit). Four-eyes: the creator cannot approve.

    A movement created under a policy (issue 45) is approved by its rule: each
    call records one principal's approval (`actor_role` is the caller's role,
    for rules that name a role) and the movement stays PENDING_APPROVAL until
    the rule's count of distinct eligible principals is in; then it is APPROVED
    and its roots wait the rule's delay, if any."""
    async with _deciding(db, request_id, actor, "approve", _PENDING) as d:
        if d.row["created_by"] == actor:
            raise Forbidden(
                "four-eyes: the principal who created a movement cannot approve it",
                code="FOUR_EYES",
                detail={"created_by": d.row["created_by"]},
            )
        expires_at = d.row["expires_at"]
        if expires_at is not None and expires_at <= await d.tx.fetchval(DB_SQL.now):
            raise Conflict(
                "the approval window of this movement has passed",
                code="APPROVAL_EXPIRED",
                detail={
                    "current_state": d.row["request_state"],
                    "expires_at": expires_at.isoformat(),
                },
            )
        delay = 0
        if d.row["policy_version"] is not None:
            step = await policies.approve_under_policy(
                d.tx, d.row, actor=actor, actor_role=actor_role
            )
            if not step.complete:
                return await d.finish(
                    "approval_recorded", approvers=step.approvers, required=step.required
                )
            delay = step.delay_seconds
        snap = await d.snapshot()  # under the request's lock: every node BLOCKED
        roots = approval_releases(snap.nodes)
        for key in roots:
            snap.node(key)["node_state"] = N.READY  # mirrored: release_roots writes them
        frontier = frontier_keys(snap.nodes)
        # The request's state and frontier in one UPDATE, then its roots READY:
        # events request APPROVED, frontier_advanced, each root READY. Deferred:
        # sent with the movement's read in finish(), in one round trip.
        # The seal of what is approved (issue 45 item 5), over the rows read under
        # the lock: the signer refuses anything that no longer matches it.
        seal = approval_seal(snap.request, snap.nodes)
        d.tx.defer(
            SQL.approve_request,
            {
                "request_id": d.row["id"],
                "actor": actor,
                "frontier": frontier,
                "approval_seal": seal,
            },
        )
        d.tx.defer(SQL.release_roots, {"request_id": d.row["id"], "node_keys": roots})
        policies.delay_roots(d.tx, d.row["id"], delay)
        snap.request["request_state"] = R.APPROVED
        snap.request["current_frontier"] = frontier
        # only-manual frontier: WAITING_MANUAL_ACTION
        await progress.settle_request_state(d.tx, snap)
        return await d.finish("approved", approval_seal=seal)


async def reject_movement(
    db: Database, request_id: object, *, actor: str, reason: str | None = None
) -> dict[str, Any]:
    async with _deciding(db, request_id, actor, "reject", _PENDING) as d:
        await d.tx.execute(
            SQL.decide_request,
            {"request_id": d.row["id"], "actor": actor, "request_state": R.REJECTED},
        )
        return await d.finish("rejected", reason=reason)


_CANCELLABLE = frozenset(
    {R.PENDING_APPROVAL, R.APPROVED, R.EXECUTING, R.WAITING_MANUAL_ACTION, R.MANUAL_INTERVENTION}
)


async def cancel_movement(
    db: Database, request_id: object, *, actor: str, reason: str | None = None
) -> dict[str, Any]:
    """Stop a movement. Refused while any node's side effect may be in flight
    (SUBMITTING/SUBMITTED/OBSERVING/UNKNOWN): cancelling cannot undo money that
    is moving; reconcile those nodes first. Refused too once any action node
    has COMPLETED (issue 10): cancelling then would skip the rest of a
    half-moved transfer (a bridge burned, never minted) without paging anyone.
    Such a movement is finished by resume/retry, or reconciled by hand."""
    async with _deciding(db, request_id, actor, "cancel", _CANCELLABLE) as d:
        snap = await d.snapshot()
        done = completed_side_effects(
            NodeView(n["node_key"], n["node_kind"], n["action_type"], n["node_state"])
            for n in snap.nodes
        )
        if done:
            raise Conflict(
                "cannot cancel a movement after a side effect has completed",
                code="SIDE_EFFECTS_COMPLETED",
                detail={"current_state": d.row["request_state"], "nodes": done},
            )
        in_flight = [n["node_key"] for n in snap.nodes if n["node_state"] in IN_FLIGHT_NODE_STATES]
        if in_flight:
            raise Conflict(
                "cannot cancel while side effects may be in flight",
                code="NODES_IN_FLIGHT",
                detail={"current_state": d.row["request_state"], "nodes": in_flight},
            )
        await d.tx.execute(SQL.skip_unstarted_nodes, {"request_id": d.row["id"]})
        await d.tx.execute(
            SQL.decide_request,
            {"request_id": d.row["id"], "actor": actor, "request_state": R.CANCELLED},
        )
        await progress.refresh_frontier(d.tx, await d.snapshot())
        return await d.finish("cancelled", reason=reason)


_RESUMABLE = frozenset({R.MANUAL_INTERVENTION, R.WAITING_MANUAL_ACTION})


async def resume_movement(db: Database, request_id: object, *, actor: str) -> dict[str, Any]:
    """MANUAL_INTERVENTION / WAITING_MANUAL_ACTION → EXECUTING, so that the
    workers (recovery in particular) sweep it again (reference §3)."""
    async with _deciding(db, request_id, actor, "resume", _RESUMABLE) as d:
        # An operator who resumes after an observation timeout has looked: the
        # timed-out nodes go back to recovery, with a fresh observation window.
        rearmed = await d.tx.fetch(
            SQL.rearm_timed_out_nodes, {"request_id": d.row["id"], "actor": actor}
        )
        await progress.set_request_state(d.tx, await d.snapshot(), R.EXECUTING)
        return await d.finish("resumed", rearmed=[r["node_key"] for r in rearmed])


_RETRYABLE = frozenset({R.FAILED, R.MANUAL_INTERVENTION, R.EXECUTING, R.WAITING_MANUAL_ACTION})


async def retry_node(
    db: Database, request_id: object, node_key: str, *, actor: str
) -> dict[str, Any]:
    """A FAILED node goes back to READY for a new attempt (a new idempotency key:
    FAILED means the last attempt is known not to have moved money). Four-eyes
    for an action node: a new submission moves money, so not by the creator."""
    async with _deciding(db, request_id, actor, "retry a node of", _RETRYABLE) as d:
        snap = await d.snapshot()
        node = _node_or_404(snap, node_key)
        _check_four_eyes(d, "retry", node)
        if node["node_state"] != N.FAILED:
            raise _node_conflict(
                node,
                f"node {node_key} is {node['node_state']}; only a FAILED node can be retried",
                "ILLEGAL_NODE_STATE",
            )
        if not await d.tx.fetchval(SQL.failure_proven, {"node_id": node["id"]}):
            # a new attempt beside one that can still be mined could pay twice (issue 43
            # item 3): FAILED said by operators, or bytes of this attempt still live
            raise Conflict(
                f"node {node_key} is FAILED but nothing proves its attempt moved no money: "
                "what it signed could still be mined, or operators said FAILED without the "
                "chain's proof; it cannot be retried",
                code="FAILURE_NOT_PROVEN",
                detail={
                    "current_state": node["node_state"],
                    "node_key": node_key,
                    "attempt_no": node["attempt_no"],
                    "error_code": node.get("error_code"),
                },
            )
        await d.tx.fetch(SQL.retry_node, {"request_id": d.row["id"], "node_key": node_key})
        node["node_state"] = N.READY
        await progress.set_request_state(d.tx, snap, R.EXECUTING)
        await progress.refresh_frontier(d.tx, snap)
        await progress.settle_request_state(d.tx, snap)
        return await d.finish("node_retried", node_key=node_key, attempt_no=node["attempt_no"])


_MANUAL_COMPLETABLE = frozenset({R.WAITING_MANUAL_ACTION, R.EXECUTING})


async def complete_manual_node(
    db: Database,
    request_id: object,
    node_key: str,
    *,
    actor: str,
    artifacts: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An operator completes a READY manual node; successors are released as
    for any completion."""
    if artifacts is not None and not isinstance(artifacts, Mapping):
        raise InvalidInput("artifacts must be an object", detail={"field": "artifacts"})
    verb = "complete a manual node of"
    async with _deciding(db, request_id, actor, verb, _MANUAL_COMPLETABLE) as d:
        snap = await d.snapshot()
        node = _node_or_404(snap, node_key)
        if node["node_kind"] != "manual":
            raise _node_conflict(node, f"node {node_key} is not a manual node", "NOT_MANUAL")
        _check_four_eyes(d, "complete_manual", node)
        if node["node_state"] != N.READY:
            raise _node_conflict(
                node,
                f"manual node {node_key} is {node['node_state']}, not READY",
                "ILLEGAL_NODE_STATE",
            )
        await progress.complete_node(
            d.tx, snap, node, {"completed_by": actor}, dict(artifacts or {})
        )
        return await d.finish("manual_node_completed", node_key=node_key)
