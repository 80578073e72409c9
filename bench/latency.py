"""Latency figures: pickup (READY → SUBMITTING claim) and DAG (approval → COMPLETED).

Both are measured between PostgreSQL's own commit times
(`track_commit_timestamp = on`, `pg_xact_commit_timestamp` of the xact_id
every movement_events row records), so no clock of the benchmark or the
runtime is involved, nor how fast the benchmark notices. A commit's time is
taken when its commit record is written, just before the WAL flush: each
interval therefore includes the flush of the first commit (after which the
NOTIFY goes out) and not the flush of the last.

Method: the movements are created (PENDING_APPROVAL) before the runtime
starts; then, one at a time, the benchmark approves one and waits until it has
gone as far as the figure needs (COMPLETED, so the runtime is idle again before
the next approval). The first WARMUP samples are dropped (imports, pool
growth, psycopg's prepared statements). In polling mode each approval comes
after a random pause of up to one dispatch interval, so the approvals fall at
random phases of the poll instead of right after a pass.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from bench import procs, workload
from bench.queries import bench_sql
from bench.server import PrivateServer
from bench.stats import Summary
from qtg.db import Database, ListenHub, Query

SQL = bench_sql(
    "pickup_latencies",
    "pickup_breakdown",
    "dag_latencies",
    "request_state",
    "request_picked",
    "audit_pending",
)

#: Fallback re-check while waiting for a sample when no qtg_events notify comes.
RECHECK_SECONDS = 0.05
#: How long one sample may take before the run is declared broken.
SAMPLE_DEADLINE_SECONDS = 120.0
#: The pickup's segments (bench/sql/pickup_breakdown.sql).
SEGMENTS = ("wake", "claim", "prepare", "commit")
#: The reference's dispatch interval, the pacing of polling-mode approvals.
DISPATCH_INTERVAL_SECONDS = 2.0


@dataclass
class LatencyResult:
    figure: str
    reactive: bool
    values_ms: list[float]
    warmup: int
    runs: int = 1
    problems: list[str] = field(default_factory=list)
    breakdown: dict[str, list[float]] = field(default_factory=dict)  # segment → ms per sample

    @property
    def summary(self) -> Summary:
        return Summary.of(self.values_ms)


@dataclass(frozen=True)
class Spec:
    figure: str
    template: str
    done: Query  # the per-sample "far enough" check
    is_done: Callable[[Any], bool]
    latencies: Query
    breakdown: Query | None = None


PICKUP = Spec(
    "pickup",
    workload.ONE_ACTION,
    SQL.request_state,
    lambda state: state == "COMPLETED",
    SQL.pickup_latencies,
    SQL.pickup_breakdown,
)
# Polling pickup waits only for the claim: completing would add an observer
# interval (5 s) per sample and nothing to the figure.
PICKUP_POLLING = Spec("pickup", workload.ONE_ACTION, SQL.request_picked, bool, SQL.pickup_latencies)
DAG = Spec(
    "dag",
    workload.FIVE_CHAIN,
    SQL.request_state,
    lambda state: state == "COMPLETED",
    SQL.dag_latencies,
)


async def measure(
    server: PrivateServer,
    base_db: str,
    spec: Spec,
    *,
    reactive: bool,
    samples: int,
    warmup: int,
    runs: int = 1,
) -> LatencyResult:
    """`samples` measured samples (after `warmup` each), split over `runs`
    runtimes on their own databases side by side (polling mode only: idle
    polling runtimes do not compete for CPU)."""
    per_run = [samples // runs + (1 if i < samples % runs else 0) for i in range(runs)]
    results: list[LatencyResult] = []

    async def one(i: int, n: int) -> None:
        results.append(
            await _run(server, base_db, spec, reactive=reactive, samples=n, warmup=warmup, run=i)
        )

    async with trio.open_nursery() as nursery:
        for i, n in enumerate(per_run):
            nursery.start_soon(one, i, n)
    return LatencyResult(
        figure=spec.figure,
        reactive=reactive,
        values_ms=[v for r in results for v in r.values_ms],
        warmup=warmup,
        runs=runs,
        problems=[p for r in results for p in r.problems],
        breakdown={
            segment: [v for r in results for v in r.breakdown.get(segment, [])]
            for segment in (results[0].breakdown if results else {})
        },
    )


async def _run(
    server: PrivateServer,
    base_db: str,
    spec: Spec,
    *,
    reactive: bool,
    samples: int,
    warmup: int,
    run: int,
) -> LatencyResult:
    mode = "reactive" if reactive else "polling"
    name = f"qtg_bench_{spec.figure}_{mode}_{run}"
    dsn = await trio.to_thread.run_sync(server.create_database, name, base_db)
    rng = random.Random(run)
    try:
        settings = workload.settings_for(dsn)
        async with Database(dsn, min_size=1, max_size=4) as db:
            ids = await workload.create_movements(
                db, settings, spec.template, warmup + samples, tag=name, approve=False
            )
            await workload.settle_audit(db)
            hub = ListenHub(dsn, channels=("qtg_events",))
            async with trio.open_nursery() as nursery:
                await nursery.start(hub.run)
                events = hub.subscribe("qtg_events")
                env = procs.runtime_env(dsn, reactive=reactive)
                async with procs.runtime(name, env, procs.launcher_args()) as rt:
                    for request_id in ids:
                        if not reactive:
                            await trio.sleep(rng.uniform(0, DISPATCH_INTERVAL_SECONDS))
                        events.clear()
                        await workload.approve(db, request_id)
                        await _wait(db, spec, request_id, events)
                    problems = rt.problems()
                nursery.cancel_scope.cancel()
            rows = await db.fetch(spec.latencies, {"ids": ids[warmup:]})
            parts = await db.fetch(spec.breakdown, {"ids": ids[warmup:]}) if spec.breakdown else []
    finally:
        await trio.to_thread.run_sync(server.drop_database, name)
    values = [float(r["ms"]) for r in rows]
    if len(values) != samples:
        problems.append(f"{name}: {len(values)} of {samples} samples have both commits")
    return LatencyResult(
        spec.figure, reactive, values, warmup, problems=problems, breakdown=segments_of(parts)
    )


def segments_of(parts: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """The rows of bench/sql/pickup_breakdown.sql as segment → ms per sample."""
    return {segment: [float(p[segment]) for p in parts] for segment in SEGMENTS}


async def _wait(db: Database, spec: Spec, request_id: Any, events: Any) -> None:
    """Until the sample is far enough: re-checked on every qtg_events notify."""
    with trio.fail_after(SAMPLE_DEADLINE_SECONDS):
        while True:
            events.clear()
            if spec.is_done(await db.fetchval(spec.done, {"id": request_id})):
                return
            with trio.move_on_after(RECHECK_SECONDS):
                await events.wait()
