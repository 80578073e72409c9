"""notification_dispatcher against a real SMTP server (aiosmtpd, STARTTLS + AUTH) and a
real HTTP receiver on loopback that checks every v3 signature with its own code.

The notifications come from the real sources: a movement the engine drives into
MANUAL_INTERVENTION or FAILED, a callback reaching dlq, a worker crash; the
1,000-event storm is 1,000 movements entering MANUAL_INTERVENTION.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import schema_rows as rows
import trio
from engine.helpers import drive, eventually, movement, node, template
from receiver import HANG, Receiver
from sidecar_fixtures import make_settings
from smtp_server import Inbox, SmtpServer

from qtg.config import Settings
from qtg.db import Database, ListenHub, Query
from qtg.providers.registry import build_registry
from qtg.runtime.loop import run_loop
from qtg.services.context import ServiceContext
from qtg.services.heartbeats import HeartbeatRow, mark_crashed, seed_heartbeats
from qtg.services.movements import retry_node
from qtg.services.notifications import dispatch_notifications, next_due, raise_notification

SECRET = "test-callback-secret"
SMTP_USER, SMTP_PASSWORD = "qtg-mailer", "smtp-pw-never-logged"

Q = {
    name: Query(f"tests/notifications/{name}", text)
    for name, text in {
        "notifications": "SELECT * FROM notifications ORDER BY id",
        "messages": (
            "SELECT m.*, extract(epoch FROM m.sent_at - (SELECT max(n.created_at)"
            "  FROM notification_deliveries d JOIN notifications n ON n.id = d.notification_id"
            "  WHERE d.message_id = m.id))::float8 AS latency"
            " FROM notification_messages m ORDER BY id"
        ),
        "sent": "SELECT count(*) FROM notification_messages WHERE status = 'sent'",
        "make_due": (
            "UPDATE notification_messages SET next_attempt_at = now() WHERE status = 'pending'"
        ),
        "age_window": (
            "UPDATE notification_messages SET created_at = created_at - interval '1 hour'"
        ),
        "settled": (
            # routed, nothing pending, and every route either drained or out of budget
            "SELECT NOT EXISTS (SELECT 1 FROM notifications WHERE routed_at IS NULL)"
            " AND NOT EXISTS (SELECT 1 FROM notification_messages WHERE status = 'pending')"
            " AND NOT EXISTS (SELECT 1 FROM notification_deliveries d WHERE d.message_id IS NULL"
            "   AND (SELECT count(*) FROM notification_messages m WHERE m.route = d.route)"
            "       < %(limit)s)"
        ),
        "held": "SELECT count(*) FROM notification_deliveries WHERE message_id IS NULL",
        "per_route": (
            "SELECT route, count(*) AS messages, sum(notification_count)::int AS carried,"
            " count(*) FILTER (WHERE kind = 'digest') AS digests"
            " FROM notification_messages GROUP BY route ORDER BY route"
        ),
        "callback_rows": "SELECT * FROM movement_callback_outbox WHERE request_id = %(rid)s",
        "callback_status": (
            "UPDATE movement_callback_outbox SET status = %(status)s, attempts = 5,"
            " last_error = 'HTTP 500' WHERE id = %(id)s"
        ),
        "raise_many": (
            "SELECT count(qtg_raise_notification('test_page', 'critical', 'k:' || i,"
            " 'page ' || i)) FROM generate_series(1, %(n)s) AS i"
        ),
    }.items()
}


# ------------------------------------------------------------------ fixtures


@pytest.fixture
async def receiver(nursery: trio.Nursery) -> Receiver:
    return await nursery.start(Receiver(secret=SECRET.encode()).serve)


@pytest.fixture
async def smtp(tmp_path: Path) -> AsyncIterator[tuple[Inbox, SmtpServer]]:
    inbox = Inbox(trio.lowlevel.current_trio_token())
    server = SmtpServer(inbox, tmp_path, username=SMTP_USER, password=SMTP_PASSWORD)
    await trio.to_thread.run_sync(server.start)
    try:
        yield inbox, server
    finally:
        await trio.to_thread.run_sync(server.stop)


@pytest.fixture
def inbox(smtp: tuple[Inbox, SmtpServer]) -> Inbox:
    return smtp[0]


def notify_settings(
    tmp_path: Path, receiver: Receiver, server: SmtpServer, dsn: str, **changes: Any
) -> Settings:
    return make_settings(
        tmp_path,
        database_url=dsn,
        callback_signing_secret=SECRET,
        notify_enabled=True,
        notify_webhook_url=receiver.url("/notify"),
        notify_webhook_severities="critical",
        notify_email_to="oncall@example.com, lead@example.com",
        notify_email_from="qtg@example.com",
        notify_email_severities="critical",
        notify_smtp_host="127.0.0.1",
        notify_smtp_port=server.port,
        notify_smtp_username=SMTP_USER,
        notify_smtp_password=SMTP_PASSWORD,
        notify_smtp_ca_file=str(server.ca_file),
        notify_timeout_seconds=5.0,
    ).replace(**changes)


@pytest.fixture
def settings(
    tmp_path: Path, receiver: Receiver, smtp: tuple[Inbox, SmtpServer], dsn: str
) -> Settings:
    return notify_settings(tmp_path, receiver, smtp[1], dsn)


@pytest.fixture
async def ctx(db: Database, settings: Settings) -> AsyncIterator[ServiceContext]:
    providers = build_registry(settings, db)
    try:
        yield ServiceContext(db, settings, providers)
    finally:
        await providers.aclose()


def start_dispatcher(nursery: trio.Nursery, hub: ListenHub, ctx: ServiceContext) -> None:
    """The worker as the runtime runs it: woken by qtg_notification, 60 s fallback."""
    nursery.start_soon(
        functools.partial(
            run_loop,
            "notification_dispatcher",
            functools.partial(dispatch_notifications, ctx),
            60.0,
            wakeup=hub.subscribe("qtg_notification"),
            next_due=functools.partial(next_due, ctx),
        )
    )


async def sent_count(db: Database, n: int) -> bool:
    return await db.fetchval(Q["sent"]) >= n


HALF = [
    node("withdraw", "cex_withdrawal"),
    node("bridge", "ccip_send", sandbox={"fail": "observe_failed"}),
]


# ------------------------------------------------------------------ done-when


async def test_manual_intervention_pages_once_per_route_and_again_after_a_fix(
    ctx: ServiceContext, hub: ListenHub, nursery: trio.Nursery, receiver: Receiver, inbox: Inbox
) -> None:
    await template(ctx, "half", HALF, [["withdraw", "bridge"]])
    start_dispatcher(nursery, hub, ctx)
    m = await movement(ctx, "half")
    assert (await drive(ctx, m["id"]))["request_state"] == "MANUAL_INTERVENTION"

    with trio.fail_after(5):
        [mail] = await inbox.wait_for(1)
        [hook] = await receiver.wait_for("/notify", 1)
    await eventually(lambda: sent_count(ctx.db, 2), deadline=5)
    messages = await ctx.db.fetch(Q["messages"])
    assert sorted(x["route"] for x in messages) == ["email", "webhook"]
    for message in messages:  # database clock: notification's commit → delivery recorded
        assert message["latency"] < 1.0, f"{message['route']} {message['latency']:.3f} s late"
    # exactly one of each: nothing else is waiting, and another pass sends nothing
    assert await dispatch_notifications(ctx) == 0
    assert len(inbox.mails) == 1 and len(receiver.on("/notify")) == 1

    [n] = await ctx.db.fetch(Q["notifications"])
    assert (n["kind"], n["severity"], n["resolved_at"]) == ("request_attention", "critical", None)
    assert n["links"]["request_id"] == str(m["id"]) and n["links"]["node_keys"] == ["bridge"]
    assert n["node_key"] == "bridge" and n["dedupe_key"] == f"request_attention:{m['id']}"

    assert mail.tls and mail.login == SMTP_USER  # STARTTLS, then AUTH
    assert mail.rcpt_tos == ["oncall@example.com", "lead@example.com"]
    assert str(m["id"]) in mail.message["Subject"] and "[qtg critical]" in mail.message["Subject"]
    assert "bridge: FAILED (SANDBOX_OBSERVE_FAILED)" in mail.message.get_content()
    assert hook.signature_ok, "receiver's own HMAC check failed"
    body = hook.json()
    assert (body["kind"], body["count"], body["severity"]) == ("single", 1, "critical")
    assert body["notifications"][0]["links"]["request_id"] == str(m["id"])

    # the fix (retry the failed node) resolves it; breaking again pages again
    await retry_node(ctx.db, m["id"], "bridge", actor="carol")
    [n] = await ctx.db.fetch(Q["notifications"])
    assert n["resolved_at"] is not None
    assert (await drive(ctx, m["id"]))["request_state"] == "MANUAL_INTERVENTION"
    with trio.fail_after(5):
        await inbox.wait_for(2)
        await receiver.wait_for("/notify", 2)
    notifications = await ctx.db.fetch(Q["notifications"])
    assert len(notifications) == 2 and notifications[1]["resolved_at"] is None
    assert all(r.signature_ok for r in receiver.on("/notify"))


async def test_an_open_condition_does_not_page_twice(
    ctx: ServiceContext, receiver: Receiver, inbox: Inbox
) -> None:
    for _ in range(3):
        async with ctx.db.transaction() as tx:
            await raise_notification(
                tx, kind="test_page", severity="critical", dedupe_key="disk:1", subject="disk full"
            )
        while await dispatch_notifications(ctx):
            pass
    [n] = await ctx.db.fetch(Q["notifications"])
    assert n["occurrences"] == 3
    assert len(inbox.mails) == 1 and len(receiver.on("/notify")) == 1


async def test_smtp_that_refuses_then_accepts_gets_the_mail_on_retry(
    ctx: ServiceContext, inbox: Inbox, caplog: pytest.LogCaptureFixture
) -> None:
    inbox.refuse_next(1)
    async with ctx.db.transaction() as tx:
        await raise_notification(
            tx, kind="test_page", severity="critical", dedupe_key="t:1", subject="on fire"
        )
    with caplog.at_level(logging.DEBUG):
        await dispatch_notifications(ctx)
    [email_row] = [r for r in await ctx.db.fetch(Q["messages"]) if r["route"] == "email"]
    assert (email_row["status"], email_row["attempts"]) == ("pending", 1)
    assert "451" in email_row["last_error"] and inbox.refused == 1 and inbox.mails == []
    assert await dispatch_notifications(ctx) == 0  # backing off: not due yet
    await ctx.db.execute(Q["make_due"])
    assert await dispatch_notifications(ctx) == 1
    [mail] = inbox.mails
    [email_row] = [r for r in await ctx.db.fetch(Q["messages"]) if r["route"] == "email"]
    assert (email_row["status"], email_row["attempts"]) == ("sent", 2)
    assert mail.message["Subject"] == "[qtg critical] on fire"
    assert SMTP_PASSWORD not in caplog.text


async def test_a_wrong_smtp_password_fails_without_leaking_it(
    db: Database, settings: Settings, inbox: Inbox, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = ServiceContext(
        db,
        settings.replace(notify_smtp_password="wrong-pw-xyz", notify_max_attempts=1),
        build_registry(settings, db),
    )
    async with db.transaction() as tx:
        await raise_notification(
            tx, kind="test_page", severity="critical", dedupe_key="t:2", subject="x"
        )
    with caplog.at_level(logging.DEBUG):
        await dispatch_notifications(ctx)
    [email_row] = [r for r in await db.fetch(Q["messages"]) if r["route"] == "email"]
    assert email_row["status"] == "dlq" and "SMTPAuthenticationError" in email_row["last_error"]
    assert inbox.mails == []
    assert "wrong-pw-xyz" not in caplog.text and "wrong-pw-xyz" not in email_row["last_error"]


async def test_webhook_failures_back_off_then_dead_letter(
    db: Database, settings: Settings, receiver: Receiver
) -> None:
    receiver.behave("/down", 500)
    ctx = ServiceContext(
        db,
        settings.replace(
            notify_webhook_url=receiver.url("/down"), notify_email_to="", notify_max_attempts=3
        ),
        build_registry(settings, db),
    )
    async with db.transaction() as tx:
        await raise_notification(
            tx, kind="test_page", severity="critical", dedupe_key="t:3", subject="x"
        )
    for attempt in (1, 2, 3):
        await dispatch_notifications(ctx)
        [row] = await db.fetch(Q["messages"])
        assert row["attempts"] == attempt and row["last_error"] == "HTTP 500"
        await db.execute(Q["make_due"])
    assert row["status"] == "dlq"
    assert await dispatch_notifications(ctx) == 0
    sent = receiver.on("/down")
    assert len(sent) == 3 and len({r.body for r in sent}) == 1 and len({r.nonce for r in sent}) == 1
    assert all(r.signature_ok for r in sent)


async def test_slack_shape_is_text_only_and_signed(
    db: Database, settings: Settings, receiver: Receiver
) -> None:
    ctx = ServiceContext(
        db,
        settings.replace(notify_webhook_format="slack", notify_email_to=""),
        build_registry(settings, db),
    )
    async with db.transaction() as tx:
        await raise_notification(
            tx,
            kind="test_page",
            severity="critical",
            dedupe_key="t:4",
            subject="slack me",
            body="details",
        )
    await dispatch_notifications(ctx)
    [hook] = receiver.on("/notify")
    assert hook.signature_ok
    assert hook.json() == {"text": "[qtg critical] slack me\ndetails"}


def _storm(dsn: str, count: int, per_transaction: int) -> None:
    """`count` movements entering MANUAL_INTERVENTION, committed in quick transactions."""
    with psycopg.connect(dsn) as conn:
        plan = rows.plan(conn)
        ids = [rows.request(conn, plan) for _ in range(count)]
        conn.commit()
        for start in range(0, count, per_transaction):
            for request_id in ids[start : start + per_transaction]:
                rows.walk_request_to(conn, request_id, "MANUAL_INTERVENTION")
            conn.commit()


async def test_a_storm_of_1000_attention_events_becomes_a_few_digests(
    dsn: str,
    db: Database,
    settings: Settings,
    hub: ListenHub,
    nursery: trio.Nursery,
    receiver: Receiver,
    inbox: Inbox,
) -> None:
    limit = 4
    ctx = ServiceContext(
        db,
        settings.replace(notify_rate_limit_messages=limit, notify_rate_limit_window_seconds=600),
        build_registry(settings, db),
    )
    start_dispatcher(nursery, hub, ctx)
    await trio.to_thread.run_sync(_storm, dsn, 1000, 40)
    assert len(await db.fetch(Q["notifications"])) == 1000

    # the window's budget is spent: the rest waits, and next_due says until when
    await eventually(lambda: db.fetchval(Q["settled"], {"limit": limit}), deadline=30)
    for route in await db.fetch(Q["per_route"]):
        assert route["messages"] <= limit, route
    if await db.fetchval(Q["held"]):
        due = await next_due(ctx)
        assert due is not None and due > datetime.now(UTC)  # when the window frees a slot

    # the window passes: one more pass carries everything left in one digest per route
    await db.execute(Q["age_window"])
    await dispatch_notifications(ctx)
    await eventually(lambda: db.fetchval(Q["settled"], {"limit": limit + 1}), deadline=30)
    assert await db.fetchval(Q["held"]) == 0
    per_route = {r["route"]: r for r in await db.fetch(Q["per_route"])}
    for route in ("email", "webhook"):
        assert per_route[route]["carried"] == 1000  # every event in exactly one message
        assert per_route[route]["messages"] <= limit + 1
        assert per_route[route]["digests"] >= 1
    with trio.fail_after(10):
        await inbox.wait_for(per_route["email"]["messages"])
        hooks = await receiver.wait_for("/notify", per_route["webhook"]["messages"])
    assert len(inbox.mails) == per_route["email"]["messages"]
    assert sum(h.json()["count"] for h in hooks) == 1000
    assert all(h.signature_ok for h in hooks)
    digest = next(m for m in inbox.mails if "digest" in m.message["Subject"])
    assert "request_attention" in digest.message.get_content()


async def test_two_dispatchers_deliver_each_notification_once(
    dsn: str, db: Database, settings: Settings, receiver: Receiver
) -> None:
    """Two runtimes (two pools) drain the same outbox at once: SKIP LOCKED claims and
    the per-route lock mean every notification reaches the webhook exactly once."""
    settings = settings.replace(
        notify_email_to="", notify_rate_limit_messages=10_000, notify_batch_size=25
    )
    assert await db.fetchval(Q["raise_many"], {"n": 200}) == 200
    async with Database(dsn, max_size=4) as db_a, Database(dsn, max_size=4) as db_b:
        contexts = [ServiceContext(d, settings, build_registry(settings, d)) for d in (db_a, db_b)]
        passes = {0: 0, 1: 0}

        async def drain(i: int) -> None:
            while await dispatch_notifications(contexts[i]):
                passes[i] += 1

        async with trio.open_nursery() as n:
            n.start_soon(drain, 0)
            n.start_soon(drain, 1)
    assert passes[0] and passes[1], "both dispatchers took part"
    ids = [item["id"] for r in receiver.on("/notify") for item in r.json()["notifications"]]
    assert len(ids) == 200 and len(set(ids)) == 200


# ------------------------------------------------------------------ the sources


async def test_a_failed_movement_pages_warning_and_a_retry_resolves_it(
    ctx: ServiceContext,
) -> None:
    await template(
        ctx,
        "refused",
        [node("withdraw", "cex_withdrawal", sandbox={"fail": "submit_rejected"})],
        [],
    )
    m = await movement(ctx, "refused")
    assert (await drive(ctx, m["id"]))["request_state"] == "FAILED"
    [n] = await ctx.db.fetch(Q["notifications"])
    assert (n["kind"], n["severity"]) == ("request_failed", "warning")
    assert "withdraw: FAILED (SANDBOX_SUBMIT_REJECTED)" in n["body"]
    await retry_node(ctx.db, m["id"], "withdraw", actor="carol")
    [n] = await ctx.db.fetch(Q["notifications"])
    assert n["resolved_at"] is not None


async def test_a_dead_lettered_callback_pages_and_a_later_delivery_resolves_it(
    ctx: ServiceContext,
) -> None:
    await template(ctx, "cb", [node("confirm", "manual_confirm", kind="manual")], [])
    m = await movement(
        ctx, "cb", approver=None, callback_url="https://receiver.example/hook?token=s3cret"
    )
    [cb] = await ctx.db.fetch(Q["callback_rows"], {"rid": m["id"]})
    await ctx.db.execute(Q["callback_status"], {"id": cb["id"], "status": "dlq"})
    [n] = await ctx.db.fetch(Q["notifications"])
    assert (n["kind"], n["severity"]) == ("callback_dlq", "warning")
    assert n["dedupe_key"] == "callback_dlq:https://receiver.example/hook"
    assert "s3cret" not in n["subject"] + n["body"] + str(n["links"])
    assert "HTTP 500" in n["body"]
    await ctx.db.execute(Q["callback_status"], {"id": cb["id"], "status": "sent"})
    [n] = await ctx.db.fetch(Q["notifications"])
    assert n["resolved_at"] is not None


async def test_a_crashed_worker_pages_critical_until_it_starts_again(db: Database) -> None:
    worker = HeartbeatRow("balance_snapshot", "sidecar", 30.0)
    await seed_heartbeats(db, "default", "host-1", [worker])
    await mark_crashed(db, "default", "host-1", "balance_snapshot", "RuntimeError: boom")
    await mark_crashed(db, "default", "host-1", "balance_snapshot", "RuntimeError: boom")
    [n] = await db.fetch(Q["notifications"])
    assert (n["kind"], n["severity"], n["occurrences"]) == ("worker_crashed", "critical", 1)
    assert "RuntimeError: boom" in n["body"] and n["links"]["worker"] == "balance_snapshot"
    await seed_heartbeats(db, "default", "host-2", [worker])  # started again
    [n] = await db.fetch(Q["notifications"])
    assert n["resolved_at"] is not None


async def test_a_stuck_receiver_or_mail_server_costs_one_timeout(
    db: Database, settings: Settings, receiver: Receiver, nursery: trio.Nursery
) -> None:
    """A webhook that never answers and an SMTP server that never greets are each cut
    at MG_NOTIFY_TIMEOUT_SECONDS, recorded, and retried later."""
    receiver.behave("/stuck", HANG)

    async def mute(stream: trio.SocketStream) -> None:
        await stream.receive_some(1)  # accepts, never greets; returns when the client leaves

    listeners = await nursery.start(functools.partial(trio.serve_tcp, mute, 0, host="127.0.0.1"))
    mute_port = listeners[0].socket.getsockname()[1]
    ctx = ServiceContext(
        db,
        settings.replace(
            notify_webhook_url=receiver.url("/stuck"),
            notify_smtp_port=mute_port,
            notify_timeout_seconds=0.5,
        ),
        build_registry(settings, db),
    )
    async with db.transaction() as tx:
        await raise_notification(
            tx, kind="test_page", severity="critical", dedupe_key="t:5", subject="x"
        )
    started = trio.current_time()
    with trio.fail_after(5):
        await dispatch_notifications(ctx)
    assert trio.current_time() - started < 3  # both in parallel, each bounded
    by_route = {r["route"]: r for r in await db.fetch(Q["messages"])}
    assert by_route["webhook"]["last_error"] == "timed out after 0.5s"
    assert "timed out" in by_route["email"]["last_error"]
    assert {r["status"] for r in by_route.values()} == {"pending"}
    assert {r["attempts"] for r in by_route.values()} == {1}
