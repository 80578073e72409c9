"""The database edge: transactions, deferred writes, one-hop batches, and that a
connection always goes back to the pool — whatever happens to the task."""

from __future__ import annotations

import psycopg
import pytest
import trio

from qtg.db import Database, Query
from qtg.db.pool import Batch

JSON = Query("t/json", "SELECT %(a)s::jsonb AS j")
CREATE = Query("t/create", "CREATE TABLE IF NOT EXISTS t_pool (n integer NOT NULL)")
INSERT = Query("t/insert", "INSERT INTO t_pool (n) VALUES (%(n)s)")
ROWS = Query("t/rows", "SELECT n FROM t_pool ORDER BY n")
BAD = Query("t/bad", "INSERT INTO t_pool (n) VALUES (NULL)")


async def test_database_roundtrip_json(db: Database) -> None:
    row = await db.fetchrow(JSON, {"a": '{"x": 1}'})
    assert row == {"j": {"x": 1}}


async def test_deferred_writes_run_in_order_before_the_next_read(db: Database) -> None:
    await db.execute(CREATE)
    async with db.transaction() as tx:
        for n in (3, 1, 2):
            tx.defer(INSERT, {"n": n})
        assert [r["n"] for r in await tx.fetch(ROWS)] == [1, 2, 3]
        tx.defer(INSERT, {"n": 4})
    assert [r["n"] for r in await db.fetch(ROWS)] == [1, 2, 3, 4]


async def test_a_failing_deferred_write_rolls_the_whole_transaction_back(db: Database) -> None:
    await db.execute(CREATE)
    with pytest.raises(psycopg.errors.NotNullViolation):
        async with db.transaction() as tx:
            await tx.execute(INSERT, {"n": 1})
            tx.defer(BAD)
            tx.defer(INSERT, {"n": 2})
    assert await db.fetch(ROWS) == []
    assert db.stats().get("pool_available", 0) == db.stats().get("pool_size", 0)


async def test_batch_runs_plain_steps_in_one_transaction(db: Database) -> None:
    await db.execute(CREATE)

    def steps(b: Batch) -> list[int]:
        b.execute(INSERT, {"n": 7})
        return [r["n"] for r in b.fetch(ROWS)]

    async with db.transaction() as tx:
        assert await tx.batch(steps) == [7]


async def test_cancellation_at_commit_returns_the_connection_and_rolls_back(
    dsn: str,
) -> None:
    # A cancellation that lands on the commit call's own checkpoint once leaked
    # the connection: with a pool of one, the next transaction then waited forever.
    async with Database(dsn, min_size=1, max_size=1, connect_timeout=2) as small:
        await small.execute(CREATE)
        with trio.CancelScope() as scope:
            async with small.transaction() as tx:
                await tx.execute(INSERT, {"n": 1})  # the connection is taken here
                scope.cancel()  # pending: raised at the commit's checkpoint
        assert scope.cancelled_caught
        with trio.fail_after(5):
            assert await small.fetch(ROWS) == []  # rolled back, and the pool still serves


async def test_cancellation_inside_a_transaction_returns_the_connection(dsn: str) -> None:
    async with Database(dsn, min_size=1, max_size=1, connect_timeout=2) as small:
        await small.execute(CREATE)
        with trio.move_on_after(0.05):
            async with small.transaction() as tx:
                await tx.execute(INSERT, {"n": 1})
                await trio.sleep_forever()
        with trio.fail_after(5):
            assert await small.fetch(ROWS) == []
