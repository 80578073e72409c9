"""Named SQL queries, loaded from `sql/<service>/<name>.sql` (River/Procrastinate style).

A service declares the queries it uses when its module is imported:

    SQL = sql_family("dispatch", "list_candidates", "claim_candidate")
    row = await tx.fetchrow(SQL.claim_candidate, {"candidate_id": node_id})

Declaring the names up front is what makes a missing or misspelled query fail
at start-up (import time), not at first use in the middle of a money movement.
Python never assembles SQL from pieces; parameters use psycopg's `%(name)s`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: The repository's `sql/` folder (qtg is installed editable; see README).
SQL_ROOT = Path(__file__).resolve().parents[2] / "sql"


class UnknownQueryError(LookupError):
    """A query name that has no `.sql` file."""


@dataclass(frozen=True, slots=True)
class Query:
    name: str  # "<service>/<query>", the file's path under sql/ without .sql
    text: str

    def __str__(self) -> str:
        return self.name


class QueryFamily:
    """The declared queries of one service; attribute access returns a `Query`."""

    __slots__ = ("_queries", "service")

    def __init__(self, service: str, queries: dict[str, Query]) -> None:
        self.service = service
        self._queries = queries

    def __getattr__(self, name: str) -> Query:
        try:
            return self._queries[name]
        except KeyError:
            raise UnknownQueryError(
                f"query {self.service}/{name} was not declared; declared: "
                f"{', '.join(sorted(self._queries))}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._queries)


_loaded: dict[str, Query] = {}


def load_query(service: str, name: str, root: Path = SQL_ROOT) -> Query:
    """Read one query file (cached); raise UnknownQueryError naming the file if absent."""
    key = f"{service}/{name}"
    cached = _loaded.get(key) if root == SQL_ROOT else None
    if cached is not None:
        return cached
    path = root / service / f"{name}.sql"
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        available = sorted(p.stem for p in (root / service).glob("*.sql"))
        raise UnknownQueryError(
            f"no SQL file for query {key} (looked for {path}); "
            f"{service} has: {', '.join(available) or 'nothing'}"
        ) from None
    if not text:
        raise UnknownQueryError(f"SQL file for query {key} is empty: {path}")
    query = Query(key, text)
    if root == SQL_ROOT:
        _loaded[key] = query
    return query


def sql_family(service: str, *names: str, root: Path = SQL_ROOT) -> QueryFamily:
    """Load the named queries of `service` now, failing on the first missing one."""
    return QueryFamily(service, {name: load_query(service, name, root) for name in names})


def declared_queries() -> set[str]:
    """Every query name loaded so far (tests compare this with the files on disk)."""
    return set(_loaded)
