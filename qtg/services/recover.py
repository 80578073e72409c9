"""node_recovery (reference §3): find out what really happened to UNKNOWN nodes
and to SUBMITTING nodes stranded past their lane's grace cutoff.

Four arms in priority order — CCIP, Stargate, CEX, everything else — each
taking max(1, batch // 4), longest-idle first, of EXECUTING requests of this
deployment's network class only. The executor's recover() looks the attempt's
idempotency key up at the provider:

- it happened → SUBMITTED for re-observation, or COMPLETED;
- it failed for good → FAILED (safe to retry by hand);
- it provably never happened (NOT_SUBMITTED) → back to READY for a new
  attempt while attempts remain (MG_NODE_MAX_ATTEMPTS), else FAILED. Beyond the
  reference, which says FAILED: a database restart or a crash between the
  write-ahead commit and submit must not fail a movement whose money never
  moved, nor leave a bridge half-done waiting for a person (issue 10);
- it still cannot tell (or recover raised, or the executor is gone) → the
  node is paced: next_recover_at moves back (faults.recovery_retry_delay) and
  the pass does NOT count it, so the drain rule does not go round at once.

No lock is held across recover() (issue 44 item 3), the observer's lease
pattern: the claim (node and request, SKIP LOCKED) stamps the node with a
token in recover_lease and a next_recover_at past the call, and commits; the
provider is asked with no transaction open (cut off at half of
MG_NODE_OBSERVE_LEASE_SECONDS: undecided); then the request and the node are
locked again and the answer is written only if the lease still holds, in the
same attempt and state, on a snapshot read under those locks. So a slow RPC
stalls neither the observer's writes for the request, nor its settle, nor an
operator's resolution (no NODE_BUSY); an answer whose lease was lost, or
whose node someone moved on meanwhile, is discarded.

One node's failure is recorded on that node and never aborts the pass or its
sweeps (issue 44 item 2).

After the arms, each pass runs qtg.services.node_attention's sweeps (issue
25): a request left EXECUTING with nothing in flight is settled, and a node
undecided for MG_NODE_UNKNOWN_ATTENTION_SECONDS pages (MANUAL_INTERVENTION).
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from functools import partial
from typing import Any

import trio

from qtg.config import Settings
from qtg.db import Jsonb, Tx, sql_family
from qtg.domain.execution import build_execution_context
from qtg.domain.faults import may_attempt_again, recovery_retry_delay, submitting_grace_seconds
from qtg.domain.observe_policy import RECOVERY_LANES, recovery_arm_size
from qtg.domain.states import NodeState
from qtg.providers.answers import clean_text
from qtg.providers.base import RecoverOutcome, RecoverResult
from qtg.services import node_attention, progress
from qtg.services.batch import run_each
from qtg.services.context import ServiceContext

log = logging.getLogger("qtg.services.recover")

SQL = sql_family(
    "recover",
    "list_candidates",
    "claim_node",
    "record_in_flight",
    "touch_node",
    "record_failure",
    "new_attempt",
    "next_due",
    "take_lease",
    "relock",
)

N = NodeState

#: LIKE patterns of the named lanes ("_" escaped: it is a LIKE wildcard).
LANE_PATTERNS: dict[str, str | None] = {
    lane: (None if lane == "other" else f"{lane}\\_%") for lane in RECOVERY_LANES
}
NAMED_PATTERNS = [p for p in LANE_PATTERNS.values() if p is not None]
CONCURRENCY = 5


def lane_grace_seconds(settings: Settings, lane: str) -> float:
    """A lane's SUBMITTING grace cutoff: MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS_<LANE>,
    else MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS."""
    per_lane = {
        name: getattr(settings, f"node_recovery_submitting_grace_seconds_{name}")
        for name in RECOVERY_LANES
    }
    return submitting_grace_seconds(lane, per_lane, settings.node_recovery_submitting_grace_seconds)


async def recover_unknown_nodes(ctx: ServiceContext) -> int:
    """One pass over the four arms; returns how many nodes recovery resolved
    (an undecided node is not counted: nothing changed, no reason to go round)."""
    settings = ctx.settings
    arm = recovery_arm_size(settings.node_recovery_batch_size)
    total = 0
    failures: list[Exception] = []
    for lane in RECOVERY_LANES:
        grace = lane_grace_seconds(settings, lane)
        candidates = await ctx.db.fetch(
            SQL.list_candidates,
            {
                "network_class": settings.network_class,
                "grace_seconds": grace,
                "dead_owner_seconds": settings.node_recovery_dead_owner_seconds,
                "lane_pattern": LANE_PATTERNS[lane],
                "named_patterns": NAMED_PATTERNS,
                "limit": arm,
            },
        )
        if candidates:
            total += await run_each(
                partial(_recover_row, ctx, grace_seconds=grace, failures=failures),
                candidates,
                CONCURRENCY,
            )
    # Then what recovery alone cannot end (issue 25): requests whose settle was
    # lost, and nodes undecided for too long, put in front of a person. They run
    # whatever one node's recovery did (issue 44 item 2): a failure above was
    # recorded on its node, and one that could not even be recorded is raised
    # only now.
    total += await node_attention.sweep(ctx)
    if failures:
        raise failures[0]
    return total


async def _recover_row(
    ctx: ServiceContext, row: dict[str, Any], *, grace_seconds: float, failures: list[Exception]
) -> int:
    """`_recover_isolated` for one candidate row (run_each hands each item alone)."""
    return await _recover_isolated(ctx, row["id"], grace_seconds, failures)


async def _recover_isolated(
    ctx: ServiceContext, node_id: Any, grace_seconds: float, failures: list[Exception]
) -> int:
    """`_recover_one`, whose failure (a value the database refuses in its writes,
    a rule that raised) is recorded on that node — paced like an undecided
    recover(), so it goes to the back of its lane and pages past the bound —
    and never reaches the other nodes of the pass nor its sweeps."""
    try:
        return await _recover_one(ctx, node_id, grace_seconds)
    except Exception as exc:
        detail = clean_text(f"recovery of this node failed: {type(exc).__name__}: {exc}")
        log.error("recovering a node failed", extra={"node_id": str(node_id), "error": detail})
        try:
            await ctx.db.execute(
                SQL.record_failure,
                {
                    "node_id": node_id,
                    "error_detail": detail,
                    "delay_seconds": ctx.settings.node_recovery_retry_max_seconds,
                },
            )
        except Exception as again:  # the database itself: raised once the pass is over
            failures.append(again)
        return 0


async def next_recovery_due(ctx: ServiceContext) -> datetime | None:
    """The earliest next attempt of a paced UNKNOWN node, or the moment a SUBMITTING
    node's owner will count as gone (None: none waiting)."""
    value: datetime | None = await ctx.db.fetchval(
        SQL.next_due,
        {
            "network_class": ctx.settings.network_class,
            "dead_owner_seconds": ctx.settings.node_recovery_dead_owner_seconds,
        },
    )
    return value  # timestamptz or NULL


async def _recover_one(ctx: ServiceContext, node_id: Any, grace_seconds: float) -> int:
    """Claim, lease and commit; ask recover() with no lock held; then re-lock and
    write only if the lease still holds (issue 44 item 3: a slow provider call
    must not hold the request, which the observer's writes, the settle and an
    operator's resolution need)."""
    settings = ctx.settings
    token = uuid.uuid4()
    lease_seconds = settings.node_observe_lease_seconds
    async with ctx.db.transaction() as tx:
        params = {
            "node_id": node_id,
            "network_class": settings.network_class,
            "grace_seconds": grace_seconds,
            "dead_owner_seconds": settings.node_recovery_dead_owner_seconds,
        }
        claimed = await progress.claim_and_read(tx, SQL.claim_node, params)
        if claimed is None:
            return 0
        _, snap = claimed
        node = snap.node_by_id(node_id)
        leased = await tx.fetchrow(
            SQL.take_lease, {"node_id": node_id, "lease": token, "lease_seconds": lease_seconds}
        )
        assert leased is not None  # the claim holds the row
    # committed: nothing is locked while the provider is asked
    # cut off well inside the lease: nobody else recovers the node meanwhile
    asked: RecoverResult | str = f"recover() took longer than {lease_seconds / 2:g} s"
    with trio.move_on_after(lease_seconds / 2):
        asked = await _ask(ctx, snap, node)
    async with ctx.db.transaction() as tx:
        held = await tx.fetchrow(
            SQL.relock,
            {
                "request_id": snap.request["id"],
                "node_id": node_id,
                "network_class": settings.network_class,
                "lease": token,
                "attempt_no": leased["attempt_no"],
                "node_state": leased["node_state"],
            },
        )
        if held is None:
            log.info(
                "recovery answer discarded: lease lost or node moved on",
                extra={"node_key": node["node_key"]},
            )
            return 0
        # the rules run on what the database holds now, under the locks
        snap = await progress.load_snapshot(tx, snap.request["id"])
        node = snap.node_by_id(node_id)
        return await _apply(ctx, tx, snap, node, asked)


async def _ask(
    ctx: ServiceContext, snap: progress.Snapshot, node: dict[str, Any]
) -> RecoverResult | str:
    """recover()'s answer for one node, or why it could not be asked (no database access)."""
    try:
        context = build_execution_context(snap.request, node, snap.nodes, in_flight=True)
        executor = ctx.providers.executor_for(node["action_type"], node["executor_key"])
        return await executor.recover(context)
    except Exception as exc:
        log.warning(
            "recover raised",
            extra={"node_key": node["node_key"], "error": f"{type(exc).__name__}: {exc}"},
        )
        return f"recover raised {type(exc).__name__}: {exc}"


async def _apply(
    ctx: ServiceContext,
    tx: Tx,
    snap: progress.Snapshot,
    node: dict[str, Any],
    result: RecoverResult | str,
) -> int:
    """Write recover()'s answer (or, given a string, why there is none) for a node
    `tx` holds under a live lease; 1 if the node was decided."""
    settings = ctx.settings
    node_id = node["id"]

    async def undecided(detail: str) -> int:
        if node["node_state"] == N.SUBMITTING:
            await progress.node_finished_badly(
                tx, snap, node, N.UNKNOWN, "RECOVERY_INCONCLUSIVE", detail
            )
        delay = recovery_retry_delay(
            node["recover_attempts"] + 1,
            settings.node_recovery_retry_base_seconds,
            settings.node_recovery_retry_max_seconds,
        )
        tx.defer(
            SQL.touch_node,
            {"node_id": node_id, "error_detail": clean_text(detail), "delay_seconds": delay},
        )
        return 0

    if isinstance(result, str):
        return await undecided(result)

    if result.outcome == RecoverOutcome.SUBMITTED:
        tx.defer(
            SQL.record_in_flight,
            {
                "node_id": node_id,
                "node_state": N.OBSERVING if node["node_kind"] == "observe" else N.SUBMITTED,
                "provider_refs": Jsonb(result.provider_refs),
                "artifacts": Jsonb(result.artifacts),
            },
        )
    elif result.outcome == RecoverOutcome.COMPLETED:
        await progress.complete_node(tx, snap, node, result.provider_refs, result.artifacts)
    elif result.outcome == RecoverOutcome.NOT_SUBMITTED and may_attempt_again(
        # attempts given back untouched (lane stops, RetryLater) do not count
        node["attempt_no"] - int(node.get("unsent_attempts") or 0),
        settings.node_max_attempts,
    ):
        log.info(
            "attempt never happened; node READY for a new attempt",
            extra={"node_key": node["node_key"], "attempt_no": node["attempt_no"]},
        )
        tx.defer(
            SQL.new_attempt,
            {
                "node_id": node_id,
                "error_code": result.error_code or "NOT_SUBMITTED",
                "error_detail": (
                    f"attempt {node['attempt_no']} never happened"
                    f" ({result.error_detail or 'recover: not submitted'}); attempting again"
                )[:2000],
            },
        )
        node["node_state"] = N.READY
        await progress.refresh_frontier(tx, snap)
    elif result.outcome in (RecoverOutcome.FAILED, RecoverOutcome.NOT_SUBMITTED):
        await progress.node_finished_badly(
            tx,
            snap,
            node,
            N.FAILED,
            result.error_code or "RECOVERED_NOT_SUBMITTED",
            result.error_detail,
        )
    else:
        return await undecided(result.error_detail or "provider cannot tell yet")
    return 1
