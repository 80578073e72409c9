"""A small real workload for runtime process tests: jobs in a table, claimed exactly once.

`process_jobs` is a genuine service pass (own transaction, SKIP LOCKED claim),
so the tests can prove "nothing lost, nothing done twice" across processes,
signals and database restarts without depending on the engine. Test-only
SQL lives here as fixed Query constants (the engine's SQL lives in sql/).
"""

from __future__ import annotations

import os

import trio

from qtg.db import Query
from qtg.services.context import ServiceContext

SETUP = Query(
    "tests/rt_setup",
    """
    CREATE TABLE rt_jobs (
        id              bigserial PRIMARY KEY,
        payload         text NOT NULL DEFAULT '',
        state           text NOT NULL DEFAULT 'pending',
        processed_count integer NOT NULL DEFAULT 0,
        processed_by    text,
        processed_at    timestamptz
    );
    CREATE FUNCTION rt_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM qtg_notify('qtg_dispatch');
        RETURN NULL;
    END;
    $$;
    CREATE TRIGGER rt_jobs_notify AFTER INSERT ON rt_jobs
        FOR EACH STATEMENT EXECUTE FUNCTION rt_jobs_notify();
    """,
)
ADD_JOBS = Query(
    "tests/rt_add_jobs",
    "INSERT INTO rt_jobs (payload) SELECT %(payload)s FROM generate_series(1, %(n)s)",
)
CLAIM = Query(
    "tests/rt_claim",
    """
    SELECT id, payload FROM rt_jobs WHERE state = 'pending'
    ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
    """,
)
MARK_DONE = Query(
    "tests/rt_mark_done",
    """
    UPDATE rt_jobs SET state = 'done', processed_count = processed_count + 1,
        processed_by = %(by)s, processed_at = clock_timestamp()
    WHERE id = ANY(%(ids)s)
    """,
)
COUNTS = Query(
    "tests/rt_counts",
    """
    SELECT count(*) FILTER (WHERE state = 'done') AS done,
           count(*) FILTER (WHERE state = 'pending') AS pending,
           coalesce(max(processed_count), 0) AS max_processed,
           count(DISTINCT processed_by) AS processors
    FROM rt_jobs
    """,
)

SLEEP = Query("tests/rt_sleep", "SELECT pg_sleep(60)")

BATCH = 5


async def process_jobs(ctx: ServiceContext) -> int:
    """Claim up to BATCH pending jobs and mark them done, in one transaction.

    A job with payload 'hold' is marked done and then the transaction is held
    open forever — an in-flight pass, for the shutdown tests: its work must
    roll back when the process is stopped. With payload 'block' the pass runs
    a 60 s statement instead (a stand-in for a lock wait), which trio cannot
    interrupt: the shutdown watchdog must cancel it.
    """
    async with ctx.db.transaction() as tx:
        rows = await tx.fetch(CLAIM, {"limit": BATCH})
        if not rows:
            return 0
        await tx.execute(MARK_DONE, {"ids": [r["id"] for r in rows], "by": str(os.getpid())})
        if any(r["payload"] == "hold" for r in rows):
            await trio.sleep_forever()
        if any(r["payload"] == "block" for r in rows):
            await tx.execute(SLEEP)
    return len(rows)


async def idle(ctx: ServiceContext) -> int:
    await trio.lowlevel.checkpoint()
    return 0
