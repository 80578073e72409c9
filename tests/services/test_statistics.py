"""The runtime's statistics refresh (issue 44 item 4; qtg.services.statistics):
a table that grew past its statistics is ANALYZEd, which makes the plans cached
on it again; one that did not is left alone; one runtime at a time does it.
tests/test_plans_growth.py checks the plans it brings back."""

from __future__ import annotations

import psycopg
import trio

from qtg.db import Database, Query
from qtg.runtime.database import watch_statistics
from qtg.services.statistics import MIN_ROWS, refresh_statistics

GROW = Query(
    "tests/grow",
    "INSERT INTO audit_outbox (actor, action, object_type, object_id)"
    " SELECT 'a', 'movement.approve', 'movement_request', i::text"
    " FROM generate_series(1, %(rows)s) i",
)
COUNTED = Query(
    "tests/counted", "SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'audit_outbox'"
)
COUNTED_BY_PLANNER = Query(
    "tests/reltuples", "SELECT reltuples FROM pg_class WHERE relname = 'audit_outbox'"
)
LOCK = "SELECT pg_advisory_lock(hashtext('qtg_analyze_grown'))"
UNLOCK = "SELECT pg_advisory_unlock(hashtext('qtg_analyze_grown'))"
#: The table's statistics are the tests' to change: no autovacuum ANALYZE of it
#: first on a server with autovacuum on (issue 44 item 8).
AUTOVACUUM_OFF = Query(
    "tests/autovacuum-off", "ALTER TABLE audit_outbox SET (autovacuum_enabled = false)"
)


async def _grow(db: Database, rows: int) -> None:
    """`rows` more rows, once the shared statistics count them (a backend's
    counts reach them when it goes idle)."""
    await db.execute(AUTOVACUUM_OFF)
    before = await db.fetchval(COUNTED)
    await db.execute(GROW, {"rows": rows})
    with trio.fail_after(30):
        while await db.fetchval(COUNTED) < before + rows:  # noqa: ASYNC110 (polls the server)
            await trio.sleep(0.05)


async def test_a_grown_table_is_analyzed_once(dsn: str, db: Database) -> None:
    await db.execute(Query("tests/analyze", "ANALYZE audit_outbox"))
    assert await db.fetchval(COUNTED_BY_PLANNER) == 0  # analyzed empty
    await _grow(db, MIN_ROWS // 2)
    assert "audit_outbox" not in await refresh_statistics(db)  # too few rows to matter
    await _grow(db, MIN_ROWS)
    assert "audit_outbox" in await refresh_statistics(db)
    assert await db.fetchval(COUNTED_BY_PLANNER) == MIN_ROWS + MIN_ROWS // 2
    # not grown since: left alone
    assert "audit_outbox" not in await refresh_statistics(db)


async def test_one_runtime_at_a_time(dsn: str, db: Database) -> None:
    """While another runtime refreshes (it holds the refresh's lock), this one
    skips the round rather than wait on the same ANALYZE."""
    await _grow(db, 2 * MIN_ROWS)
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute(LOCK)
        assert await refresh_statistics(db) == []
        # released before the connection closes (a closing backend may still
        # hold it for a moment after the client has gone)
        other.execute(UNLOCK)
    assert "audit_outbox" in await refresh_statistics(db)


async def test_the_runtime_task_refreshes_a_table_as_it_grows(db: Database) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_statistics, db, 0.05)
        await _grow(db, 2 * MIN_ROWS)
        with trio.fail_after(30):
            while await db.fetchval(COUNTED_BY_PLANNER) < 2 * MIN_ROWS:  # noqa: ASYNC110
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
