"""node_recovery (reference §3): find out what really happened to UNKNOWN nodes
and to SUBMITTING nodes stranded past the grace cutoff.

Four arms in priority order — CCIP, Stargate, CEX, everything else — each
taking max(1, batch // 4), longest-idle first, of EXECUTING requests only.
The executor's recover() looks the attempt's idempotency key up at the
provider: it happened (→ SUBMITTED for re-observation, or COMPLETED), it did
not (→ FAILED, safe to retry by hand), or it still cannot tell.
"""

from __future__ import annotations

import logging
from typing import Any

from qtg.db import Jsonb, sql_family
from qtg.domain.execution import build_execution_context
from qtg.domain.observe_policy import RECOVERY_LANES, recovery_arm_size
from qtg.domain.states import NodeState
from qtg.providers.base import RecoverOutcome
from qtg.services import progress
from qtg.services.batch import run_each
from qtg.services.context import ServiceContext

log = logging.getLogger("qtg.services.recover")

SQL = sql_family("recover", "list_candidates", "claim_node", "record_in_flight", "touch_node")

N = NodeState

#: LIKE patterns of the named lanes ("_" escaped: it is a LIKE wildcard).
LANE_PATTERNS: dict[str, str | None] = {
    lane: (None if lane == "other" else f"{lane}\\_%") for lane in RECOVERY_LANES
}
NAMED_PATTERNS = [p for p in LANE_PATTERNS.values() if p is not None]
CONCURRENCY = 5


async def recover_unknown_nodes(ctx: ServiceContext) -> int:
    """One pass over the four arms; returns how many nodes recovery looked at."""
    settings = ctx.settings
    arm = recovery_arm_size(settings.node_recovery_batch_size)
    total = 0
    for lane in RECOVERY_LANES:
        candidates = await ctx.db.fetch(
            SQL.list_candidates,
            {
                "grace_seconds": settings.node_recovery_submitting_grace_seconds,
                "lane_pattern": LANE_PATTERNS[lane],
                "named_patterns": NAMED_PATTERNS,
                "limit": arm,
            },
        )
        if candidates:
            total += await run_each(
                lambda row: _recover_one(ctx, row["id"]), candidates, CONCURRENCY
            )
    return total


async def _recover_one(ctx: ServiceContext, node_id: Any) -> int:
    async with ctx.db.transaction() as tx:
        params = {
            "node_id": node_id,
            "grace_seconds": ctx.settings.node_recovery_submitting_grace_seconds,
        }
        claimed = await tx.batch(lambda b: progress.claim_and_read(b, SQL.claim_node, params))
        if claimed is None:
            return 0
        _, snap = claimed
        node = snap.node_by_id(node_id)
        was = node["node_state"]

        async def inconclusive(detail: str) -> None:
            if was == N.SUBMITTING:
                await progress.node_finished_badly(
                    tx, snap, node, N.UNKNOWN, "RECOVERY_INCONCLUSIVE", detail
                )
            else:
                tx.defer(SQL.touch_node, {"node_id": node_id, "error_detail": detail[:2000]})

        try:
            context = build_execution_context(snap.request, node, snap.nodes, in_flight=True)
            executor = ctx.providers.executor_for(node["action_type"], node["executor_key"])
            result = await executor.recover(context)
        except Exception as exc:
            log.warning(
                "recover raised",
                extra={"node_key": node["node_key"], "error": f"{type(exc).__name__}: {exc}"},
            )
            await inconclusive(f"recover raised {type(exc).__name__}: {exc}")
            return 1

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
        elif result.outcome == RecoverOutcome.FAILED:
            await progress.node_finished_badly(
                tx,
                snap,
                node,
                N.FAILED,
                result.error_code or "RECOVERED_NOT_SUBMITTED",
                result.error_detail,
            )
        else:
            await inconclusive(result.error_detail or "provider cannot tell yet")
        return 1
