"""A transaction's deferred writes, the one-row writes of a kind merged into one statement.

A transaction's deferred writes are sent in order, pipelined, with its next
statement or its commit (`Tx.defer`). Many are one row each of the same kind:
an observer batch that completes ten nodes queued ten node UPDATEs, ten
frontier UPDATEs, ten request-state UPDATEs — thirty statements, each with its
own executor start, plan lookup and trigger queue on the server and its own
parameters, send and result in psycopg (issue 29: the drain spent a third of
its server time in them, at ~4 times the cost per row of the same UPDATE over an
array). `Tx.defer_row` queues such a write as ONE ROW of a statement written
over arrays (every parameter a list, one element per row: `unnest`), and the
rows of one kind go out as one statement wherever that keeps every write
that could depend on another in its order:

- A row names its unit: the rows its write may depend on or be depended on by
  (for qtg, the movement request — its nodes' rows and its own, whose guards
  and triggers read one another) — and the row it writes in that unit
  (`row_id`: a node's key will do, the unit tells the request). Writes of
  different units touch different rows and may change their relative order
  (their event rows then interleave differently; each request's own stay in
  order).
- A row joins the open statement of its kind only if no write of its unit was
  queued after that statement's place, and that statement does not write the
  same row already: moving the row up to that place then passes no write of
  its unit, and rows written side by side by one statement are distinct.
  Otherwise it opens a new statement of its kind at the end. So the writes of
  one unit keep the order they were queued in, and no row is written twice by
  one statement.
- A plain `Tx.defer` write names no unit, so its dependencies are unknown: it
  closes every open statement, and nothing moves across it.

Pure bookkeeping, no I/O: `take()` hands the statements, in order, to the
transaction that sends them.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from qtg.db.queries import Query

#: psycopg's parameters of one statement.
Params = Mapping[str, Any] | Sequence[Any] | None


class _Rows:
    """The rows of one statement written over arrays, in the order they were queued."""

    __slots__ = ("query", "row_ids", "rows")

    def __init__(self, query: Query) -> None:
        self.query = query
        self.rows: list[Mapping[str, Any]] = []
        self.row_ids: set[Hashable] = set()

    def params(self) -> dict[str, list[Any]]:
        """One list per parameter, element i of each from row i."""
        return {name: [row[name] for row in self.rows] for name in self.rows[0]}


class Deferred:
    """The writes queued in a transaction and not sent yet (see the module docstring)."""

    __slots__ = ("_items", "_last", "_open")

    def __init__(self) -> None:
        self._items: list[tuple[Query, Params] | _Rows] = []
        self._open: dict[str, int] = {}  # query name → place of its open statement
        self._last: dict[Hashable, int] = {}  # unit → place of its latest write

    def __bool__(self) -> bool:
        return bool(self._items)

    def statement(self, query: Query, params: Params = None) -> None:
        """A write of its own: sent as it is, after everything queued before it."""
        self._items.append((query, params))
        self._open.clear()

    def row(
        self, query: Query, row: Mapping[str, Any], *, unit: Hashable, row_id: Hashable
    ) -> None:
        """One row of `query` (a statement over arrays: each of its parameters is
        the list of its rows' values), writing the row `row_id` of `unit`. Every
        row of one query must name the same parameters."""
        at = self._open.get(query.name)
        rows = self._items[at] if at is not None else None
        if (
            at is None
            or not isinstance(rows, _Rows)
            or self._last.get(unit, -1) > at
            or (unit, row_id) in rows.row_ids
        ):
            at = len(self._items)
            rows = _Rows(query)
            self._items.append(rows)
            self._open[query.name] = at
        rows.rows.append(row)
        rows.row_ids.add((unit, row_id))
        self._last[unit] = at  # joining needs _last[unit] <= at: never a step back

    def take(self) -> list[tuple[Query, Params]]:
        """Every queued statement in order, with its parameters; the queue is then empty."""
        items = self._items
        self._items, self._open, self._last = [], {}, {}
        return [(i.query, i.params()) if isinstance(i, _Rows) else i for i in items]

    def clear(self) -> None:
        self._items, self._open, self._last = [], {}, {}
