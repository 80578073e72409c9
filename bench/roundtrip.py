"""What one statement costs on each layer between a qtg service and PostgreSQL.

Every figure of the runtime is, to first order, (round trips in sequence) times
(cost of one round trip as qtg makes it). This measures that cost, on one
connection, statement after statement (`SELECT 1`):

- psycopg, sync, from a plain thread: the wire and the server;
- the same call through `trio.to_thread.run_sync` (what qtg.db does per statement);
- one statement through `qtg.db.Tx` inside an open transaction (what a service
  pays per statement);
- a whole single-statement transaction through `qtg.db.Database.fetchval`
  (pool checkout, BEGIN, the statement, COMMIT, check-in).
"""

from __future__ import annotations

import time

import psycopg
import trio

from bench.queries import bench_sql
from bench.server import PrivateServer
from bench.stats import Summary
from qtg.db import Database

SQL = bench_sql("select_one")
COUNT = 2000


async def measure(server: PrivateServer, dbname: str, count: int = COUNT) -> dict[str, Summary]:
    dsn = server.dsn(dbname)
    out = {
        "psycopg (sync)": Summary.of(
            await trio.to_thread.run_sync(server.round_trip_ms, dbname, count)
        )
    }

    conn = await trio.to_thread.run_sync(lambda: psycopg.connect(dsn, autocommit=True))
    try:
        times = []
        for _ in range(count):
            started = time.perf_counter()
            await trio.to_thread.run_sync(conn.execute, SQL.select_one.text)
            times.append((time.perf_counter() - started) * 1000)
        out["psycopg via trio.to_thread"] = Summary.of(times)
    finally:
        conn.close()

    async with Database(dsn, min_size=1, max_size=2) as db:
        times = []
        async with db.transaction() as tx:
            for _ in range(count):
                started = time.perf_counter()
                await tx.fetchval(SQL.select_one)
                times.append((time.perf_counter() - started) * 1000)
        out["qtg.db Tx statement"] = Summary.of(times)
        times = []
        for _ in range(count):
            started = time.perf_counter()
            await db.fetchval(SQL.select_one)
            times.append((time.perf_counter() - started) * 1000)
        out["qtg.db one-statement transaction"] = Summary.of(times)
    return out
