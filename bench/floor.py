"""The floor of a pickup: the least a worker can do between a node's READY commit
and its pickup's commit on this machine, measured beside PgQueuer and qtg.

    .venv/bin/python -m bench.ab --peers --floor --no-drain --rounds 5   # all four, each round

Issue 29 asks for qtg's pickup p50 at or below PgQueuer's. The two do different
things before their commit, and this measures what each shape of pickup costs
with nothing else around it — one table, one partial index, a NOTIFY on insert,
a worker woken by LISTEN on psycopg's own AsyncConnection (asyncio), no pool, no
event log, no triggers on the claim, no snapshot of the request:

- **claim** (`floor-claim`): the claim is the commit — PgQueuer's shape, one
  autocommit `UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED)`. Nothing
  the worker builds from the node can be in that commit.
- **claim, then write-ahead** (`floor-write-ahead`): DESIGN §4's rule — what is
  going to be submitted (the prepared action, built by the worker from the
  claimed node's parameters, and its idempotency key) is committed before any
  submit. BEGIN and the claim (returning the parameters) travel in one
  pipeline, one round trip; the worker builds the action (a JSON dump and its
  SHA-256); the write-ahead UPDATE and the COMMIT travel in a second pipeline.
  Two round trips is the least this rule allows: the second one's content
  depends on the first one's answer.

Pickup = READY commit → the commit that claimed the node (claim) or recorded its
write-ahead (claim, then write-ahead), from PostgreSQL's commit timestamps, as
qtg's pickup (bench/latency.py) and PgQueuer's (bench/peer_run.py) are taken.
The gap between the two floors is the price of the write-ahead rule itself;
the gap between the write-ahead floor and qtg is qtg's own work (its triggers,
the request's snapshot, the pool), which bench/floor_qtg.py splits into what
qtg's statements cost and what its runtime adds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from bench.queries import bench_sql

SQL = bench_sql(
    "floor_schema",
    "floor_enqueue",
    "floor_claim_commit",
    "floor_claim",
    "floor_write_ahead",
    "floor_pickup",
)
SAMPLE_DEADLINE_SECONDS = 60.0

# Transaction control and LISTEN (not queries, so they do not live in bench/sql/).
BEGIN = "BEGIN"
COMMIT = "COMMIT"
_LISTEN = "LISTEN floor_dispatch"

Conn = psycopg.AsyncConnection[Any]
#: One pickup on the worker's connection: what it picked up, or None (nothing READY).
Pickup = Callable[[Conn], Awaitable[Any | None]]


async def claim(conn: Conn) -> int | None:
    """One round trip: the claim is the commit (PgQueuer's shape)."""
    cur = await conn.execute(SQL.floor_claim_commit.text)
    row = await cur.fetchone()
    return None if row is None else int(row[0])


def prepared_action(node_id: object, params: Any) -> dict[str, str]:
    """What the worker would submit, built from the claimed node (as an executor's
    prepare does): its payload and the payload's hash."""
    payload = json.dumps({"node_id": str(node_id), "params": params}, sort_keys=True)
    return {"payload": payload, "payload_hash": hashlib.sha256(payload.encode()).hexdigest()}


async def claim_then_write_ahead(conn: Conn) -> int | None:
    """Two round trips: BEGIN + claim; then the write-ahead UPDATE + COMMIT."""
    async with conn.pipeline():
        await conn.execute(BEGIN)
        cur = await conn.execute(SQL.floor_claim.text)
        row = await cur.fetchone()  # flushes the pipeline: the first round trip
        if row is None:
            await conn.execute(COMMIT)
            return None
        node_id, params = int(row[0]), row[1]
        await conn.execute(
            SQL.floor_write_ahead.text,
            {
                "id": node_id,
                "idempotency_key": f"floor:{node_id}:1",
                "prepared_action": Jsonb(prepared_action(node_id, params)),
            },
        )
        await conn.execute(COMMIT)
    return node_id  # the pipeline's sync at the block's end: the second round trip


#: Each shape, and the state a node picked up by it is left in.
SHAPES: dict[str, tuple[Pickup, str]] = {
    "floor-claim": (claim, "CLAIMED"),
    "floor-write-ahead": (claim_then_write_ahead, "SUBMITTING"),
}


async def worker(
    dsn: str,
    listen: str,
    pickup: Pickup,
    picked: asyncio.Queue[Any],
    up: asyncio.Event,
    **work_options: Any,
) -> None:
    """Woken by each NOTIFY of the channel `listen` (a LISTEN statement) names,
    pick up nodes on a connection of its own (`work_options`: its connect
    options) until none is READY; `up` is set once listening."""
    async with (
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as listening,
        await psycopg.AsyncConnection.connect(dsn, autocommit=True, **work_options) as work,
    ):
        await listening.execute(listen)
        up.set()
        async for _ in listening.notifies():
            while (taken := await pickup(work)) is not None:
                picked.put_nowait(taken)


async def next_pick(picked: asyncio.Queue[Any], *watched: asyncio.Future[Any]) -> Any:
    """The next node the worker picked up; or the error of a `watched` task (the
    worker, a helper process) that stopped first; or TimeoutError after
    SAMPLE_DEADLINE_SECONDS."""
    get = asyncio.ensure_future(picked.get())
    done, _ = await asyncio.wait(
        {get, *watched}, timeout=SAMPLE_DEADLINE_SECONDS, return_when=asyncio.FIRST_COMPLETED
    )
    if get in done:
        return get.result()
    get.cancel()
    for stopped in done:
        ended = stopped.result()  # raises what stopped it
        raise RuntimeError(f"a watched task ended before a pickup (it returned {ended!r})")
    raise TimeoutError(f"nothing picked up in {SAMPLE_DEADLINE_SECONDS} s")


async def run(shape: str, figure: str, dsn: str, count: int, warmup: int) -> dict[str, Any]:
    """`count` pickups of `shape` after `warmup`, one node at a time: {"pickup_ms": [...]}."""
    if figure != "pickup":
        raise ValueError(f"the floor measures the pickup only, not {figure!r}")
    pickup, picked_state = SHAPES[shape]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        await admin.execute(SQL.floor_schema.text)
        picked: asyncio.Queue[int] = asyncio.Queue()
        up = asyncio.Event()
        listening = asyncio.create_task(worker(dsn, _LISTEN, pickup, picked, up))
        try:
            await asyncio.wait_for(up.wait(), SAMPLE_DEADLINE_SECONDS)
            values = []
            for i in range(warmup + count):
                cur = await admin.execute(SQL.floor_enqueue.text, {"params": Jsonb({"n": i})})
                enqueued = (await cur.fetchone() or (None,))[0]
                node_id = await next_pick(picked, listening)
                if node_id != enqueued:
                    raise RuntimeError(f"node {enqueued} enqueued, node {node_id} picked up")
                cur = await admin.execute(SQL.floor_pickup.text, {"id": node_id})
                state, ms = await cur.fetchone() or (None, None)
                if state != picked_state:
                    raise RuntimeError(f"node {node_id} is {state}, not {picked_state}")
                values.append(float(ms))
        finally:
            listening.cancel()
            with suppress(asyncio.CancelledError):
                await listening
    return {"pickup_ms": values[warmup:]}
