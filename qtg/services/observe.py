"""node_observer (reference §2): poll SUBMITTED/OBSERVING nodes until they finish.

Two phases, so that one slow provider observation never holds a lock that
blocks the rest of the batch: an unlocked snapshot of up to
MG_NODE_OBSERVE_BATCH_SIZE due ids, then each node claimed — node and request
locked, SKIP LOCKED, under a miss-only savepoint — in its own transaction,
which holds those locks through the provider call and the commit.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from qtg.db import Jsonb, Tx, sql_family
from qtg.domain.execution import build_execution_context
from qtg.domain.observe_policy import observation_timed_out, observe_interval
from qtg.domain.refs import ConfigRefResolutionError
from qtg.domain.states import NodeState, RequestState
from qtg.providers.base import ObserveStatus
from qtg.providers.registry import UnknownExecutorError
from qtg.services import progress
from qtg.services.batch import run_each
from qtg.services.context import ServiceContext

log = logging.getLogger("qtg.services.observe")

SQL = sql_family("observe", "list_due", "claim_node", "record_pending", "next_due")
DB_SQL = sql_family("db", "now")

N, R = NodeState, RequestState
#: Observations of one pass that run at the same time (each holds a pooled connection).
CONCURRENCY = 5


async def observe_active_nodes(ctx: ServiceContext) -> int:
    """One pass: observe every due node of the snapshot; returns how many were observed."""
    due = await ctx.db.fetch(
        SQL.list_due,
        {
            "limit": ctx.settings.node_observe_batch_size,
            "network_class": ctx.settings.network_class,
        },
    )
    if not due:
        return 0
    return await run_each(lambda row: _observe_one(ctx, row["id"]), due, CONCURRENCY)


async def next_observe_due(ctx: ServiceContext) -> datetime | None:
    """The earliest next_observe_at of an observable node (None: nothing to observe)."""
    return await ctx.db.fetchval(SQL.next_due, {"network_class": ctx.settings.network_class})


async def _observe_one(ctx: ServiceContext, node_id: Any) -> int:
    async with ctx.db.transaction() as tx:
        claimed = await progress.claim_and_read(
            tx,
            SQL.claim_node,
            {"node_id": node_id, "network_class": ctx.settings.network_class},
        )
        if claimed is None:
            return 0
        _, snap = claimed
        node = snap.node_by_id(node_id)
        await _observe_claimed(ctx, tx, snap, node)
        return 1


async def _observe_claimed(
    ctx: ServiceContext, tx: Tx, snap: progress.Snapshot, node: dict[str, Any]
) -> None:
    settings = ctx.settings
    if settings.observe_timeout_enforcement_enabled and observation_timed_out(
        node["timeout_policy"],
        node["started_at"],
        await tx.fetchval(DB_SQL.now),
        enforcement_enabled=True,
    ):
        # Never FAILED: the side effect may still land; an operator decides (reference §2).
        await progress.node_finished_badly(
            tx,
            snap,
            node,
            N.UNKNOWN,
            "OBSERVATION_TIMEOUT",
            "not finished within timeout_policy.observe_seconds="
            f"{node['timeout_policy'].get('observe_seconds')}",
        )
        # The timeout is a paging signal: the derivation (waits_for_operator)
        # moves the request to MANUAL_INTERVENTION once nothing is in flight —
        # now, or when the last sibling settles.
        return

    async def observe_later(
        detail: str | None,
        retry_after: float | None = None,
        refs: dict[str, Any] | None = None,
        artifacts: dict[str, Any] | None = None,
    ) -> None:
        tx.defer(
            SQL.record_pending,
            {
                "node_id": node["id"],
                "interval_seconds": observe_interval(node["action_type"], retry_after),
                "error_detail": detail,
                "provider_refs": Jsonb(refs or {}),
                "artifacts": Jsonb(artifacts or {}),
            },
        )

    try:
        context = build_execution_context(snap.request, node, snap.nodes, in_flight=True)
        executor = ctx.providers.executor_for(node["action_type"], node["executor_key"])
        result = await executor.observe(context)
    except (ConfigRefResolutionError, UnknownExecutorError) as exc:
        # The side effect (if any) is out there: keep watching, and say why we can't.
        log.error("cannot observe node", extra={"node_key": node["node_key"], "error": str(exc)})
        await observe_later(f"cannot observe: {exc}")
        return
    except Exception as exc:
        log.warning(
            "observe raised; will observe again",
            extra={"node_key": node["node_key"], "error": f"{type(exc).__name__}: {exc}"},
        )
        await observe_later(f"observe raised {type(exc).__name__}: {exc}")
        return

    if result.status == ObserveStatus.PENDING:
        await observe_later(
            None, result.retry_after_seconds, result.provider_refs, result.artifacts
        )
    elif result.status == ObserveStatus.COMPLETED:
        await progress.complete_node(tx, snap, node, result.provider_refs, result.artifacts)
    elif result.status == ObserveStatus.FAILED:
        await progress.node_finished_badly(
            tx, snap, node, N.FAILED, result.error_code or "OBSERVED_FAILED", result.error_detail
        )
    else:
        await progress.node_finished_badly(
            tx, snap, node, N.UNKNOWN, result.error_code or "OBSERVED_UNKNOWN", result.error_detail
        )
