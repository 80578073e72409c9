"""NOTIFY triggers: the right channel on the right change, on commit only (DESIGN §3).

A raw LISTEN connection watches every channel. To prove that something did
*not* fire without sleeping, each action is followed by a marker NOTIFY from a
later transaction: notifications arrive in commit order, so everything the
action sent has arrived by the time the marker does.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import schema_rows as rows
from psycopg import sql
from psycopg.types.json import Jsonb

from qtg.db import CHANNELS
from qtg.services.node_attention import SQL as NODE_ATTENTION_SQL
from qtg.services.observe import SQL as OBSERVE_SQL

MARKER = "qtg_test_marker"
Conn = psycopg.Connection[Any]


class Watch:
    """What the listening connection saw between two markers."""

    def __init__(self, listener: Conn, writer: Conn) -> None:
        self.listener = listener
        self.writer = writer

    def _until_marker(self) -> list[tuple[str, str]]:
        token = uuid.uuid4().hex
        self.writer.execute("SELECT pg_notify(%s, %s)", (MARKER, token))
        seen: list[tuple[str, str]] = []
        for notify in self.listener.notifies(timeout=10):
            if notify.channel == MARKER and notify.payload == token:
                return seen
            if notify.channel != MARKER:
                seen.append((notify.channel, notify.payload))
        raise AssertionError(f"marker not received within 10 s; saw {seen}")

    def fired(self, action: Callable[[], Any]) -> list[tuple[str, str]]:
        """(channel, payload) of every notification `action` caused, in order."""
        self._until_marker()  # drain whatever earlier steps sent
        action()
        return self._until_marker()

    def channels(self, action: Callable[[], Any]) -> set[str]:
        return {channel for channel, _ in self.fired(action)}


@pytest.fixture
def writer(dsn: str) -> Iterator[Conn]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def watch(dsn: str, writer: Conn) -> Iterator[Watch]:
    with psycopg.connect(dsn, autocommit=True) as listener:
        for channel in (*CHANNELS, MARKER):
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        yield Watch(listener, writer)


@pytest.fixture
def plan(writer: Conn) -> rows.Plan:
    return rows.plan(writer)


def test_delivered_on_commit_not_on_rollback(watch: Watch, writer: Conn, plan: rows.Plan) -> None:
    request_id = rows.request(writer, plan)
    node_id = rows.node(writer, plan, request_id)

    def rolled_back() -> None:
        with writer.transaction():
            rows.set_node_state(writer, node_id, "READY")
            raise psycopg.Rollback()

    assert watch.fired(rolled_back) == []

    def committed() -> None:
        with writer.transaction():
            rows.set_node_state(writer, node_id, "READY")

    assert "qtg_dispatch" in watch.channels(committed)


def test_node_changes_fire_their_channels(watch: Watch, writer: Conn, plan: rows.Plan) -> None:
    request_id = rows.request(writer, plan)
    node_id = rows.node(writer, plan, request_id)

    def to(state: str) -> Callable[[], None]:
        return lambda: rows.set_node_state(writer, node_id, state)

    def touch(assignment: str) -> Callable[[], None]:
        statement = sql.SQL("UPDATE movement_request_nodes SET {} WHERE id = %s").format(
            sql.SQL(assignment)
        )
        return lambda: writer.execute(statement, (node_id,))

    assert watch.channels(to("READY")) == {"qtg_dispatch", "qtg_events"}
    # an update that does not change the state wakes nobody
    assert watch.channels(touch("artifacts = '{\"a\": 1}'")) == set()
    assert watch.channels(to("SUBMITTING")) == {"qtg_events"}
    assert watch.channels(to("SUBMITTED")) == {"qtg_observe", "qtg_events"}
    # from NULL (due now) to later, or later still: nobody needs waking
    assert watch.channels(touch("next_observe_at = now() + interval '1 hour'")) == set()
    assert watch.channels(touch("next_observe_at = now() + interval '2 hours'")) == set()
    assert watch.channels(touch("next_observe_at = now() + interval '1 minute'")) == {"qtg_observe"}
    assert watch.channels(touch("next_observe_at = NULL")) == {"qtg_observe"}
    assert watch.channels(to("OBSERVING")) == {"qtg_events"}  # already observable
    assert watch.channels(to("UNKNOWN")) == {"qtg_recover", "qtg_events"}
    assert watch.channels(touch("error_detail = 'still unknown'")) == set()
    assert watch.channels(to("COMPLETED")) == {"qtg_events"}


def test_one_statement_over_many_rows_wakes_each_channel_its_rows_ask_for(
    watch: Watch, writer: Conn, plan: rows.Plan
) -> None:
    # A statement over a batch of rows (qtg/db/deferred.py) wakes exactly the
    # channels that one of its rows asks for; one that matched no row, or wrote
    # no event, wakes nobody.
    request_id = rows.request(writer, plan)
    ready, observable, other = (rows.node(writer, plan, request_id) for _ in range(3))
    rows.walk_node_to(writer, observable, "SUBMITTED")
    rows.walk_node_to(writer, other, "SUBMITTED")
    writer.execute(
        "UPDATE movement_request_nodes SET next_observe_at = now() + interval '1 hour'"
        " WHERE id = ANY(%s)",
        ([observable, other],),
    )

    def update(assignment: str, ids: list[Any], **params: Any) -> Callable[[], None]:
        statement = sql.SQL("UPDATE movement_request_nodes SET {} WHERE id = ANY(%(ids)s)").format(
            sql.SQL(assignment)
        )
        return lambda: writer.execute(statement, {"ids": ids, **params})

    assert watch.channels(update("node_state = node_state", [])) == set()
    assert (
        watch.channels(
            lambda: writer.execute(
                "INSERT INTO movement_events (request_id, event_type)"
                " SELECT id, 'x' FROM movement_requests WHERE false"
            )
        )
        == set()
    )
    # one row made READY, one pulled earlier, one left alone
    assert watch.channels(
        update(
            "node_state = CASE WHEN id = %(ready)s THEN 'READY' ELSE node_state END,"
            " next_observe_at = CASE WHEN id = %(observable)s THEN now()"
            " ELSE next_observe_at END",
            [ready, observable, other],
            ready=ready,
            observable=observable,
        )
    ) == {"qtg_dispatch", "qtg_observe", "qtg_events"}
    # the lease holder's own "still pending" (0022): earlier, yet nobody is woken
    writer.execute(
        "UPDATE movement_request_nodes SET observe_lease = gen_random_uuid(),"
        " next_observe_at = now() + interval '1 hour' WHERE id = ANY(%s)",
        ([observable, other],),
    )
    assert (
        watch.channels(
            update(
                "observe_lease = NULL, next_observe_at = now() + interval '10 s'",
                [observable, other],
            )
        )
        == set()
    )
    assert watch.channels(update("node_state = 'UNKNOWN'", [observable, other])) == {
        "qtg_recover",
        "qtg_events",
    }


def test_observation_writes_queue_no_after_trigger(writer: Conn, plan: rows.Plan) -> None:
    # Migration 0030: the lease and "still pending" writes of an observation
    # wake nobody and record no event, so the trigger's WHEN clause keeps them
    # from being queued at all; a change of state still runs the function.
    request_id = rows.request(writer, plan)
    rows.walk_request_to(writer, request_id, "EXECUTING")
    node_id = rows.node(writer, plan, request_id)
    rows.walk_node_to(writer, node_id, "SUBMITTED")
    attempt = rows.one(
        writer, "SELECT attempt_no FROM movement_request_nodes WHERE id = %(id)s", {"id": node_id}
    )

    def observe_still_pending() -> list[Any]:
        """One observation's two writes, as the observer makes them."""
        lease = uuid.uuid4()
        writer.execute(
            OBSERVE_SQL.take_lease.text,
            {"lease": lease, "lease_seconds": 30, "node_ids": [node_id]},
        )
        return writer.execute(
            OBSERVE_SQL.record_pending_batch.text,
            {
                "lease": lease,
                "request_ids": [request_id],
                "node_ids": [node_id],
                "attempts": [attempt],
                "intervals": [10.0],
                "details": ["still pending"],
                "refs": [Jsonb({})],
                "artifacts": [Jsonb({})],
                "failed": [False],
                "max_backoff": 600.0,
            },
        ).fetchall()

    with writer.transaction():
        writer.execute("SET LOCAL track_functions = 'pl'")
        assert observe_still_pending() == [(node_id,)]  # SUBMITTED -> OBSERVING
        assert _calls(writer, "qtg_after_node_change") == 1
        assert observe_still_pending() == [(node_id,)]  # already OBSERVING
        assert _calls(writer, "qtg_after_node_change") == 1


def _calls(conn: Conn, function: str) -> int:
    """How often this transaction has called `function` (with track_functions on)."""
    return int(
        rows.one(
            conn,
            "SELECT coalesce(pg_stat_get_xact_function_calls(%(f)s::regproc), 0)",
            {"f": function},
        )
    )


def test_request_changes_fire_their_channels(watch: Watch, writer: Conn, plan: rows.Plan) -> None:
    created: list[Any] = []
    assert watch.channels(lambda: created.append(rows.request(writer, plan))) == {"qtg_events"}
    request_id = created[0]

    def to(state: str) -> Callable[[], None]:
        return lambda: rows.set_request_state(writer, request_id, state)

    assert watch.channels(to("APPROVED")) == {"qtg_dispatch", "qtg_events"}
    # made by the dispatcher itself, after its claim: no wake for an empty pass (0028)
    assert watch.channels(to("EXECUTING")) == {"qtg_events"}
    assert (
        watch.channels(
            lambda: writer.execute(
                "UPDATE movement_requests SET input_params = '{\"x\": 2}' WHERE id = %s",
                (request_id,),
            )
        )
        == set()
    )
    # needing a person also raises a notification (migration 0011), which wakes its dispatcher
    assert watch.channels(to("MANUAL_INTERVENTION")) == {"qtg_events", "qtg_notification"}
    assert watch.channels(to("EXECUTING")) == {"qtg_dispatch", "qtg_events"}
    assert watch.channels(to("COMPLETED")) == {"qtg_events"}


def test_events_of_one_transaction_fold_into_one_notify(
    watch: Watch, writer: Conn, plan: rows.Plan
) -> None:
    # Two requests in one transaction write two events: one empty qtg_events
    # notification (migration 0005), which PostgreSQL folds within a transaction.
    def two_in_one_transaction() -> None:
        with writer.transaction():
            rows.request(writer, plan)
            rows.request(writer, plan)

    fired = watch.fired(two_in_one_transaction)
    assert [f for f in fired if f[0] == "qtg_events"] == [("qtg_events", "")]


def test_expiry_fires_qtg_expire(watch: Watch, writer: Conn, plan: rows.Plan) -> None:
    created: list[Any] = []
    assert watch.channels(
        lambda: created.append(rows.request(writer, plan, expires_at="2099-01-01T00:00:00Z"))
    ) == {"qtg_expire", "qtg_events"}
    moved = watch.channels(
        lambda: writer.execute(
            "UPDATE movement_requests SET expires_at = now() WHERE id = %s", (created[0],)
        )
    )
    assert moved == {"qtg_expire"}
    proposal = (
        "INSERT INTO template_proposals (template_key, name, graph, proposed_by, expires_at) "
        "VALUES ('k', 'n', '{}', 'me', %s)"
    )
    assert watch.channels(lambda: writer.execute(proposal, ("2099-01-01T00:00:00Z",))) == {
        "qtg_expire"
    }
    assert watch.channels(lambda: writer.execute(proposal, (None,))) == set()


def test_callbacks_fire_on_insert_and_requeue(watch: Watch, writer: Conn, plan: rows.Plan) -> None:
    created: list[Any] = []
    assert watch.channels(
        lambda: created.append(rows.request(writer, plan, callback_url="http://127.0.0.1:9/h"))
    ) == {"qtg_callback", "qtg_events"}

    def update(assignment: str) -> Callable[[], None]:
        statement = sql.SQL("UPDATE movement_callback_outbox SET {} WHERE request_id = %s").format(
            sql.SQL(assignment)
        )
        return lambda: writer.execute(statement, (created[0],))

    # a failed attempt pushed later: the worker's own deadline covers it
    assert watch.channels(update("attempts = 1, next_attempt_at = now() + interval '2 s'")) == set()
    # a dead-lettered callback raises a notification (migration 0011): its dispatcher wakes
    assert watch.channels(update("status = 'dlq'")) == {"qtg_notification"}
    assert watch.channels(update("status = 'pending'")) == {"qtg_callback"}


def test_audit_outbox_insert_fires_qtg_audit(watch: Watch, writer: Conn) -> None:
    insert = (
        "INSERT INTO audit_outbox (actor, action, object_type, object_id) "
        "VALUES ('alice', 'approve', 'movement', 'm1')"
    )
    assert watch.fired(lambda: writer.execute(insert)) == [("qtg_audit", "")]


def test_notify_off_silences_every_channel(watch: Watch, writer: Conn, plan: rows.Plan) -> None:
    def busy() -> None:
        request_id = rows.request(
            writer, plan, callback_url="http://127.0.0.1:9/h", expires_at="2099-01-01T00:00:00Z"
        )
        node_id = rows.node(writer, plan, request_id)
        rows.walk_request_to(writer, request_id, "EXECUTING")
        for state in ("READY", "OBSERVING", "UNKNOWN"):
            rows.set_node_state(writer, node_id, state)
        rows.set_request_state(writer, request_id, "MANUAL_INTERVENTION")  # a notification
        writer.execute(
            "INSERT INTO audit_outbox (actor, action, object_type, object_id) "
            "VALUES ('a', 'b', 'c', 'd')"
        )
        # the one channel a statement (not a trigger) feeds: an operator's FAILED
        # resolution waking evm_nonce_reaper, sent by the service's named query
        writer.execute(NODE_ATTENTION_SQL.wake_reaper.text)

    writer.execute("SET qtg.notify = off")
    assert watch.fired(busy) == []
    writer.execute("RESET qtg.notify")
    assert watch.channels(busy) == set(CHANNELS)
