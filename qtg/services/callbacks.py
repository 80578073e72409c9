"""callback_dispatcher (reference §4, DESIGN §6): deliver the callback outbox.

A pass claims up to MG_CALLBACK_BATCH_SIZE due pending rows and commits the
claim *before* any HTTP: the claim leases each row by moving its
next_attempt_at past the request timeout, so no other dispatcher takes it
while it is in flight, and no row lock or transaction is held open while a
receiver thinks. The rows are then sent concurrently, each under its own hard
deadline (MG_CALLBACK_TIMEOUT_SECONDS), so one slow or dead receiver delays
nobody else by more than that. Each outcome is recorded as soon as it is
known: any 2xx → sent; anything else → attempts + 1, next_attempt_at = now +
2**min(attempts, 6) s, and dlq once attempts reach max_attempts.

Delivery is at-least-once (a crash between a 2xx and its record sends it again
after the lease); a row's timestamp and nonce never change, so every retry is
the same signed request and receivers dedupe by nonce.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
import secrets
import socket
import ssl
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

# httpx imports httpcore lazily, on its first client (~0.2 s): pay that at start-up,
# not as latency on the first callback.
import httpcore  # noqa: F401
import httpx
import msgspec
import trio

from qtg.config import ConfigError, Settings
from qtg.db import Database, sql_family
from qtg.domain.signing import callback_headers
from qtg.services.context import ServiceContext
from qtg.services.errors import InvalidInput

log = logging.getLogger("qtg.services.callbacks")

SQL = sql_family("callbacks", "claim_due", "mark_sent", "mark_failed", "next_due")

#: The lease outlasts the request timeout by this much, covering the time to
#: record the outcome after the deadline.
LEASE_MARGIN_SECONDS = 30.0
#: Backoff exponent cap: 2**6 = 64 s between late attempts (reference §4).
MAX_BACKOFF_EXPONENT = 6
#: Longest callback_url accepted.
MAX_URL_LENGTH = 2048
#: File, under MG_EMBEDDED_DATA_DIR, holding the generated signing secret.
SECRET_FILE_NAME = "callback_secret"

# --------------------------------------------------------------------- rules


@dataclass(frozen=True, slots=True)
class Failure:
    new_attempts: int
    status: str  # 'pending' or 'dlq'
    delay_seconds: float


def failure_outcome(attempts: int, max_attempts: int) -> Failure:
    """What a failed attempt does to a row that had made `attempts` attempts before it.

    Delays after the 1st, 2nd, 3rd … failure: 2, 4, 8, 16, 32, then 64 s.
    """
    new_attempts = attempts + 1
    return Failure(
        new_attempts=new_attempts,
        status="dlq" if new_attempts >= max_attempts else "pending",
        delay_seconds=float(2 ** min(new_attempts, MAX_BACKOFF_EXPONENT)),
    )


def encode_payload(payload: Any) -> bytes:
    """The request body: the payload as compact JSON with sorted keys (the same bytes
    on every retry, so a retried delivery carries the same signature)."""
    return msgspec.json.encode(payload, order="sorted")


# ---------------------------------------------------------------- URL policy

_DEFAULT_PORTS = {"http": 80, "https": 443}


def validate_callback_url(url: object, settings: Settings) -> str:
    """Return `url` if qtg may POST callbacks to it, else raise InvalidInput naming callback_url.

    Refused: anything but http(s); no host; credentials in the URL (they would
    be stored and shown with the movement); and this runtime's own API
    (MG_API_HOST:MG_API_PORT, any loopback spelling of it, and any local
    address when the API listens on a wildcard address), so that a callback
    can never be turned into a request against qtg's own admin surface.
    A DNS name that resolves to the runtime is not detected here.
    """
    if not isinstance(url, str) or not url:
        _refuse("must be a non-empty string")
    if len(url) > MAX_URL_LENGTH:
        _refuse(f"is longer than {MAX_URL_LENGTH} characters")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        _refuse("must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        _refuse(f"is not a valid URL ({exc})")
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        _refuse(f"must use http or https, not {parts.scheme or 'no scheme'!r}")
    host = parts.hostname
    if not host:
        _refuse("has no host")
    try:
        host.encode("idna")  # what the HTTP client will have to do with it
    except UnicodeError:
        _refuse(f"has a host name that cannot be used ({host!r})")
    if parts.username is not None or parts.password is not None:
        _refuse("must not carry credentials (user:password@)")
    effective_port = port if port is not None else _DEFAULT_PORTS[scheme]
    if (
        settings.api_port
        and effective_port == settings.api_port
        and _same_host(host, settings.api_host)
    ):
        _refuse(f"points at this runtime's own API ({settings.api_host}:{settings.api_port})")
    return url


def _refuse(reason: str) -> NoReturn:
    raise InvalidInput(f"callback_url {reason}", detail={"field": "callback_url", "reason": reason})


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """`host` as an address, including legacy IPv4 spellings (127.1, 2130706433)
    that the resolver would accept too."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _is_local(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    ip = _ip(host)
    return ip is not None and (ip.is_loopback or ip.is_unspecified)


def _same_host(host: str, api_host: str) -> bool:
    host = host.lower().rstrip(".")
    api = api_host.lower().strip("[]").rstrip(".")
    if host == api:
        return True
    host_ip, api_ip = _ip(host), _ip(api)
    if host_ip is not None and api_ip is not None and host_ip == api_ip:
        return True
    # The API on a wildcard or loopback address answers every local spelling.
    return _is_local(api) and _is_local(host)


# -------------------------------------------------------------------- secret


def load_callback_secret(settings: Settings) -> bytes:
    """The HMAC key: MG_CALLBACK_SIGNING_SECRET, else a generated one kept in
    MG_EMBEDDED_DATA_DIR/callback_secret (mode 0600), created on first use.

    The key is the secret text's UTF-8 bytes (what a receiver configures).
    It is read on every pass, so replacing the file rotates it without a restart.
    """
    if settings.callback_signing_secret:
        return settings.callback_signing_secret.encode("utf-8")
    path = Path(settings.embedded_data_dir) / SECRET_FILE_NAME
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        text = _create_secret(path)
    if not text:
        raise ConfigError(
            f"MG_CALLBACK_SIGNING_SECRET is unset and {path} is empty; "
            "delete the file to generate a new secret, or set the variable"
        )
    return text.encode("utf-8")


def _create_secret(path: Path) -> str:
    """Write a new secret atomically; if another process won the race, use theirs."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = secrets.token_hex(32)
    fd, tmp = tempfile.mkstemp(prefix=".callback_secret.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)  # atomic, and refuses to replace an existing file
        except FileExistsError:
            return path.read_text(encoding="utf-8").strip()
    finally:
        os.unlink(tmp)
    log.info("generated a callback signing secret", extra={"path": str(path)})
    return text


# ---------------------------------------------------------------------- pass


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One verifying TLS context for every pass: building one (loading the CA
    bundle) costs tens of milliseconds, which would otherwise be added to the
    latency of every callback."""
    return httpx.create_ssl_context()


async def dispatch_pending_callbacks(ctx: ServiceContext) -> int:
    """The callback_dispatcher pass: claim (and commit), send concurrently, record."""
    settings = ctx.settings
    timeout = settings.callback_timeout_seconds
    async with ctx.db.transaction() as tx:
        rows = await tx.fetch(
            SQL.claim_due,
            {
                "limit": settings.callback_batch_size,
                "lease_seconds": timeout + LEASE_MARGIN_SECONDS,
                "network_class": settings.network_class,
            },
        )
    if not rows:
        return 0
    rows.sort(key=lambda r: (r["created_at"], r["id"]))
    secret = load_callback_secret(settings)
    async with (
        httpx.AsyncClient(
            timeout=httpx.Timeout(timeout), follow_redirects=False, verify=_tls_context()
        ) as client,
        trio.open_nursery() as nursery,
    ):
        for row in rows:
            nursery.start_soon(_deliver, ctx.db, client, settings, secret, row)
    return len(rows)


async def next_due(ctx: ServiceContext) -> datetime | None:
    """The earliest pending next_attempt_at (a retry, or a lease running out)."""
    return await ctx.db.fetchval(SQL.next_due, {"network_class": ctx.settings.network_class})


async def _deliver(
    db: Database,
    client: httpx.AsyncClient,
    settings: Settings,
    secret: bytes,
    row: dict[str, Any],
) -> None:
    status_code: int | None = None
    error: str | None = None
    refused = False
    try:
        url = validate_callback_url(row["callback_url"], settings)
    except InvalidInput as exc:
        refused, error = True, f"refused: {exc.message}"
    else:
        body = encode_payload(row["payload"])
        headers = callback_headers(secret, row["callback_timestamp"], row["callback_nonce"], body)
        try:
            # httpx's timeout bounds each read/write; this bounds the whole request,
            # so a receiver that trickles bytes cannot stretch it either.
            with trio.fail_after(settings.callback_timeout_seconds):
                async with client.stream("POST", url, content=body, headers=headers) as response:
                    status_code = response.status_code  # the body is never read
        except trio.TooSlowError:
            error = f"timed out after {settings.callback_timeout_seconds:g}s"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
        except Exception as exc:  # e.g. a host httpx cannot encode (UnicodeError, InvalidURL):
            # one bad row must fail alone, recorded, not take the whole batch down
            error = f"{type(exc).__name__}: {exc}"[:500]
        else:
            if not 200 <= status_code < 300:
                error = f"HTTP {status_code}"
    await _record(db, row, status_code, error, refused)


async def _record(
    db: Database, row: dict[str, Any], status_code: int | None, error: str | None, refused: bool
) -> None:
    """Record one outcome. Shielded: a shutdown that arrives after the receiver
    answered should not turn a delivered callback into a duplicate."""
    with trio.CancelScope(shield=True):
        if error is None:
            await db.execute(
                SQL.mark_sent,
                {"id": row["id"], "attempts": row["attempts"], "status_code": status_code},
            )
            return
        failure = failure_outcome(row["attempts"], 0 if refused else row["max_attempts"])
        await db.execute(
            SQL.mark_failed,
            {
                "id": row["id"],
                "attempts": row["attempts"],
                "new_attempts": failure.new_attempts,
                "status": failure.status,
                "delay_seconds": failure.delay_seconds,
                "status_code": status_code,
                "error": error,
            },
        )
    log.warning(
        "callback delivery failed",
        extra={
            "callback_id": row["id"],
            "request_id": str(row["request_id"]),
            "event_type": row["event_type"],
            "attempt": failure.new_attempts,
            "status": failure.status,
            "status_code": status_code,
            "error": error,
        },
    )
