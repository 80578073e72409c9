"""One peer measured in a process of its own (asyncio: the peers are asyncio libraries, or, DBOS,
driven from asyncio with its worker in a process of its own: bench/peer_dbos.py).

    python -m bench.peer_run {pgqueuer|procrastinate|dbos-1ms|dbos} {pickup|drain} \
         DSN COUNT [WARMUP]
    python -m bench.peer_run {floor-claim|floor-write-ahead|floor-qtg-statements} \
         pickup DSN COUNT [WARMUP]

The floor-* entries are no queue: the least a pickup of each shape can do (bench/floor.py),
and qtg's own pickup statements without its runtime (bench/floor_qtg.py).

Prints one JSON line on stdout:
- pickup: {"pickup_ms": [...]} — COUNT samples after WARMUP, one job at a time on an idle
  worker, each from the enqueue's commit to the commit that claimed the job, both read from
  PostgreSQL's commit timestamps exactly as qtg's pickup is (bench/latency.py);
- drain: {"jobs": COUNT, "wall_s": s, "jobs_per_s": r, "cpu_s": c} — COUNT no-op jobs enqueued
  before the worker starts, from the first job's start until the worker has finished them all;
  cpu_s, over the same window, the worker's and PostgreSQL's CPU (procs.CpuWindow; None
  without the server's postmaster named).

Each peer is driven only through its public API, with its defaults but for what a fair
comparison needs: PgQueuer's batch of 10 (its default) and Procrastinate's concurrency of 10 for
the drain (its default of 1 would measure one round trip per job, not the queue).
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import time
from datetime import timedelta
from typing import Any

from bench.procs import CpuWindow
from bench.queries import bench_sql

SQL = bench_sql("peer_pgqueuer_pickup", "peer_procrastinate_pickup")
SAMPLE_DEADLINE_SECONDS = 60.0
DRAIN_CONCURRENCY = 10


def _url(dsn: str) -> str:
    """asyncpg takes URLs only; the private server hands out libpq key=value strings."""
    from psycopg.conninfo import conninfo_to_dict

    p = conninfo_to_dict(dsn)
    return f"postgresql://{p['user']}@{p['host']}:{p['port']}/{p['dbname']}"


async def pgqueuer_run(figure: str, dsn: str, count: int, warmup: int) -> dict[str, Any]:
    import asyncpg
    from pgqueuer import PgQueuer
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    url = _url(dsn)
    admin = await asyncpg.connect(url)
    probe = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(admin))
    await queries.install()
    pgq = PgQueuer.from_asyncpg_connection(await asyncpg.connect(url))
    handled: asyncio.Queue[float] = asyncio.Queue()
    first_start: list[float] = []

    if figure == "pickup":

        @pgq.entrypoint("noop")
        async def timed(job: Any) -> None:
            handled.put_nowait(float(await probe.fetchval(SQL.peer_pgqueuer_pickup.text, job.id)))

        worker = asyncio.create_task(pgq.run(log_aggregation_interval=timedelta(0)))
        values = []
        for _ in range(warmup + count):
            await queries.enqueue("noop", None)
            values.append(await asyncio.wait_for(handled.get(), SAMPLE_DEADLINE_SECONDS))
        pgq.shutdown.set()
        await worker
        return {"pickup_ms": values[warmup:]}

    cpu = CpuWindow()

    @pgq.entrypoint("noop")
    async def noop(job: Any) -> None:
        if not first_start:
            first_start.append(time.perf_counter())
            cpu.start()

    await queries.enqueue(["noop"] * count, [None] * count, [0] * count)
    await pgq.run(mode=QueueExecutionMode.drain, log_aggregation_interval=timedelta(0))
    wall = time.perf_counter() - first_start[0]
    return {"jobs": count, "wall_s": wall, "jobs_per_s": count / wall, "cpu_s": cpu.stop()}


async def procrastinate_run(figure: str, dsn: str, count: int, warmup: int) -> dict[str, Any]:
    from procrastinate import App, PsycopgConnector

    app = App(connector=PsycopgConnector(conninfo=dsn))
    handled: asyncio.Queue[int] = asyncio.Queue()
    first_start: list[float] = []
    cpu = CpuWindow()

    @app.task(name="noop", pass_context=True)
    async def noop(context: Any) -> None:
        if not first_start:
            first_start.append(time.perf_counter())
            cpu.start()
        handled.put_nowait(context.job.id)

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        if figure == "pickup":
            worker = asyncio.create_task(
                app.run_worker_async(wait=True, listen_notify=True, install_signal_handlers=False)
            )
            ids = []
            for _ in range(warmup + count):
                ids.append(await noop.defer_async())
                await asyncio.wait_for(handled.get(), SAMPLE_DEADLINE_SECONDS)
            worker.cancel()
            with_timing = await app.connector.execute_query_all_async(
                SQL.peer_procrastinate_pickup.text, ids=ids[warmup:]
            )
            return {"pickup_ms": [float(row["ms"]) for row in with_timing]}
        await noop.batch_defer_async(*({} for _ in range(count)))
        await app.run_worker_async(
            wait=False, concurrency=DRAIN_CONCURRENCY, install_signal_handlers=False
        )
        wall = time.perf_counter() - first_start[0]
        return {"jobs": count, "wall_s": wall, "jobs_per_s": count / wall, "cpu_s": cpu.stop()}


async def dbos_run(peer: str, figure: str, dsn: str, count: int, warmup: int) -> dict[str, Any]:
    from bench import peer_dbos

    return await peer_dbos.run(peer, figure, dsn, count, warmup)


async def floor_qtg_run(figure: str, dsn: str, count: int, warmup: int) -> dict[str, Any]:
    from bench import floor_qtg

    return await floor_qtg.run(figure, dsn, count, warmup)


async def floor_run(shape: str, figure: str, dsn: str, count: int, warmup: int) -> dict[str, Any]:
    from bench import floor

    return await floor.run(shape, figure, dsn, count, warmup)


PEERS = {
    "pgqueuer": pgqueuer_run,
    "procrastinate": procrastinate_run,
    # the durable-execution peer (issue 47): its queue polled at 1 ms and at its default
    "dbos-1ms": functools.partial(dbos_run, "dbos-1ms"),
    "dbos": functools.partial(dbos_run, "dbos"),
    # not queues: the least a pickup of each shape can do (bench/floor.py)
    "floor-claim": functools.partial(floor_run, "floor-claim"),
    "floor-write-ahead": functools.partial(floor_run, "floor-write-ahead"),
    "floor-qtg-statements": floor_qtg_run,
}


def main(argv: list[str]) -> int:
    peer, figure, dsn, count = argv[0], argv[1], argv[2], int(argv[3])
    warmup = int(argv[4]) if len(argv) > 4 else 0
    result = asyncio.run(PEERS[peer](figure, dsn, count, warmup))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
