"""The floor of qtg's own statements: qtg's pickup SQL on qtg's schema, with no qtg runtime.

    .venv/bin/python -m bench.ab --peers --floor --no-drain --rounds 5   # beside the others

bench/floor.py measures the least a pickup of each shape can do on a bare table.
This measures the least a pickup can take with everything qtg's *database* does
in one: the real schema (its triggers, the guarded state changes and their event
rows, the callback outbox lookup, the NOTIFYs), a real approval as the enqueue
(`approve_movement`, the function the API calls, so the wake-up is the approval
commit's NOTIFY), and the very statements the dispatcher sends, in its order and
its two round trips:

1. BEGIN, sql/dispatch/claim_batch.sql (at the default MG_NODE_DISPATCH_BATCH_SIZE:
   the `--env` settings of bench.ab reach the runtimes, not this worker; one node
   is READY, so one is claimed, its request locked, with the request's columns
   and plan edges) and sql/progress/load_nodes.sql;
2. sql/progress/set_request_state.sql (APPROVED → EXECUTING),
   sql/dispatch/write_ahead.sql (READY → SUBMITTING with a prepared action and
   its idempotency key) and the COMMIT.

What it leaves out is qtg's runtime: trio, the LISTEN hub, the pool, the
snapshot and plan-drift check, the execution context, the executor's prepare.
So `qtg - floor-qtg-statements` is what the runtime adds, and
`floor-qtg-statements - floor-write-ahead` is what qtg's schema and statements
add to the least a write-ahead pickup can do. A worker woken by LISTEN on
psycopg's AsyncConnection (asyncio), as in bench/floor.py.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from contextlib import suppress
from typing import Any

import psycopg
import trio
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from bench import workload
from bench.floor import (
    BEGIN,
    COMMIT,
    SAMPLE_DEADLINE_SECONDS,
    Conn,
    next_pick,
    prepared_action,
    worker,
)
from bench.latency import segments_of
from bench.queries import bench_sql
from qtg.config import Settings
from qtg.db import Database, sql_family
from qtg.db.migrate import migrate

NAME = "floor-qtg-statements"

SQL = bench_sql("pickup_latencies", "pickup_breakdown", "request_picked")
DISPATCH = sql_family("dispatch", "claim_batch", "write_ahead")
PROGRESS = sql_family("progress", "load_nodes", "set_request_state")

_LISTEN = "LISTEN qtg_dispatch"


async def claim_then_write_ahead(conn: Conn, settings: Settings) -> Any | None:
    """qtg's dispatch statements for one node, in its two round trips; the node's
    request id (None: nothing was READY)."""
    async with conn.pipeline():
        await conn.execute(BEGIN)
        claim = await conn.execute(
            DISPATCH.claim_batch.text,
            {"network_class": settings.network_class, "limit": settings.node_dispatch_batch_size},
        )
        nodes = await conn.execute(PROGRESS.load_nodes.text)
        row = await claim.fetchone()  # flushes the pipeline: the first round trip
        if row is None:
            await conn.execute(COMMIT)
            return None
        await nodes.fetchall()
        node_id, request_id = row["id"], row["request_id"]
        await conn.execute(
            PROGRESS.set_request_state.text,
            {"request_ids": [request_id], "request_states": ["EXECUTING"]},
        )
        await conn.execute(
            DISPATCH.write_ahead.text,
            {
                "node_ids": [node_id],
                "attempt_nos": [1],
                "idempotency_keys": [f"{node_id}:1"],
                "prepared_actions": [Jsonb(prepared_action(node_id, row["intent"]))],
                "owner": None,
            },
        )
        await conn.execute(COMMIT)
    return request_id  # the pipeline's sync at the block's end: the second round trip


async def _enqueuer(dsn: str, count: int) -> None:
    """The approving side, a process of its own (as bench.latency approves from the
    benchmark's process, not the runtime's): migrate, create `count` one-node
    movements waiting for approval and print their ids as one JSON line; then
    approve each id read from stdin through `approve_movement` (the function the
    API calls) and print a line once its commit is done."""
    migrate(dsn)
    async with Database(dsn, min_size=1, max_size=2) as db:
        await workload.install_templates(db)
        ids = await workload.create_movements(
            db, workload.settings_for(dsn), workload.ONE_ACTION, count, tag="floor", approve=False
        )
        print(json.dumps([str(i) for i in ids]), flush=True)
        while line := await trio.to_thread.run_sync(sys.stdin.readline):
            await workload.approve(db, line.strip())
            print("approved", flush=True)


async def _line(enqueuer: asyncio.subprocess.Process) -> str:
    assert enqueuer.stdout is not None
    line = await asyncio.wait_for(enqueuer.stdout.readline(), SAMPLE_DEADLINE_SECONDS)
    if not line:
        raise RuntimeError("the enqueuer process exited")
    return line.decode().strip()


async def run(figure: str, dsn: str, count: int, warmup: int) -> dict[str, Any]:
    """`count` pickups after `warmup`, one movement at a time: {"pickup_ms": [...],
    "breakdown": {segment: [...]}} (the segments of qtg's pickup, bench.latency.segments_of)."""
    if figure != "pickup":
        raise ValueError(f"the floor measures the pickup only, not {figure!r}")
    enqueuer = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.floor_qtg",
        dsn,
        str(warmup + count),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert enqueuer.stdin is not None
    exited = asyncio.ensure_future(enqueuer.wait())
    picked: asyncio.Queue[Any] = asyncio.Queue()
    up = asyncio.Event()
    pickup = functools.partial(claim_then_write_ahead, settings=workload.settings_for(dsn))
    listening = asyncio.create_task(worker(dsn, _LISTEN, pickup, picked, up, row_factory=dict_row))
    try:
        ids = json.loads(await _line(enqueuer))
        await asyncio.wait_for(up.wait(), SAMPLE_DEADLINE_SECONDS)
        async with await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, row_factory=dict_row
        ) as admin:
            for request_id in ids:
                enqueuer.stdin.write(f"{request_id}\n".encode())
                await enqueuer.stdin.drain()
                taken = str(await next_pick(picked, listening, exited))
                if taken != request_id:
                    raise RuntimeError(f"movement {request_id} approved, {taken} picked up")
                await _line(enqueuer)  # its approval returned
                cur = await admin.execute(SQL.request_picked.text, {"id": request_id})
                if not (await cur.fetchone() or {}).get("picked"):
                    raise RuntimeError(f"movement {request_id}: its node is still READY")
            cur = await admin.execute(SQL.pickup_latencies.text, {"ids": ids[warmup:]})
            values = [float(row["ms"]) for row in await cur.fetchall()]
            cur = await admin.execute(SQL.pickup_breakdown.text, {"ids": ids[warmup:]})
            parts = await cur.fetchall()
    finally:
        listening.cancel()
        with suppress(asyncio.CancelledError):
            await listening
        enqueuer.stdin.close()
        try:
            await asyncio.wait_for(exited, SAMPLE_DEADLINE_SECONDS)
        except TimeoutError:
            enqueuer.kill()
            await enqueuer.wait()
    if len(values) != count:
        raise RuntimeError(f"{len(values)} pickups recorded of {count}")
    return {
        "pickup_ms": values,
        "breakdown": segments_of(parts),
    }


if __name__ == "__main__":
    trio.run(_enqueuer, sys.argv[1], int(sys.argv[2]))
