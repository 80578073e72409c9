"""One racing worker process for test_concurrency.py: runs the three passes
until every movement in the database has finished, then exits 0 (1 on timeout)."""

from __future__ import annotations

import sys

import trio

from qtg.config import Settings
from qtg.db import Database, Query
from qtg.providers.registry import build_registry
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.observe import observe_active_nodes
from qtg.services.recover import recover_unknown_nodes

UNFINISHED = Query(
    "tests/unfinished",
    "SELECT count(*) AS n FROM movement_requests WHERE request_state <> 'COMPLETED'",
)


async def main(dsn: str, deadline: float) -> int:
    settings = Settings.from_env({"MG_DATABASE_URL": dsn})
    async with Database(dsn, max_size=4) as db:
        svc = ServiceContext(db, settings, build_registry(settings, db))
        try:
            with trio.move_on_after(deadline):
                while await db.fetchval(UNFINISHED):
                    worked = await dispatch_ready_nodes(svc)
                    worked += await observe_active_nodes(svc)
                    worked += await recover_unknown_nodes(svc)
                    if not worked:
                        await trio.sleep(0.01)  # a polling worker's interval
                return 0
        finally:
            await svc.providers.aclose()
    return 1


if __name__ == "__main__":
    sys.exit(trio.run(main, sys.argv[1], float(sys.argv[2])))
