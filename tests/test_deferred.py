"""qtg.db.deferred: a transaction's one-row writes of a kind merged into one
statement, without moving any write past another of its unit (issue 29)."""

from __future__ import annotations

import random
from collections.abc import Hashable
from typing import Any

from qtg.db.deferred import Deferred
from qtg.db.queries import Query

COMPLETE = Query("t/complete", "UPDATE nodes ... unnest(%(ids)s)")
RELEASE = Query("t/release", "UPDATE nodes ... unnest(%(ids)s)")
FRONTIER = Query("t/frontier", "UPDATE requests ... unnest(%(ids)s)")
STATE = Query("t/state", "UPDATE requests ... unnest(%(ids)s)")
NOTIFY = Query("t/notify", "SELECT pg_notify('x', '')")


def shape(d: Deferred) -> list[tuple[str, Any]]:
    return [(q.name, p["ids"] if isinstance(p, dict) else p) for q, p in d.take()]


def node_write(d: Deferred, query: Query, request: str, node: str) -> None:
    d.row(query, {"ids": node}, unit=request, row_id=node)


def request_write(d: Deferred, query: Query, request: str) -> None:
    d.row(query, {"ids": request}, unit=request, row_id=request)


def test_one_statement_per_kind_for_requests_that_follow_each_other() -> None:
    """An observer batch completing the one node of each of three requests: four
    statements, not twelve; each request's writes keep their order."""
    d = Deferred()
    for r in ("r1", "r2", "r3"):
        node_write(d, COMPLETE, r, f"{r}.a")
        node_write(d, RELEASE, r, f"{r}.b")
        request_write(d, FRONTIER, r)
        request_write(d, STATE, r)
    assert shape(d) == [
        ("t/complete", ["r1.a", "r2.a", "r3.a"]),
        ("t/release", ["r1.b", "r2.b", "r3.b"]),
        ("t/frontier", ["r1", "r2", "r3"]),
        ("t/state", ["r1", "r2", "r3"]),
    ]
    assert not d and shape(d) == []  # take() empties the queue


def test_rows_are_columns_of_the_statement_parameters() -> None:
    d = Deferred()
    d.row(COMPLETE, {"ids": 1, "refs": "x"}, unit="r1", row_id=1)
    d.row(COMPLETE, {"ids": 2, "refs": None}, unit="r2", row_id=2)
    assert d.take() == [(COMPLETE, {"ids": [1, 2], "refs": ["x", None]})]


def test_a_row_never_moves_past_a_write_of_its_unit() -> None:
    """A second node of r1 completed after r1's frontier write cannot join the
    first completion statement (it would land before that frontier write)."""
    d = Deferred()
    node_write(d, COMPLETE, "r1", "r1.a")
    request_write(d, FRONTIER, "r1")
    node_write(d, COMPLETE, "r1", "r1.b")
    request_write(d, FRONTIER, "r1")
    assert shape(d) == [
        ("t/complete", ["r1.a"]),
        ("t/frontier", ["r1"]),
        ("t/complete", ["r1.b"]),
        ("t/frontier", ["r1"]),
    ]


def test_one_statement_never_writes_a_row_twice() -> None:
    d = Deferred()
    request_write(d, STATE, "r1")
    request_write(d, STATE, "r1")  # e.g. EXECUTING, then WAITING_MANUAL_ACTION
    assert shape(d) == [("t/state", ["r1"]), ("t/state", ["r1"])]


def test_distinct_rows_of_one_unit_share_a_statement() -> None:
    """A fan-out: the three successors released by one completion, one statement."""
    d = Deferred()
    node_write(d, COMPLETE, "r1", "r1.a")
    for n in ("r1.b", "r1.c", "r1.d"):
        node_write(d, RELEASE, "r1", n)
    request_write(d, FRONTIER, "r1")
    assert shape(d) == [
        ("t/complete", ["r1.a"]),
        ("t/release", ["r1.b", "r1.c", "r1.d"]),
        ("t/frontier", ["r1"]),
    ]


def test_rows_are_told_apart_within_their_unit() -> None:
    """The same node key in two requests is two rows: one statement (a drain's
    movements share their plan's keys)."""
    d = Deferred()
    for r in ("r1", "r2"):
        d.row(RELEASE, {"ids": f"{r}.b"}, unit=r, row_id="b")
    d.row(RELEASE, {"ids": "r2.b"}, unit="r2", row_id="b")  # the same row again
    assert shape(d) == [("t/release", ["r1.b", "r2.b"]), ("t/release", ["r2.b"])]


def test_a_plain_write_closes_every_open_statement() -> None:
    d = Deferred()
    node_write(d, COMPLETE, "r1", "r1.a")
    d.statement(NOTIFY, None)
    node_write(d, COMPLETE, "r2", "r2.a")
    assert shape(d) == [("t/complete", ["r1.a"]), ("t/notify", None), ("t/complete", ["r2.a"])]


def test_the_order_rules_hold_for_any_sequence() -> None:
    """Random sequences (fixed seeds): every unit's writes come out in the order
    they were queued; plain writes keep their place with respect to every row;
    no statement writes a row twice; nothing is lost or added."""
    kinds = (COMPLETE, RELEASE, FRONTIER, STATE)
    for seed in range(300):
        rng = random.Random(seed)
        d = Deferred()
        queued: list[tuple[int, Hashable, Hashable, str]] = []  # (seq, unit, row, kind)
        for seq in range(rng.randint(1, 40)):
            if rng.random() < 0.08:
                d.statement(NOTIFY, {"ids": ("plain", seq)})
                queued.append((seq, None, None, "plain"))
                continue
            unit = rng.choice(("r1", "r2", "r3", "r4"))
            query = rng.choice(kinds)
            row = unit if query in (FRONTIER, STATE) else f"{unit}.{rng.choice('abc')}"
            d.row(query, {"ids": (seq, row)}, unit=unit, row_id=row)
            queued.append((seq, unit, row, query.name))
        out: list[tuple[int, int]] = []  # (statement index, seq)
        for i, (query, params) in enumerate(d.take()):
            assert isinstance(params, dict)
            if query is NOTIFY:
                out.append((i, params["ids"][1]))
                continue
            rows = [r for _, r in params["ids"]]
            assert len(rows) == len(set(rows)), (seed, query.name, rows)
            out.extend((i, seq) for seq, _ in params["ids"])
        assert sorted(seq for _, seq in out) == [q[0] for q in queued], seed
        place = dict((seq, i) for i, seq in out)
        for unit in ("r1", "r2", "r3", "r4"):
            mine = [place[q[0]] for q in queued if q[1] == unit]
            assert mine == sorted(mine), (seed, unit)
        for seq, _unit, _, kind in queued:
            if kind != "plain":
                continue
            for other, _, _, _ in queued:
                if other < seq:
                    assert place[other] < place[seq], (seed, other, seq)
                elif other > seq:
                    assert place[other] > place[seq], (seed, other, seq)
