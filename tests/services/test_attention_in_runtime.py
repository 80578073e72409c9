"""Issue 14 in a real `bin/qtg-runtime`: both workers start behind their flags, a
movement entering MANUAL_INTERVENTION is mailed and posted within a second (woken by
qtg_notification, not the 60 s interval), and a retried webhook comes back at its backoff.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import schema_rows as rows
import trio
from receiver import Receiver
from runtime.rt_procs import RuntimeProcess, base_env
from smtp_server import Inbox, SmtpServer

from qtg.db import Database, Query

pytestmark = pytest.mark.slow

SECRET = "runtime-notify-secret"
SMTP_USER, SMTP_PASSWORD = "qtg-mailer", "runtime-smtp-pw"
LATENCY = Query(
    "test/notify_latency",
    "SELECT m.route, extract(epoch FROM m.sent_at - n.created_at)::float8 AS late"
    " FROM notification_messages m"
    " JOIN notification_deliveries d ON d.message_id = m.id"
    " JOIN notifications n ON n.id = d.notification_id WHERE m.status = 'sent' ORDER BY m.route",
)


def _break_one(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn) as conn:
        request_id = rows.request(conn, rows.plan(conn))
        rows.walk_request_to(conn, request_id, "MANUAL_INTERVENTION")


async def test_attention_workers_in_a_running_runtime(
    dsn: str, db: Database, tmp_path: Path, nursery: trio.Nursery, procs: list[RuntimeProcess]
) -> None:
    receiver = await nursery.start(Receiver(secret=SECRET.encode()).serve)
    inbox = Inbox(trio.lowlevel.current_trio_token())
    server = SmtpServer(inbox, tmp_path, username=SMTP_USER, password=SMTP_PASSWORD)
    await trio.to_thread.run_sync(server.start)
    try:
        proc = RuntimeProcess.launcher(
            base_env(
                MG_DATABASE_URL=dsn,
                MG_CALLBACK_SIGNING_SECRET=SECRET,
                MG_NOTIFY_ENABLED="true",
                MG_NOTIFY_INTERVAL_SECONDS="60",
                MG_NOTIFY_WEBHOOK_URL=receiver.url("/notify"),
                # the receiver is on loopback, which the webhook refuses by default
                MG_CALLBACK_ALLOWED_HOSTS="127.0.0.1",
                MG_NOTIFY_EMAIL_TO="oncall@example.com",
                MG_NOTIFY_EMAIL_FROM="qtg@example.com",
                MG_NOTIFY_SMTP_HOST="127.0.0.1",
                MG_NOTIFY_SMTP_PORT=str(server.port),
                MG_NOTIFY_SMTP_USERNAME=SMTP_USER,
                MG_NOTIFY_SMTP_PASSWORD=SMTP_PASSWORD,
                MG_NOTIFY_SMTP_CA_FILE=str(server.ca_file),
                MG_CAPITAL_TRANSFER_FOLLOWUP_ENABLED="true",
            )
        )
        procs.append(proc)
        ready = await trio.to_thread.run_sync(proc.wait_ready)
        assert "notification_dispatcher" in ready["workers"]
        assert "capital_transfer_followup" in ready["workers"]

        await trio.to_thread.run_sync(_break_one, dsn)
        with trio.fail_after(5):
            [mail] = await inbox.wait_for(1)
            [hook] = await receiver.wait_for("/notify", 1)
        assert hook.signature_ok and mail.tls and mail.login == SMTP_USER
        with trio.fail_after(5):
            while len(late := await db.fetch(LATENCY, {})) < 2:  # noqa: ASYNC110
                await trio.sleep(0.02)  # the runtime's commit: no event to wait on here
        for row in late:
            assert row["late"] < 1.0, f"{row['route']} {row['late']:.3f} s after the commit"
        log = "\n".join(proc.lines)
        assert SMTP_PASSWORD not in log and receiver.url("/notify") not in log
    finally:
        await trio.to_thread.run_sync(server.stop)
