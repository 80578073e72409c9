"""notification_dispatcher (MG_NOTIFY_ENABLED): tell a person when a movement needs one.

The `notifications` outbox is written by triggers (migrations/0011) and by
services (`raise_notification`) in the same transaction as the event that
needs a person. One pass of the dispatcher does three steps, each its own
short transaction, each claiming with FOR UPDATE SKIP LOCKED so that any
number of runtimes share the work:

1. **route**: new notifications get one held delivery per route their
   severity goes to (MG_NOTIFY_WEBHOOK_SEVERITIES, MG_NOTIFY_EMAIL_SEVERITIES);
2. **batch**: per route, under a per-route advisory lock, held deliveries
   become messages within the route's rate limit (MG_NOTIFY_RATE_LIMIT_MESSAGES
   per MG_NOTIFY_RATE_LIMIT_WINDOW_SECONDS): one message each while they fit,
   else one digest of all of them (`qtg.domain.attention.message_groups`), so
   a storm of 1,000 attention events is a handful of messages, not 1,000;
3. **send**: due messages are leased (committed before any network I/O) and
   sent concurrently, each bounded by MG_NOTIFY_TIMEOUT_SECONDS; a failure is
   retried on the callbacks' schedule (2, 4, 8 … 64 s) until
   MG_NOTIFY_MAX_ATTEMPTS, then the message is kept as `dlq`.

A message's body, timestamp and nonce are fixed when it is created, so a
retry is the same request (webhook receivers dedupe by nonce, mail clients by
Message-ID). Delivery is at-least-once: a crash between the server's answer
and its record sends it again after the lease.

Every webhook request goes through `post_webhook` — the one place an outbound
notification HTTP request is made (where a URL guard applies).
"""

from __future__ import annotations

import logging
import smtplib
import ssl
from collections.abc import Mapping
from datetime import datetime
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

import httpx
import trio

from qtg.config import Settings
from qtg.db import Database, Jsonb, Tx, sql_family
from qtg.domain.attention import (
    configured_routes,
    email_recipients,
    message_groups,
    render,
    routes_for,
    webhook_body,
)
from qtg.domain.signing import sign_callback, signed_headers
from qtg.services.auditing import record_audit
from qtg.services.callbacks import (
    LEASE_MARGIN_SECONDS,
    CheckedBackend,
    CheckedTransport,
    Resolver,
    TargetRefused,
    _tls_context,
    allowlist,
    encode_payload,
    failure_outcome,
    load_callback_secret,
    system_resolver,
)
from qtg.services.context import ServiceContext
from qtg.services.errors import InvalidInput, NotFound

log = logging.getLogger("qtg.services.notifications")

SQL = sql_family(
    "notifications",
    "claim_unrouted",
    "insert_deliveries",
    "try_lock_route",
    "held",
    "window_usage",
    "insert_message",
    "assign_message",
    "claim_due",
    "mark_sent",
    "mark_failed",
    "next_due",
    "raise_notification",
    "resolve_notification",
    "list_notifications",
    "get_notification",
    "resolve_by_id",
)

#: Most held deliveries one digest carries (a bigger storm takes more digests).
MAX_HELD_PER_MESSAGE = 10_000
#: Longest error text kept on a message.
MAX_ERROR_CHARS = 500


# ------------------------------------------------------------------ the hook


async def raise_notification(
    tx: Tx,
    *,
    kind: str,
    severity: str,
    dedupe_key: str,
    subject: str,
    body: str = "",
    links: Mapping[str, Any] | None = None,
    request_id: object = None,
    node_key: str | None = None,
) -> int:
    """Record that something needs a person, in the caller's transaction.

    While a notification with this dedupe key is open, raising it again only
    counts the occurrence: the same condition does not page twice. Returns the
    notification's id. SQL callers use `qtg_raise_notification(...)` directly.
    """
    # qtg_raise_notification returns the notification's bigint id
    notification_id: int = await tx.fetchval(
        SQL.raise_notification,
        {
            "kind": kind,
            "severity": severity,
            "dedupe_key": dedupe_key,
            "subject": subject,
            "body": body,
            "links": Jsonb(dict(links or {})),
            "request_id": request_id,
            "node_key": node_key,
        },
    )
    return notification_id


async def resolve_notification(tx: Tx, dedupe_key: str) -> int:
    """The condition is over: the next occurrence pages again."""
    # a count
    value: int = await tx.fetchval(SQL.resolve_notification, {"dedupe_key": dedupe_key})
    return value


# ------------------------------------------------------------------ reading, resolving

MAX_PAGE = 200


async def list_notifications(
    db: Database,
    *,
    open_only: bool | None = None,
    kind: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of notifications, newest first (cursor: the last id of the previous page)."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}", detail={"field": "limit"})
    before_id = None
    if cursor is not None:
        if not cursor.isdigit():
            raise InvalidInput(
                "cursor is not a cursor this API returned", detail={"field": "cursor"}
            )
        before_id = int(cursor)
    rows = await db.fetch(
        SQL.list_notifications,
        {"open": open_only, "kind": kind, "before_id": before_id, "limit": limit + 1},
    )
    next_cursor = str(rows[limit - 1]["id"]) if len(rows) > limit else None
    return rows[:limit], next_cursor


async def resolve_notification_by_id(
    db: Database, notification_id: int, *, actor: str
) -> dict[str, Any]:
    """An operator marks a notification handled (idempotent: resolving a resolved one
    changes nothing); audited in the same transaction."""
    async with db.transaction() as tx:
        row = await tx.fetchrow(SQL.get_notification, {"id": notification_id})
        if row is None:
            raise NotFound(
                f"notification {notification_id} not found",
                detail={"notification_id": notification_id},
            )
        if await tx.fetchval(SQL.resolve_by_id, {"id": notification_id}) is not None:
            await record_audit(
                tx,
                actor=actor,
                action="notification.resolved",
                object_type="notification",
                object_id=notification_id,
                detail={"dedupe_key": row["dedupe_key"], "kind": row["kind"]},
            )
        resolved = await tx.fetchrow(SQL.get_notification, {"id": notification_id})
        if resolved is None:  # deleted by another transaction since our first read
            raise NotFound(
                f"notification {notification_id} not found",
                detail={"notification_id": notification_id},
            )
        return resolved


# ------------------------------------------------------------------ the pass


async def dispatch_notifications(
    ctx: ServiceContext, *, resolver: Resolver = system_resolver
) -> int:
    """The notification_dispatcher pass: route, batch per route, send what is due.

    `resolver` turns the webhook's host name into the addresses to check and
    connect to (tests inject one; the callbacks' target rules run on its answers).
    """
    routes = configured_routes(ctx.settings)
    done = await _route(ctx.db, ctx.settings, routes)
    for route in routes:
        done += await _batch(ctx.db, ctx.settings, route)
    done += await _send_due(ctx.db, ctx.settings, resolver)
    return done


async def next_due(ctx: ServiceContext) -> datetime | None:
    """The earliest moment the dispatcher has work without being woken."""
    settings = ctx.settings
    value: datetime | None = await ctx.db.fetchval(
        SQL.next_due,
        {
            "routes": list(configured_routes(settings)),
            "window_seconds": settings.notify_rate_limit_window_seconds,
            "limit": settings.notify_rate_limit_messages,
        },
    )
    return value  # timestamptz or NULL


async def _route(db: Database, settings: Settings, routes: Mapping[str, frozenset[str]]) -> int:
    async with db.transaction() as tx:
        rows = await tx.fetch(SQL.claim_unrouted, {"limit": settings.notify_batch_size})
        ids: list[int] = []
        names: list[str] = []
        for row in rows:
            for route in routes_for(row["severity"], routes):
                ids.append(row["id"])
                names.append(route)
        if ids:
            tx.defer(SQL.insert_deliveries, {"ids": ids, "routes": names})
    return len(rows)


async def _batch(db: Database, settings: Settings, route: str) -> int:
    """Turn the route's held deliveries into messages within its rate budget."""
    async with db.transaction() as tx:
        if not await tx.fetchval(SQL.try_lock_route, {"route": route}):
            return 0  # another dispatcher is batching this route right now
        held = await tx.fetch(SQL.held, {"route": route, "limit": MAX_HELD_PER_MESSAGE})
        if not held:
            return 0
        used = await tx.fetchval(
            SQL.window_usage,
            {"route": route, "window_seconds": settings.notify_rate_limit_window_seconds},
        )
        groups = message_groups(len(held), settings.notify_rate_limit_messages - used)
        start = 0
        for size in groups:
            group = held[start : start + size]
            start += size
            message = render(group)
            message_id = await tx.fetchval(
                SQL.insert_message,
                {
                    "route": route,
                    "kind": message.kind,
                    "notification_count": len(group),
                    "severity": message.severity,
                    "subject": message.subject,
                    "body": message.body,
                    "payload": Jsonb(message.payload),
                    "max_attempts": settings.notify_max_attempts,
                },
            )
            tx.defer(
                SQL.assign_message,
                {"message_id": message_id, "route": route, "ids": [n["id"] for n in group]},
            )
    return len(groups)


async def _send_due(db: Database, settings: Settings, resolver: Resolver) -> int:
    timeout = settings.notify_timeout_seconds
    async with db.transaction() as tx:
        rows = await tx.fetch(
            SQL.claim_due,
            {"limit": settings.notify_batch_size, "lease_seconds": timeout + LEASE_MARGIN_SECONDS},
        )
    if not rows:
        return 0
    # The callbacks' egress policy (issue 26): every address the webhook's name
    # resolves to is checked (MG_CALLBACK_ALLOWED_HOSTS for internal targets, never
    # this runtime's own API) and connected to as checked; no proxy from the
    # environment (it would connect to an address nobody checked).
    backend = CheckedBackend(
        resolver, allowlist(settings), api_port=settings.api_port, what="MG_NOTIFY_WEBHOOK_URL"
    )
    async with (
        httpx.AsyncClient(
            transport=CheckedTransport(backend, _tls_context()),
            timeout=httpx.Timeout(timeout),
            follow_redirects=False,
            trust_env=False,
        ) as client,
        trio.open_nursery() as nursery,
    ):
        for row in rows:
            nursery.start_soon(_deliver, db, settings, client, row)
    return len(rows)


async def _deliver(
    db: Database, settings: Settings, client: httpx.AsyncClient, row: dict[str, Any]
) -> None:
    refused = False
    try:
        if row["route"] == "webhook":
            error = await post_webhook(client, settings, row)
        else:
            error = await send_email(settings, row)
    except TargetRefused as exc:  # nothing was sent; retrying cannot change the answer
        error, refused = f"refused: {exc}", True
    except Exception as exc:  # one bad message fails alone, recorded
        error = f"{type(exc).__name__}: {exc}"
    await _record(db, row, _scrub(error, settings), refused=refused)


def _scrub(error: str | None, settings: Settings) -> str | None:
    """An error as it may be stored and logged: no webhook URL (a credential for
    Slack), no SMTP password, bounded length."""
    if error is None:
        return None
    for secret in (settings.notify_webhook_url, settings.notify_smtp_password):
        if secret:
            error = error.replace(secret, "***")
    return error[:MAX_ERROR_CHARS]


async def _record(
    db: Database, row: dict[str, Any], error: str | None, *, refused: bool = False
) -> None:
    """Record one outcome, shielded: a shutdown after the server accepted must not
    turn a delivered message into a duplicate."""
    with trio.CancelScope(shield=True):
        if error is None:
            await db.execute(SQL.mark_sent, {"id": row["id"], "attempts": row["attempts"]})
            return
        # a refused target is dead-lettered at once, like a refused callback
        failure = failure_outcome(row["attempts"], 0 if refused else row["max_attempts"])
        await db.execute(
            SQL.mark_failed,
            {
                "id": row["id"],
                "attempts": row["attempts"],
                "new_attempts": failure.new_attempts,
                "status": failure.status,
                "delay_seconds": failure.delay_seconds,
                "error": error,
            },
        )
    log.warning(
        "notification delivery failed",
        extra={
            "message_id": row["id"],
            "route": row["route"],
            "attempt": failure.new_attempts,
            "status": failure.status,
            "error": error,
        },
    )


# ------------------------------------------------------------------ webhook


async def post_webhook(
    client: httpx.AsyncClient, settings: Settings, row: Mapping[str, Any]
) -> str | None:
    """POST one message to MG_NOTIFY_WEBHOOK_URL, signed like a callback (v3).

    The only place a notification HTTP request is made. Returns None on a 2xx,
    else the error. The timestamp and nonce are the message's own, fixed at
    creation, so a retry is byte-for-byte the same signed request.
    """
    url = settings.notify_webhook_url
    if not url:
        return "MG_NOTIFY_WEBHOOK_URL is not set"
    body = encode_payload(webhook_body(row["payload"], settings.notify_webhook_format))
    timestamp, nonce = row["message_timestamp"], row["message_nonce"]
    signature = sign_callback(load_callback_secret(settings), timestamp, nonce, body)
    headers = signed_headers(timestamp, nonce, signature)
    try:
        with trio.fail_after(settings.notify_timeout_seconds):
            async with client.stream("POST", url, content=body, headers=headers) as response:
                status_code = response.status_code  # the body is never read
    except trio.TooSlowError:
        return f"timed out after {settings.notify_timeout_seconds:g}s"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    if not 200 <= status_code < 300:
        return f"HTTP {status_code}"
    return None


# ------------------------------------------------------------------ email


def email_message(settings: Settings, row: Mapping[str, Any]) -> EmailMessage:
    """The email of one message; its Message-ID is derived from the message's
    nonce, so a retried send is recognisably the same mail."""
    msg = EmailMessage()
    msg["Subject"] = row["subject"]
    msg["From"] = settings.notify_email_from
    msg["To"] = ", ".join(email_recipients(settings))
    msg["Date"] = formatdate(row["message_timestamp"], usegmt=True)
    msg["Message-ID"] = make_msgid(idstring=f"qtg-{row['id']}-{row['message_nonce']}")
    msg["X-QTG-Notification-Severity"] = row["severity"]
    msg["X-QTG-Notification-Kind"] = row["kind"]
    msg.set_content(row["body"])
    return msg


async def send_email(settings: Settings, row: Mapping[str, Any]) -> str | None:
    """Send one message over SMTP (smtplib, in a worker thread). None on success."""
    msg = email_message(settings, row)
    try:
        await trio.to_thread.run_sync(_smtp_send, settings, msg)
    except (smtplib.SMTPException, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _smtp_send(settings: Settings, msg: EmailMessage) -> None:
    """Connect, STARTTLS (verifying the certificate), AUTH, send. Every socket
    operation is bounded by MG_NOTIFY_TIMEOUT_SECONDS."""
    timeout = settings.notify_timeout_seconds
    with smtplib.SMTP(
        settings.notify_smtp_host, settings.notify_smtp_port, timeout=timeout
    ) as smtp:
        smtp.ehlo()
        if settings.notify_smtp_starttls:
            context = ssl.create_default_context(cafile=settings.notify_smtp_ca_file)
            smtp.starttls(context=context)
            smtp.ehlo()
        if settings.notify_smtp_username is not None:
            smtp.login(settings.notify_smtp_username, settings.notify_smtp_password or "")
        smtp.send_message(msg)
