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
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from qtg.config import Settings
from qtg.db import Database, Jsonb, Tx, sql_family
from qtg.domain.plan import canonical_json, compile_graph, compiled_plan_hash
from qtg.domain.states import IN_FLIGHT_NODE_STATES, NodeState, RequestState
from qtg.services import progress
from qtg.services.auditing import record_audit
from qtg.services.errors import Conflict, Forbidden, IdempotencyConflict, InvalidInput, NotFound

SQL = sql_family(
    "movements",
    "find_by_idempotency_key",
    "load_active_version",
    "insert_request",
    "insert_nodes",
    "get_request",
    "lock_request",
    "list_nodes",
    "list_requests",
    "approve_request",
    "decide_request",
    "release_roots",
    "skip_unstarted_nodes",
    "retry_node",
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
    try:
        return request_id if isinstance(request_id, uuid.UUID) else uuid.UUID(str(request_id))
    except ValueError:
        raise NotFound(
            f"movement {request_id!r} not found", detail={"request_id": str(request_id)}
        ) from None


# ------------------------------------------------------------------ reading


async def _movement(tx: Tx, request_id: uuid.UUID) -> dict[str, Any]:
    row = await tx.fetchrow(SQL.get_request, {"request_id": request_id})
    if row is None:
        raise NotFound(f"movement {request_id} not found", detail={"request_id": str(request_id)})
    row["nodes"] = await tx.fetch(SQL.list_nodes, {"request_id": request_id})
    return row


async def get_movement(db: Database, request_id: object) -> dict[str, Any]:
    rid = _request_uuid(request_id)
    async with db.transaction() as tx:
        return await _movement(tx, rid)


def encode_cursor(row: Mapping[str, Any]) -> str:
    return f"{row['created_at'].isoformat()}|{row['id']}"


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        created_at, request_id = cursor.split("|", 1)
        return datetime.fromisoformat(created_at), uuid.UUID(request_id)
    except ValueError:
        raise InvalidInput(
            "cursor is not a cursor this API returned", detail={"field": "cursor"}
        ) from None


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
) -> tuple[dict[str, Any], bool]:
    """Create a PENDING_APPROVAL movement from the template's active version.

    The same idempotency key with the same body returns the first movement
    (created_now False); with another body it is refused.
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
            SQL.find_by_idempotency_key, {"idempotency_key": idempotency_key}
        )
        if existing is None:
            version = await tx.fetchrow(SQL.load_active_version, {"template_key": template_key})
            if version is None:
                raise NotFound(
                    f"template {template_key!r} not found or has no active version",
                    detail={"field": "template_key", "template_key": template_key},
                )
            plan = compile_graph(version["graph"])
            request_id = await tx.fetchval(
                SQL.insert_request,
                {
                    "network_class": settings.network_class,
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
                SQL.find_by_idempotency_key, {"idempotency_key": idempotency_key}
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


def _conflict(
    row: Mapping[str, Any], action: str, allowed: frozenset[RequestState] | set[RequestState]
) -> Conflict:
    return Conflict(
        f"cannot {action} a movement that is {row['request_state']}",
        code="ILLEGAL_STATE",
        detail={
            "current_state": row["request_state"],
            "allowed_states": sorted(allowed),
        },
    )


async def approve_movement(db: Database, request_id: object, *, actor: str) -> dict[str, Any]:
    """PENDING_APPROVAL → APPROVED; the frontier nodes become READY (a qtg_dispatch
    notify follows on commit). Four-eyes: the creator cannot approve."""
    async with db.transaction() as tx:
        row = await _locked(tx, request_id)
        if row["request_state"] != R.PENDING_APPROVAL:
            raise _conflict(row, "approve", {R.PENDING_APPROVAL})
        if row["created_by"] == actor:
            raise Forbidden(
                "four-eyes: the principal who created a movement cannot approve it",
                code="FOUR_EYES",
                detail={"created_by": row["created_by"]},
            )
        if row["expires_at"] is not None and row["expires_at"] <= await _now(tx):
            raise Conflict(
                "the approval window of this movement has passed",
                code="APPROVAL_EXPIRED",
                detail={
                    "current_state": row["request_state"],
                    "expires_at": row["expires_at"].isoformat(),
                },
            )
        await tx.execute(SQL.approve_request, {"request_id": row["id"], "actor": actor})
        await tx.fetch(SQL.release_roots, {"request_id": row["id"]})
        snap = await progress.load_snapshot(tx, row["id"])
        await progress.refresh_frontier(tx, snap)
        await progress.settle_request_state(tx, snap)  # only-manual frontier: WAITING_MANUAL_ACTION
        await record_audit(
            tx, actor=actor, action="movement.approved", object_type="movement", object_id=row["id"]
        )
        return await _movement(tx, row["id"])


async def _now(tx: Tx) -> datetime:
    return await tx.fetchval(DB_SQL.now)


async def reject_movement(
    db: Database, request_id: object, *, actor: str, reason: str | None = None
) -> dict[str, Any]:
    async with db.transaction() as tx:
        row = await _locked(tx, request_id)
        if row["request_state"] != R.PENDING_APPROVAL:
            raise _conflict(row, "reject", {R.PENDING_APPROVAL})
        await tx.execute(
            SQL.decide_request,
            {"request_id": row["id"], "actor": actor, "request_state": R.REJECTED},
        )
        await record_audit(
            tx,
            actor=actor,
            action="movement.rejected",
            object_type="movement",
            object_id=row["id"],
            detail={"reason": reason},
        )
        return await _movement(tx, row["id"])


_CANCELLABLE = frozenset(
    {R.PENDING_APPROVAL, R.APPROVED, R.EXECUTING, R.WAITING_MANUAL_ACTION, R.MANUAL_INTERVENTION}
)


async def cancel_movement(
    db: Database, request_id: object, *, actor: str, reason: str | None = None
) -> dict[str, Any]:
    """Stop a movement. Refused while any node's side effect may be in flight
    (SUBMITTING/SUBMITTED/OBSERVING/UNKNOWN): cancelling cannot undo money that
    is moving; reconcile those nodes first."""
    async with db.transaction() as tx:
        row = await _locked(tx, request_id)
        if row["request_state"] not in _CANCELLABLE:
            raise _conflict(row, "cancel", _CANCELLABLE)
        snap = await progress.load_snapshot(tx, row["id"])
        in_flight = [n["node_key"] for n in snap.nodes if n["node_state"] in IN_FLIGHT_NODE_STATES]
        if in_flight:
            raise Conflict(
                "cannot cancel while side effects may be in flight",
                code="NODES_IN_FLIGHT",
                detail={"current_state": row["request_state"], "nodes": in_flight},
            )
        await tx.execute(SQL.skip_unstarted_nodes, {"request_id": row["id"]})
        await tx.execute(
            SQL.decide_request,
            {"request_id": row["id"], "actor": actor, "request_state": R.CANCELLED},
        )
        snap = await progress.load_snapshot(tx, row["id"])
        await progress.refresh_frontier(tx, snap)
        await record_audit(
            tx,
            actor=actor,
            action="movement.cancelled",
            object_type="movement",
            object_id=row["id"],
            detail={"reason": reason},
        )
        return await _movement(tx, row["id"])


_RESUMABLE = frozenset({R.MANUAL_INTERVENTION, R.WAITING_MANUAL_ACTION})


async def resume_movement(db: Database, request_id: object, *, actor: str) -> dict[str, Any]:
    """MANUAL_INTERVENTION / WAITING_MANUAL_ACTION → EXECUTING, so that the
    workers (recovery in particular) sweep it again (reference §3)."""
    async with db.transaction() as tx:
        row = await _locked(tx, request_id)
        if row["request_state"] not in _RESUMABLE:
            raise _conflict(row, "resume", _RESUMABLE)
        snap = await progress.load_snapshot(tx, row["id"])
        await progress.set_request_state(tx, snap, R.EXECUTING)
        await record_audit(
            tx, actor=actor, action="movement.resumed", object_type="movement", object_id=row["id"]
        )
        return await _movement(tx, row["id"])


_RETRYABLE = frozenset({R.FAILED, R.MANUAL_INTERVENTION, R.EXECUTING, R.WAITING_MANUAL_ACTION})


async def retry_node(
    db: Database, request_id: object, node_key: str, *, actor: str
) -> dict[str, Any]:
    """A FAILED node goes back to READY for a new attempt (a new idempotency key:
    FAILED means the last attempt is known not to have moved money)."""
    async with db.transaction() as tx:
        row = await _locked(tx, request_id)
        if row["request_state"] not in _RETRYABLE:
            raise _conflict(row, "retry a node of", _RETRYABLE)
        snap = await progress.load_snapshot(tx, row["id"])
        node = _node_or_404(snap, node_key)
        if node["node_state"] != N.FAILED:
            raise Conflict(
                f"node {node_key} is {node['node_state']}; only a FAILED node can be retried",
                code="ILLEGAL_NODE_STATE",
                detail={"current_state": node["node_state"], "node_key": node_key},
            )
        await tx.fetch(SQL.retry_node, {"request_id": row["id"], "node_key": node_key})
        node["node_state"] = N.READY
        await progress.set_request_state(tx, snap, R.EXECUTING)
        await progress.refresh_frontier(tx, snap)
        await progress.settle_request_state(tx, snap)
        await record_audit(
            tx,
            actor=actor,
            action="movement.node_retried",
            object_type="movement",
            object_id=row["id"],
            detail={"node_key": node_key, "attempt_no": node["attempt_no"]},
        )
        return await _movement(tx, row["id"])


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
    async with db.transaction() as tx:
        row = await _locked(tx, request_id)
        allowed = {R.WAITING_MANUAL_ACTION, R.EXECUTING}
        if row["request_state"] not in allowed:
            raise _conflict(row, "complete a manual node of", allowed)
        snap = await progress.load_snapshot(tx, row["id"])
        node = _node_or_404(snap, node_key)
        if node["node_kind"] != "manual":
            raise Conflict(
                f"node {node_key} is not a manual node",
                code="NOT_MANUAL",
                detail={"current_state": node["node_state"], "node_key": node_key},
            )
        if node["node_state"] != N.READY:
            raise Conflict(
                f"manual node {node_key} is {node['node_state']}, not READY",
                code="ILLEGAL_NODE_STATE",
                detail={"current_state": node["node_state"], "node_key": node_key},
            )
        await progress.complete_node(tx, snap, node, {"completed_by": actor}, dict(artifacts or {}))
        await record_audit(
            tx,
            actor=actor,
            action="movement.manual_node_completed",
            object_type="movement",
            object_id=row["id"],
            detail={"node_key": node_key},
        )
        return await _movement(tx, row["id"])


def _node_or_404(snap: progress.Snapshot, node_key: str) -> dict[str, Any]:
    try:
        return snap.node(node_key)
    except KeyError:
        raise NotFound(
            f"movement has no node {node_key!r}", detail={"node_key": node_key}
        ) from None
