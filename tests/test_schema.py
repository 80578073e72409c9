"""The database enforces the state machines and writes the event log, whoever writes.

Every pair of states is tried against the real triggers: each allowed
transition must be accepted and each other one refused with SQLSTATE QT001.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import schema_rows as rows

from qtg.domain.states import (
    NODE_TRANSITIONS,
    REQUEST_TRANSITIONS,
    NodeState,
    RequestState,
    node_transition_allowed,
    request_transition_allowed,
)

ILLEGAL_TRANSITION = "QT001"


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture
def plan(conn: psycopg.Connection[Any]) -> rows.Plan:
    return rows.plan(conn)


def _refusal(conn: psycopg.Connection[Any], statement: Any) -> str | None:
    """Run `statement()` in a savepoint; return the SQLSTATE it failed with, or None."""
    try:
        with conn.transaction():
            statement()
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


def test_transition_tables_equal_the_domain_lists(conn: psycopg.Connection[Any]) -> None:
    node_pairs = set(conn.execute("SELECT from_state, to_state FROM node_state_transitions"))
    request_pairs = set(conn.execute("SELECT from_state, to_state FROM request_state_transitions"))
    assert node_pairs == {(str(a), str(b)) for a, b in NODE_TRANSITIONS}
    assert request_pairs == {(str(a), str(b)) for a, b in REQUEST_TRANSITIONS}


def test_every_node_transition_is_enforced(conn: psycopg.Connection[Any], plan: rows.Plan) -> None:
    wrong: list[str] = []
    for src, dst in itertools.product(NodeState, repeat=2):
        with conn.transaction():
            request_id = rows.request(conn, plan)
            node_id = rows.node(conn, plan, request_id)
            rows.walk_node_to(conn, node_id, src)
            state = _refusal(conn, lambda n=node_id, d=dst: rows.set_node_state(conn, n, d))
            expected = None if node_transition_allowed(src, dst) else ILLEGAL_TRANSITION
            if state != expected:
                wrong.append(
                    f"{src} -> {dst}: got {state or 'accepted'}, expected {expected or 'accepted'}"
                )
            raise psycopg.Rollback()
    assert not wrong, "\n".join(wrong)


def test_every_request_transition_is_enforced(
    conn: psycopg.Connection[Any], plan: rows.Plan
) -> None:
    wrong: list[str] = []
    for src, dst in itertools.product(RequestState, repeat=2):
        with conn.transaction():
            request_id = rows.request(conn, plan)
            rows.walk_request_to(conn, request_id, src)
            state = _refusal(conn, lambda r=request_id, d=dst: rows.set_request_state(conn, r, d))
            expected = None if request_transition_allowed(src, dst) else ILLEGAL_TRANSITION
            if state != expected:
                wrong.append(
                    f"{src} -> {dst}: got {state or 'accepted'}, expected {expected or 'accepted'}"
                )
            raise psycopg.Rollback()
    assert not wrong, "\n".join(wrong)


def test_rows_are_born_in_their_initial_state(
    conn: psycopg.Connection[Any], plan: rows.Plan
) -> None:
    request_id = rows.request(conn, plan)
    assert _refusal(conn, lambda: rows.node(conn, plan, request_id, "READY")) == "QT001"
    assert _refusal(conn, lambda: rows.request(conn, plan, state="APPROVED")) == "QT001"
    assert _refusal(conn, lambda: rows.node(conn, plan, request_id)) is None


@pytest.mark.parametrize(
    ("table", "column", "trigger", "make_row"),
    [
        ("movement_request_nodes", "node_state", "movement_request_nodes_guard", "node"),
        ("movement_requests", "request_state", "movement_requests_guard", "request"),
    ],
)
def test_state_checks_reject_unknown_states(
    conn: psycopg.Connection[Any],
    plan: rows.Plan,
    table: str,
    column: str,
    trigger: str,
    make_row: str,
) -> None:
    request_id = rows.request(conn, plan)
    row_id = rows.node(conn, plan, request_id) if make_row == "node" else request_id
    setter = rows.set_node_state if make_row == "node" else rows.set_request_state
    # With the guard in place the transition itself is refused ...
    assert _refusal(conn, lambda: setter(conn, row_id, "LIMBO")) == ILLEGAL_TRANSITION
    # ... and without it, the CHECK constraint still refuses the state.
    with conn.transaction():
        conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER {trigger}")
        assert _refusal(conn, lambda: setter(conn, row_id, "LIMBO")) == "23514"
        assert _refusal(conn, lambda: setter(conn, row_id, "COMPLETED")) is None
        raise psycopg.Rollback()


@pytest.mark.parametrize(
    ("statement", "params"),
    [
        (
            "INSERT INTO template_proposals (template_key, name, graph, proposal_state, "
            "proposed_by) VALUES ('k', 'n', '{}', 'LIMBO', 'me')",
            None,
        ),
        (
            "INSERT INTO movement_callback_outbox (request_id, event_type, callback_url, "
            "payload, status) VALUES (%(request_id)s, 'x', 'http://x', '{}', 'LIMBO')",
            "request",
        ),
        ("INSERT INTO executors (executor_key, health_state) VALUES ('e', 'LIMBO')", None),
        ("INSERT INTO api_tokens (name, token_hash, role) VALUES ('t', 'h', 'root')", None),
        (
            "INSERT INTO worker_heartbeats (network_class, worker_name, instance_id, host, "
            "pid, worker_group, status, interval_seconds) "
            "VALUES ('default', 'w', 'h:1:x', 'h', 1, 'core', 'LIMBO', 1)",
            None,
        ),
    ],
)
def test_other_state_columns_accept_only_their_states(
    conn: psycopg.Connection[Any], plan: rows.Plan, statement: str, params: str | None
) -> None:
    values = {"request_id": rows.request(conn, plan)} if params else None
    assert _refusal(conn, lambda: conn.execute(statement, values)) == "23514"


def _events(conn: psycopg.Connection[Any], request_id: Any) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT id, event_type, node_id, from_state, to_state FROM movement_events "
        "WHERE request_id = %s ORDER BY id",
        (request_id,),
    ).fetchall()


def test_node_state_change_writes_its_event(conn: psycopg.Connection[Any], plan: rows.Plan) -> None:
    request_id = rows.request(conn, plan)
    node_id = rows.node(conn, plan, request_id)
    before = _events(conn, request_id)
    rows.set_node_state(conn, node_id, "READY")
    conn.execute(
        "UPDATE movement_request_nodes SET artifacts = '{\"x\": 1}' WHERE id = %s", (node_id,)
    )
    new = _events(conn, request_id)[len(before) :]
    assert [e[1:] for e in new] == [("node_state_changed", node_id, "BLOCKED", "READY")]


def test_manual_intervention_writes_a_request_attention_event(
    conn: psycopg.Connection[Any], plan: rows.Plan
) -> None:
    request_id = rows.request(conn, plan)
    rows.walk_request_to(conn, request_id, "EXECUTING")
    assert "request_attention" not in [e[1] for e in _events(conn, request_id)]
    rows.set_request_state(conn, request_id, "MANUAL_INTERVENTION")
    tail = [e[1:] for e in _events(conn, request_id)[-2:]]
    assert tail == [
        ("request_state_changed", None, "EXECUTING", "MANUAL_INTERVENTION"),
        ("request_attention", None, "EXECUTING", "MANUAL_INTERVENTION"),
    ]


def test_callback_outbox_row_per_event_only_with_a_callback_url(
    conn: psycopg.Connection[Any], plan: rows.Plan
) -> None:
    with_url = rows.request(conn, plan, callback_url="http://127.0.0.1:9/hook")
    without = rows.request(conn, plan)
    for request_id in (with_url, without):
        node_id = rows.node(conn, plan, request_id)
        rows.walk_request_to(conn, request_id, "EXECUTING")
        rows.walk_node_to(conn, node_id, "SUBMITTED")

    def outbox(request_id: Any) -> list[tuple[Any, ...]]:
        return conn.execute(
            "SELECT event_id, event_type, callback_url, status, payload->>'event_type' "
            "FROM movement_callback_outbox WHERE request_id = %s ORDER BY event_id",
            (request_id,),
        ).fetchall()

    events = _events(conn, with_url)
    assert len(events) >= 5  # created, 2 request changes, 3 node changes
    assert outbox(with_url) == [
        (e[0], e[1], "http://127.0.0.1:9/hook", "pending", e[1]) for e in events
    ]
    assert _events(conn, without)  # it has events ...
    assert outbox(without) == []  # ... but nowhere to send them


def test_callback_max_attempts_follows_the_session_setting(
    conn: psycopg.Connection[Any], plan: rows.Plan
) -> None:
    rows.request(conn, plan, callback_url="http://127.0.0.1:9/a")
    conn.execute("SET qtg.callback_max_attempts = 9")
    rows.request(conn, plan, callback_url="http://127.0.0.1:9/b")
    got = conn.execute(
        "SELECT callback_url, max_attempts FROM movement_callback_outbox ORDER BY id"
    ).fetchall()
    assert got == [("http://127.0.0.1:9/a", 5), ("http://127.0.0.1:9/b", 9)]


def test_audit_events_are_append_only(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO audit_events (outbox_id, actor, action, object_type, object_id, detail, "
        "occurred_at, prev_hash, row_hash) "
        "VALUES (1, 'alice', 'approve', 'movement', 'm1', '{}', now(), '', 'h1')"
    )
    for statement in (
        "UPDATE audit_events SET actor = 'mallory'",
        "DELETE FROM audit_events",
        "TRUNCATE audit_events",
    ):
        assert _refusal(conn, lambda s=statement: conn.execute(s)) == "42501", statement
    assert conn.execute("SELECT actor FROM audit_events").fetchall() == [("alice",)]


# ------------------------------------------- request_created_at (migrations/0017)

REQUEST_CREATED_AT = """
SELECT n.request_created_at, r.created_at
FROM movement_request_nodes n JOIN movement_requests r ON r.id = n.request_id
WHERE n.id = %(id)s
"""


def test_a_node_inserted_without_request_created_at_gets_its_requests(
    conn: psycopg.Connection[Any], plan: rows.Plan
) -> None:
    first = rows.request(conn, plan)
    second = rows.request(conn, plan)  # a later created_at (clock_timestamp)
    for request_id in (first, second):
        node_id = rows.node(conn, plan, request_id)  # the insert does not name the column
        copied, created = conn.execute(REQUEST_CREATED_AT, {"id": node_id}).fetchone()  # type: ignore[misc]
        assert copied is not None and copied == created


def test_request_created_at_is_the_requests_whatever_the_insert_says(
    conn: psycopg.Connection[Any], plan: rows.Plan
) -> None:
    request_id = rows.request(conn, plan)
    node_id = conn.execute(
        "INSERT INTO movement_request_nodes (request_id, plan_node_id, node_key, node_kind,"
        " action_type, node_state, request_created_at)"
        " VALUES (%(rid)s, %(pid)s, 'lying', 'action', 'cex_withdrawal', 'BLOCKED',"
        " '2000-01-01') RETURNING id",
        {"rid": request_id, "pid": plan.plan_node_id},
    ).fetchone()[0]  # type: ignore[index]
    copied, created = conn.execute(REQUEST_CREATED_AT, {"id": node_id}).fetchone()  # type: ignore[misc]
    assert copied == created
