"""node_dispatcher (reference §1): feed READY nodes into the execution pipeline.

One node per pass. The claim walks unlocked FIFO candidates and claims each
under a miss-only savepoint. Then, still holding node and request:
plan-hash drift check → ExecutionContext (with `$ref` resolution) → the
plan's risk controls → preflight → prepare → sign. Then the write-ahead step
(DESIGN §4): the node becomes SUBMITTING with its prepared action and
idempotency key, and that is COMMITTED before the executor's submit is
called. A crash after that commit leaves SUBMITTING, which node_recovery
resolves through recover() — submit is never called twice for one attempt.

Nothing before the write-ahead commit has a side effect, so any failure there
is a safe FAILED (an operator may retry). After it, only the executor's own
`SubmitRejected` means "nothing happened"; any other error is UNKNOWN.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

import msgspec

from qtg.db import Jsonb, Tx, sql_family
from qtg.domain.context import ExecutionContext
from qtg.domain.execution import (
    build_execution_context,
    build_sign_request,
    idempotency_key,
    plan_hash_drifted,
    risk_control_violation,
)
from qtg.domain.plan import PlanError
from qtg.domain.refs import ConfigRefResolutionError
from qtg.domain.states import NodeState, RequestState
from qtg.providers.base import Executor, PreparedAction, ProviderError, SubmitRejected
from qtg.providers.registry import UnknownExecutorError, UnknownSignerError
from qtg.services import progress
from qtg.services.batch import run_each
from qtg.services.context import ServiceContext

log = logging.getLogger("qtg.services.dispatch")

SQL = sql_family(
    "dispatch",
    "list_candidates",
    "claim_candidate",
    "write_ahead",
    "start_observing",
    "lock_submitting",
    "lock_request",
    "record_submitted",
)

N, R = NodeState, RequestState

#: How many unlocked candidate ids one listing returns; the walk lists again,
#: excluding the ids already tried, when all of them missed.
CANDIDATE_PAGE = 10


@dataclass(frozen=True, slots=True)
class Submission:
    """A node committed as SUBMITTING, to be submitted outside the claim transaction."""

    request_id: Any
    node_id: Any
    attempt_no: int
    idempotency_key: str
    context: ExecutionContext
    prepared: PreparedAction
    signature: str | None
    executor: Executor


async def dispatch_ready_nodes(ctx: ServiceContext) -> int:
    """One pass: claim at most one READY node and drive it as far as submit.

    With MG_NODE_DISPATCH_CONCURRENCY = n > 1 a pass runs n such single-node
    dispatches side by side, each its own claim and transactions — as n
    runtime processes would. The default, 1, is the reference's serial
    dispatcher. Returns how many nodes were dispatched.
    """
    concurrency = ctx.settings.node_dispatch_concurrency
    if concurrency == 1:
        return await dispatch_one_node(ctx)
    return await run_each(lambda _: dispatch_one_node(ctx), range(concurrency), concurrency)


async def dispatch_one_node(ctx: ServiceContext) -> int:
    """Claim at most one READY node and drive it as far as submit. Returns 0 or 1."""
    async with ctx.db.transaction() as tx:
        claimed = await _claim_and_read(tx)
        if claimed is None:
            return 0
        submission = await _prepare(ctx, tx, *claimed)
    # the write-ahead commit happened when the transaction above closed
    if submission is not None:
        await _submit(ctx, submission)
    return 1


async def claim_ready_node(tx: Tx) -> dict[str, Any] | None:
    """The reference's per-candidate claim: walk unlocked FIFO candidates; a
    miss rolls back only that attempt's savepoint, releasing any partial lock,
    and the walk goes on past the ids already tried. Returns the claimed node
    (node and request locked) with its id and request id, or None."""
    tried: list[Any] = []
    while True:
        candidates = await tx.fetch(
            SQL.list_candidates, {"tried": tried, "limit": CANDIDATE_PAGE}
        )
        if not candidates:
            return None
        for candidate in candidates:
            row = await tx.claim(SQL.claim_candidate, {"candidate_id": candidate["id"]})
            if row is not None:
                return row
            tried.append(candidate["id"])


async def _claim_and_read(tx: Tx) -> tuple[Any, progress.Snapshot] | None:
    row = await claim_ready_node(tx)
    if row is None:
        return None
    return row["id"], await progress.load_snapshot(tx, row["request_id"], plan_edges=True)


async def _prepare(
    ctx: ServiceContext, tx: Tx, node_id: Any, snap: progress.Snapshot
) -> Submission | None:
    node = snap.node_by_id(node_id)
    if snap.request["request_state"] == R.APPROVED:
        await progress.set_request_state(tx, snap, R.EXECUTING)

    async def fail(code: str, detail: str) -> None:
        log.warning(
            "node failed before submit",
            extra={
                "request_id": str(snap.request["id"]),
                "node_key": node["node_key"],
                "error_code": code,
            },
        )
        await progress.node_finished_badly(tx, snap, node, N.FAILED, code, detail)

    try:
        drifted = plan_hash_drifted(snap.request, snap.nodes, snap.plan_edges)
    except PlanError as exc:
        drifted, why = True, f"stored plan no longer compiles: {exc}"
    else:
        why = "plan, intent or input_params changed since the movement was created"
    if drifted:
        await fail("PLAN_HASH_DRIFT", why)
        return None

    try:
        context = build_execution_context(snap.request, node, snap.nodes)
    except ConfigRefResolutionError as exc:
        await fail("CONFIG_REF_UNRESOLVED", str(exc))
        return None

    if node["node_kind"] == "observe":
        tx.defer(SQL.start_observing, {"node_id": node["id"], "attempt_no": context.attempt_no})
        return None

    violation = risk_control_violation(snap.request["risk_controls"], snap.request["intent"])
    if violation is not None:
        await fail("RISK_CONTROL_VIOLATION", violation)
        return None

    try:
        executor = ctx.providers.executor_for(node["action_type"], node["executor_key"])
        await executor.preflight(context)
        prepared = await executor.prepare(context)
        if hashlib.sha256(prepared.payload.encode()).hexdigest() != prepared.payload_hash:
            await fail(
                "PAYLOAD_HASH_MISMATCH", "prepared payload does not hash to its payload_hash"
            )
            return None
        signature = None
        if prepared.needs_signature:
            if not prepared.signer_key:
                await fail(
                    "SIGNER_NOT_NAMED", "the prepared action needs a signature but names no signer"
                )
                return None
            signer = ctx.providers.signer(prepared.signer_key)
            signature = await signer.sign(build_sign_request(context, prepared))
    except (UnknownExecutorError, UnknownSignerError) as exc:
        await fail("EXECUTOR_NOT_FOUND", str(exc))
        return None
    except ProviderError as exc:
        await fail(exc.code, exc.detail)
        return None
    except Exception as exc:  # no side effect yet: a safe FAILED, not a stuck queue head
        log.exception("preparing a node raised", extra={"node_key": node["node_key"]})
        await fail("PREPARE_ERROR", f"{type(exc).__name__}: {exc}")
        return None

    key = idempotency_key(node["id"], context.attempt_no)
    tx.defer(  # committed (with the state changes above) when the transaction closes
        SQL.write_ahead,
        {
            "node_id": node["id"],
            "attempt_no": context.attempt_no,
            "idempotency_key": key,
            "prepared_action": Jsonb({**msgspec.to_builtins(prepared), "signature": signature}),
        },
    )
    return Submission(
        request_id=snap.request["id"],
        node_id=node["id"],
        attempt_no=context.attempt_no,
        idempotency_key=key,
        context=msgspec.structs.replace(context, idempotency_key=key),
        prepared=prepared,
        signature=signature,
        executor=executor,
    )


async def _submit(ctx: ServiceContext, sub: Submission) -> None:
    """Call submit while holding the SUBMITTING row (recovery skips locked rows),
    then record what happened. Cancellation (shutdown) rolls back and leaves
    SUBMITTING for recovery — exactly as a crash would."""
    async with ctx.db.transaction() as tx:
        held = await tx.fetchrow(
            SQL.lock_submitting, {"node_id": sub.node_id, "attempt_no": sub.attempt_no}
        )
        if held is None:
            log.warning(
                "SUBMITTING node moved before submit; not submitting",
                extra={"node_id": str(sub.node_id)},
            )
            return
        outcome: tuple[NodeState, str, str] | None = None
        try:
            result = await sub.executor.submit(
                sub.context, sub.prepared, sub.signature, sub.idempotency_key
            )
        except SubmitRejected as exc:
            outcome = (N.FAILED, exc.code, exc.detail)
        except Exception as exc:
            log.warning(
                "submit outcome unknown",
                extra={"node_id": str(sub.node_id), "error": f"{type(exc).__name__}: {exc}"},
            )
            outcome = (N.UNKNOWN, "SUBMIT_OUTCOME_UNKNOWN", f"{type(exc).__name__}: {exc}")
        if outcome is None:
            tx.defer(
                SQL.record_submitted,
                {
                    "node_id": sub.node_id,
                    "provider_refs": Jsonb(result.provider_refs),
                    "artifacts": Jsonb(result.artifacts),
                },
            )
            return
        # Lock order node → request cannot deadlock: every other path takes the
        # request with SKIP LOCKED, or never touches this SUBMITTING node.
        await tx.fetchrow(SQL.lock_request, {"request_id": sub.request_id})
        snap = await progress.load_snapshot(tx, sub.request_id)
        await progress.node_finished_badly(tx, snap, snap.node_by_id(sub.node_id), *outcome)
