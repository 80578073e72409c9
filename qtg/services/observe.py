"""node_observer (reference §2): poll SUBMITTED/OBSERVING nodes until they finish.

With MG_NODE_OBSERVE_BATCH_CLAIM (the default, issue 15) one pass is ONE
transaction: up to MG_NODE_OBSERVE_BATCH_SIZE due nodes are claimed — node and
request locked, SKIP LOCKED — in one statement, their requests read in two,
the provider observations run side by side, and every outcome (and the
successors it makes READY, the frontier, the request state) is written and
committed together. Other observers skip the held rows, so they never wait
for this batch; what a slow observation delays is its own batch's commit, and
with it the API operations on the batch's requests (they wait for the request
lock) — bounded by the slowest provider call of the batch, where the per-node
path bounds each by its own call.

With it off, the reference's two phases, so that one slow provider observation
never holds a lock that blocks the rest of the batch: an unlocked snapshot of
up to MG_NODE_OBSERVE_BATCH_SIZE due ids, then each node claimed under a
miss-only savepoint in its own transaction, which holds those locks through
the provider call and the commit.

Both paths share everything after the claim: `_observe_claimed` (one
transaction's claimed rows), `_look` (the provider call, no writes) and
`_record` (the writes).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import trio

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

SQL = sql_family("observe", "list_due", "claim_node", "claim_batch", "record_pending", "next_due")

N, R = NodeState, RequestState
#: Observations of one pass that run at the same time (each holds a pooled connection).
CONCURRENCY = 5


async def observe_active_nodes(ctx: ServiceContext) -> int:
    """One pass: observe due nodes; returns how many were observed."""
    if ctx.settings.node_observe_batch_claim:
        return await observe_batch(ctx)
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


async def observe_batch(ctx: ServiceContext) -> int:
    """Claim up to MG_NODE_OBSERVE_BATCH_SIZE due nodes in one statement, observe
    them side by side and commit every outcome in one transaction."""
    async with ctx.db.transaction() as tx:
        rows = await tx.fetch(
            SQL.claim_batch,
            {
                "limit": ctx.settings.node_observe_batch_size,
                "network_class": ctx.settings.network_class,
            },
        )
        snaps = await progress.snapshots_from_claim(tx, rows)
        done = await _observe_claimed(ctx, tx, rows, snaps)
    _committed(ctx, done)
    return len(rows)


@dataclass(slots=True)
class Done:
    """What a committed observation transaction did, for what follows its commit."""

    #: An outcome released a successor: READY work for a dispatcher.
    released: bool = False
    #: (state, seconds in it at the claim) of every node an outcome moved on.
    left: list[tuple[str, float]] = field(default_factory=list)
    #: trio.current_time() at the claim.
    claimed_at: float = 0.0


def _committed(ctx: ServiceContext, done: Done) -> None:
    """After the commit: wake this process's dispatcher at once when successors
    became READY (the NOTIFY still tells the other processes), and record how
    long each node moved on was in its state."""
    if done.released and ctx.wake is not None:
        ctx.wake("qtg_dispatch")
    since_claim = trio.current_time() - done.claimed_at
    for state, seconds in done.left:
        ctx.node_left_state(state, seconds + since_claim)


async def next_observe_due(ctx: ServiceContext) -> datetime | None:
    """The earliest next_observe_at of an observable node (None: nothing to observe)."""
    return await ctx.db.fetchval(SQL.next_due, {"network_class": ctx.settings.network_class})


async def _observe_one(ctx: ServiceContext, node_id: Any) -> int:
    async with ctx.db.transaction() as tx:
        row = await tx.claim(
            SQL.claim_node, {"node_id": node_id, "network_class": ctx.settings.network_class}
        )
        if row is None:
            return 0
        snaps = await progress.load_snapshots(tx, [row["request_id"]])
        done = await _observe_claimed(ctx, tx, [row], snaps)
    _committed(ctx, done)
    return 1


@dataclass(frozen=True, slots=True)
class Observed:
    """What one observation found, before anything is written.

    `status` is the provider's ObserveStatus, or TIMED_OUT (not observed: the
    node is past timeout_policy.observe_seconds)."""

    status: str
    error_code: str | None = None
    detail: str | None = None
    retry_after: float | None = None
    refs: dict[str, Any] | None = None
    artifacts: dict[str, Any] | None = None


TIMED_OUT = "TIMED_OUT"


async def _observe_claimed(
    ctx: ServiceContext,
    tx: Tx,
    rows: list[dict[str, Any]],
    snaps: dict[Any, progress.Snapshot],
) -> Done:
    """Observe the claimed rows (locked by `tx`; `snaps` their requests) side by
    side, then write every outcome in `tx`, in claim order. Nodes of one
    request share its snapshot, so each outcome's rules see the ones written
    before it."""
    done = Done(claimed_at=trio.current_time())
    if not rows:
        return done
    ready_before = {
        n["id"] for snap in snaps.values() for n in snap.nodes if n["node_state"] == N.READY
    }
    claimed = [
        (snaps[row["request_id"]], snaps[row["request_id"]].node_by_id(row["id"]), row["db_now"])
        for row in rows
    ]
    found: list[Observed | None] = [None] * len(claimed)

    async def look(i: int) -> None:
        found[i] = await _look(ctx, *claimed[i])

    if len(claimed) == 1:
        await look(0)
    else:
        async with trio.open_nursery() as nursery:
            for i in range(len(claimed)):
                nursery.start_soon(look, i)
    for row, (snap, node, _), observed in zip(rows, claimed, found, strict=True):
        assert observed is not None
        await _record(tx, snap, node, observed)
        if node["node_state"] != row["node_state"]:
            done.left.append((row["node_state"], float(row["in_state_seconds"])))
    done.released = any(
        n["node_state"] == N.READY and n["id"] not in ready_before
        for snap in snaps.values()
        for n in snap.nodes
    )
    return done


async def _look(
    ctx: ServiceContext, snap: progress.Snapshot, node: dict[str, Any], db_now: datetime
) -> Observed:
    """The provider's answer for one node (no database access; never raises but
    for cancellation: an observation that fails is observed again later)."""
    if ctx.settings.observe_timeout_enforcement_enabled and observation_timed_out(
        node["timeout_policy"], node["started_at"], db_now, enforcement_enabled=True
    ):
        return Observed(TIMED_OUT)
    try:
        context = build_execution_context(snap.request, node, snap.nodes, in_flight=True)
        executor = ctx.providers.executor_for(node["action_type"], node["executor_key"])
        result = await executor.observe(context)
    except (ConfigRefResolutionError, UnknownExecutorError) as exc:
        # The side effect (if any) is out there: keep watching, and say why we can't.
        log.error("cannot observe node", extra={"node_key": node["node_key"], "error": str(exc)})
        return Observed(ObserveStatus.PENDING, detail=f"cannot observe: {exc}")
    except Exception as exc:
        log.warning(
            "observe raised; will observe again",
            extra={"node_key": node["node_key"], "error": f"{type(exc).__name__}: {exc}"},
        )
        return Observed(ObserveStatus.PENDING, detail=f"observe raised {type(exc).__name__}: {exc}")
    if result.status == ObserveStatus.PENDING:
        return Observed(
            ObserveStatus.PENDING,
            retry_after=result.retry_after_seconds,
            refs=result.provider_refs,
            artifacts=result.artifacts,
        )
    return Observed(
        result.status,
        error_code=result.error_code,
        detail=result.error_detail,
        refs=result.provider_refs,
        artifacts=result.artifacts,
    )


async def _record(
    tx: Tx, snap: progress.Snapshot, node: dict[str, Any], observed: Observed
) -> None:
    """Write one observation's outcome (deferred: sent with the commit)."""
    if observed.status == TIMED_OUT:
        # Never FAILED: the side effect may still land; an operator decides (reference §2).
        # The timeout is a paging signal: the derivation (waits_for_operator)
        # moves the request to MANUAL_INTERVENTION once nothing is in flight —
        # now, or when the last sibling settles.
        await progress.node_finished_badly(
            tx,
            snap,
            node,
            N.UNKNOWN,
            "OBSERVATION_TIMEOUT",
            "not finished within timeout_policy.observe_seconds="
            f"{node['timeout_policy'].get('observe_seconds')}",
        )
    elif observed.status == ObserveStatus.PENDING:
        tx.defer(
            SQL.record_pending,
            {
                "node_id": node["id"],
                "interval_seconds": observe_interval(node["action_type"], observed.retry_after),
                "error_detail": observed.detail,
                "provider_refs": Jsonb(observed.refs or {}),
                "artifacts": Jsonb(observed.artifacts or {}),
            },
        )
        node["node_state"] = N.OBSERVING  # mirrored, as progress does for its changes
    elif observed.status == ObserveStatus.COMPLETED:
        await progress.complete_node(tx, snap, node, observed.refs, observed.artifacts)
    elif observed.status == ObserveStatus.FAILED:
        await progress.node_finished_badly(
            tx, snap, node, N.FAILED, observed.error_code or "OBSERVED_FAILED", observed.detail
        )
    else:
        await progress.node_finished_badly(
            tx, snap, node, N.UNKNOWN, observed.error_code or "OBSERVED_UNKNOWN", observed.detail
        )
