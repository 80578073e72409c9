"""The event log of a statement that moves many rows.

The outcomes' writes move a whole batch of nodes or requests in one UPDATE
(qtg/db/deferred.py). Such a statement writes exactly one event per changed
row, none for a row whose state did not change, in the order the rows were
updated (the order `RETURNING` reports them in), each row's own events in
their fixed order, and the callbacks of the requests that have a callback_url
in event order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import schema_rows as rows

Conn = psycopg.Connection[Any]


@pytest.fixture
def conn(dsn: str) -> Iterator[Conn]:
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


def _mark(conn: Conn) -> int:
    row = conn.execute("SELECT coalesce(max(id), 0) FROM movement_events").fetchone()
    assert row is not None
    return int(row[0])


def _events_since(conn: Conn, mark: int) -> list[tuple[Any, ...]]:
    """(request_id, node_id, event_type, from, to, payload) of the events after `mark`."""
    return conn.execute(
        """
        SELECT request_id, node_id, event_type, from_state, to_state, payload
        FROM movement_events WHERE id > %s ORDER BY id
        """,
        (mark,),
    ).fetchall()


def test_one_update_of_many_nodes_writes_one_event_per_changed_node_in_update_order(
    conn: Conn,
) -> None:
    plan = rows.plan(conn)
    request_id = rows.request(conn, plan)
    moved = [rows.node(conn, plan, request_id) for _ in range(5)]
    stays = rows.node(conn, plan, request_id)

    mark = _mark(conn)
    updated = conn.execute(
        """
        UPDATE movement_request_nodes
        SET node_state = CASE WHEN id = %(stays)s THEN node_state ELSE 'READY' END,
            attempt_no = 7
        WHERE id = ANY(%(ids)s)
        RETURNING id, node_state
        """,
        {"ids": [*moved, stays], "stays": stays},
    ).fetchall()
    update_order = [node_id for node_id, state in updated if state == "READY"]
    assert sorted(update_order) == sorted(moved)

    events = _events_since(conn, mark)
    assert [e[1] for e in events] == update_order
    assert {(e[0], e[2], e[3], e[4]) for e in events} == {
        (request_id, "node_state_changed", "BLOCKED", "READY")
    }
    assert all(e[5] == {"attempt_no": 7, "action_type": "cex_withdrawal"} for e in events), events


def test_one_update_of_many_requests_keeps_each_requests_events_in_order(conn: Conn) -> None:
    plan = rows.plan(conn)
    ids = [rows.request(conn, plan) for _ in range(3)]
    for request_id in ids:
        rows.walk_request_to(conn, request_id, "EXECUTING")

    mark = _mark(conn)
    updated = conn.execute(
        """
        UPDATE movement_requests
        SET request_state = 'MANUAL_INTERVENTION', current_frontier = ARRAY['a', 'b']
        WHERE id = ANY(%(ids)s)
        RETURNING id
        """,
        {"ids": ids},
    ).fetchall()

    events = _events_since(conn, mark)
    expected = []
    for (request_id,) in updated:
        expected += [
            (request_id, "request_state_changed", "EXECUTING", "MANUAL_INTERVENTION", {}),
            (
                request_id,
                "request_attention",
                "EXECUTING",
                "MANUAL_INTERVENTION",
                {"reason": "manual intervention required"},
            ),
            (request_id, "frontier_advanced", None, None, {"frontier": ["a", "b"]}),
        ]
    assert [(e[0], e[2], e[3], e[4], e[5]) for e in events] == expected


def test_frontier_alone_and_untouched_rows(conn: Conn) -> None:
    plan = rows.plan(conn)
    moved, untouched = rows.request(conn, plan), rows.request(conn, plan)
    mark = _mark(conn)
    conn.execute(
        """
        UPDATE movement_requests
        SET current_frontier = CASE WHEN id = %(moved)s THEN ARRAY['x'] ELSE current_frontier END
        WHERE id = ANY(%(ids)s)
        """,
        {"ids": [moved, untouched], "moved": moved},
    )
    events = _events_since(conn, mark)
    assert [(e[0], e[2], e[5]) for e in events] == [
        (moved, "frontier_advanced", {"frontier": ["x"]})
    ]


def test_callbacks_of_one_statement_follow_their_events(conn: Conn) -> None:
    plan = rows.plan(conn)
    url = "http://127.0.0.1:9/hook"
    called = [rows.request(conn, plan, callback_url=url) for _ in range(2)]
    silent = rows.request(conn, plan)
    conn.execute(
        "UPDATE movement_requests SET current_frontier = ARRAY['f'] WHERE id = ANY(%s)",
        ([*called, silent],),
    )

    outbox = conn.execute(
        """
        SELECT o.request_id, o.event_id, o.event_type, o.callback_url, o.payload, o.status
        FROM movement_callback_outbox o
        WHERE o.request_id = ANY(%s) AND o.event_type = 'frontier_advanced'
        ORDER BY o.id
        """,
        ([*called, silent],),
    ).fetchall()
    events = conn.execute(
        """
        SELECT id, request_id FROM movement_events
        WHERE request_id = ANY(%s) AND event_type = 'frontier_advanced' ORDER BY id
        """,
        ([*called, silent],),
    ).fetchall()
    assert len(events) == 3
    called_events = [(event_id, rid) for event_id, rid in events if rid != silent]
    assert [(o[1], o[0]) for o in outbox] == called_events
    for request_id, event_id, _, callback_url, payload, status in outbox:
        assert (callback_url, status) == (url, "pending")
        assert payload["event_id"] == event_id
        assert payload["request_id"] == str(request_id)
        assert payload["data"] == {"frontier": ["f"]}
