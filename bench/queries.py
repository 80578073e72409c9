"""The benchmark's own SQL, one statement per file in `bench/sql/`.

The engine's queries live in `sql/<service>/`; the benchmark's (commit
timestamps, pg_stat_statements, pg_stat_database, database admin) live beside
it and load through the same `sql_family`, so a missing file fails at import.
Statements that name a database carry `{db}` / `{template}` placeholders that
are filled with `psycopg.sql.Identifier`, never by pasting strings.
"""

from __future__ import annotations

from pathlib import Path

from qtg.db import QueryFamily, sql_family

HERE = Path(__file__).resolve().parent


def bench_sql(*names: str) -> QueryFamily:
    """Load `bench/sql/<name>.sql` for each name (fails on the first missing one)."""
    return sql_family("sql", *names, root=HERE)
