"""Planner statistics that follow growth (issue 44 item 4).

A pooled connection keeps the generic plan of every statement it runs often;
nothing makes it again until the statistics of a table it reads change. With
autovacuum off — or lagging a burst — a plan made while a table was small (or
ANALYZEd empty) is kept as it grows by orders of magnitude. The runtime's
connections already avoid sequential and bitmap scans whatever the statistics
(qtg.db.pool.PLANNER_SETTINGS); this closes what those settings cannot: with
statistics that say "empty", every index path costs one row and a probe by
primary key can come out as a walk of another index. `refresh_statistics`
ANALYZEs each table grown past `GROWTH_FACTOR` times what its statistics
count (migration 0061), which invalidates the cached plans that read it; the
runtime runs it every `CHECK_SECONDS` (qtg.runtime.database.watch_statistics).
"""

from __future__ import annotations

import logging

from qtg.db import Database, sql_family

log = logging.getLogger("qtg.services.statistics")

SQL = sql_family("statistics", "analyze_grown")

#: A table is analyzed once it holds this many times the rows its statistics count.
GROWTH_FACTOR = 2.0
#: ... and at least this many rows (below, any plan reads little).
MIN_ROWS = 1_000
#: How often the runtime looks (a cheap read of pg_stat_user_tables).
CHECK_SECONDS = 5.0


async def refresh_statistics(
    db: Database, *, factor: float = GROWTH_FACTOR, min_rows: int = MIN_ROWS
) -> list[str]:
    """ANALYZE the tables that grew past their statistics; their names."""
    rows = await db.fetch(SQL.analyze_grown, {"factor": factor, "min_rows": min_rows})
    tables = [str(r["table_name"]) for r in rows]
    if tables:
        log.info("planner statistics refreshed", extra={"tables": tables})
    return tables
