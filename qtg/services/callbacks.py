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
after the lease); a row's timestamp and nonce never change, and its signature
is computed once, in the claim that precedes its first attempt, and stored, so
every retry is the same signed request — across a secret rotation too — and
receivers dedupe by nonce.

Where a callback may go is checked twice (qtg/domain/callback_targets.py): on
the URL when the movement is created, and at send time on every address the
host resolves to; the connection is then made to a checked address, never by
resolving the name again (CheckedBackend).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
import re
import secrets
import socket
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

# httpx imports httpcore lazily, on its first client (~0.2 s): pay that at start-up,
# not as latency on the first callback (the checked connections use it directly too).
import httpcore
import httpx
import msgspec
import trio

from qtg.config import ConfigError, Settings
from qtg.db import Database, Tx, sql_family
from qtg.domain import callback_targets as targets
from qtg.domain.signing import sign_callback, signed_headers
from qtg.services.context import ServiceContext
from qtg.services.errors import InvalidInput

log = logging.getLogger("qtg.services.callbacks")

SQL = sql_family(
    "callbacks", "claim_due", "store_signatures", "mark_sent", "mark_failed", "next_due"
)

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
#: RFC 3986's unreserved and reserved characters and %-escapes: all a URI may contain.
_URI_CHARACTERS = re.compile(targets.URI_REST)


def validate_callback_url(url: object, settings: Settings) -> str:
    """Return `url` if qtg may POST callbacks to it, else raise InvalidInput naming callback_url.

    Refused: anything but http(s); no host; credentials in the URL (they would
    be stored and shown with the movement); a host that is a metadata service's
    name, a localhost name or a literal address that is not public, unless
    MG_CALLBACK_ALLOWED_HOSTS lists it (qtg/domain/callback_targets.py); and
    this runtime's own API (MG_API_HOST:MG_API_PORT, any loopback spelling of
    it, and any local address when the API listens on a wildcard address),
    allowlisted or not. A DNS name is not resolved here: the dispatcher checks
    every address it resolves to when it sends, and connects only to those.
    """
    if not isinstance(url, str) or not url:
        _refuse("must be a non-empty string")
    if len(url) > MAX_URL_LENGTH:
        _refuse(f"is longer than {MAX_URL_LENGTH} characters")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        _refuse("must not contain spaces or control characters")
    if not url.isascii():
        # A URI is ASCII (RFC 3986; the document says format: uri). Non-ASCII text
        # here is either an IRI the HTTP client would re-encode behind our back or
        # junk (lone surrogates, unassigned code points) that must never be stored.
        _refuse("must be ASCII (write an internationalized host name in its xn-- form)")
    if not _URI_CHARACTERS.fullmatch(url.split("://", 1)[-1]):
        _refuse("must contain only the characters a URI allows (RFC 3986); percent-encode others")
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
    if targets.literal_address(host) is None and not targets.is_host_name(host):
        _refuse("has a host that is neither a DNS name nor an IP address")
    if parts.username is not None or parts.password is not None:
        _refuse("must not carry credentials (user:password@)")
    effective_port = port if port is not None else _DEFAULT_PORTS[scheme]
    if (
        settings.api_port
        and effective_port == settings.api_port
        and _same_host(host, settings.api_host)
    ):
        _refuse(f"points at this runtime's own API ({settings.api_host}:{settings.api_port})")
    why = targets.refused_host(host, allowlist(settings))
    if why is not None:
        _refuse(f"{why}; list it in MG_CALLBACK_ALLOWED_HOSTS to allow it")
    return url


def allowlist(settings: Settings) -> targets.Allowlist:
    """MG_CALLBACK_ALLOWED_HOSTS, parsed (validated at start-up by Settings.from_env)."""
    return _parse_allowlist(settings.callback_allowed_hosts)


@functools.lru_cache(maxsize=8)
def _parse_allowlist(text: str) -> targets.Allowlist:
    return targets.parse_allowlist(text)


def _refuse(reason: str) -> NoReturn:
    raise InvalidInput(f"callback_url {reason}", detail={"field": "callback_url", "reason": reason})


def _ip(host: str) -> targets.IPAddress | None:
    """`host` as an address (legacy IPv4 spellings and IPv4-mapped IPv6 included)."""
    address = targets.literal_address(host)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _is_local(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    ip = _ip(host)
    return ip is not None and (ip.is_loopback or ip.is_unspecified)


def _same_host(host: str, api_host: str) -> bool:
    host, api = targets.normal_host(host), targets.normal_host(api_host)
    if host == api:
        return True
    host_ip, api_ip = _ip(host), _ip(api)
    if host_ip is not None and api_ip is not None and host_ip == api_ip:
        return True
    # The API on a wildcard or loopback address answers every local spelling.
    return _is_local(api) and _is_local(host)


# ------------------------------------------------------- checked connections

#: Resolves a host name and port to the addresses a connection may use.
Resolver = Callable[[str, int], Awaitable[list[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    """The operating system's resolver (getaddrinfo), TCP addresses only."""
    infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def is_local_address(address: targets.IPAddress) -> bool:
    """Whether `address` belongs to this machine: binding a socket to it succeeds.

    The kernel knows the machine's addresses (every interface, every alias)
    better than a list we could keep; a bind to port 0 is one system call and
    sends nothing.
    """
    ip = targets.embedded_ipv4(address)
    if ip.is_loopback or ip.is_unspecified:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(ip), 0))
    except OSError:
        return False
    return True


class TargetRefused(Exception):
    """A callback's host resolved to an address it may not reach; nothing was sent."""


class CheckedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's trio backend, resolving each host exactly once and connecting
    only to addresses that passed the target rules.

    The HTTP client hands this backend the URL's host name; the backend
    resolves it, refuses the connection unless *every* address is allowed,
    and then connects to those addresses themselves — never to the name, so
    a second resolution (DNS rebinding) cannot swap in another address. TLS
    and the Host header still use the name (httpcore passes it as SNI).
    """

    def __init__(
        self,
        resolver: Resolver,
        allow: targets.Allowlist,
        *,
        api_port: int = 0,
        what: str = "callback_url",
    ) -> None:
        self._resolver = resolver
        self._allow = allow
        self._api_port = api_port
        self._what = what  # how refusals name the URL: callback_url, MG_NOTIFY_WEBHOOK_URL
        self._inner = httpcore.TrioBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self.checked_addresses(host, port)
        last: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None  # checked_addresses never returns an empty list
        raise last

    async def checked_addresses(self, host: str, port: int) -> list[str]:
        """The addresses of `host`, all of them allowed (else TargetRefused)."""
        why = targets.refused_host(host, self._allow)
        if why is not None:
            raise TargetRefused(f"{self._what} {why}")
        try:
            answers = await self._resolver(host, port)
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in answers]
        why = targets.refused_resolution(host, addresses, self._allow)
        if why is not None:
            raise TargetRefused(f"{self._what} {why}")
        # The own-API guard on what the name resolved to and the port (issue 26):
        # allowlisted or not, the runtime never posts to itself.
        for address in addresses:
            why = targets.own_api_refusal(
                address, port, self._api_port, local=is_local_address(address)
            )
            if why is not None:
                raise TargetRefused(
                    f"{self._what} host {targets.normal_host(host)} resolves to {why}"
                )
        return [str(a) for a in addresses]

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        raise TargetRefused("callbacks never use a unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class CheckedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a CheckedBackend, with no proxy from the environment
    (a proxy would make the connection to an address qtg did not check)."""

    def __init__(self, backend: CheckedBackend, ssl_context: ssl.SSLContext) -> None:
        super().__init__(verify=ssl_context, trust_env=False)
        # httpx takes no network backend; the pool it wraps does (httpcore's public API).
        self._pool = httpcore.AsyncConnectionPool(ssl_context=ssl_context, network_backend=backend)


# -------------------------------------------------------------------- secret


def load_callback_secret(settings: Settings) -> bytes:
    """The HMAC key: MG_CALLBACK_SIGNING_SECRET, else a generated one kept in
    MG_EMBEDDED_DATA_DIR/callback_secret (mode 0600), created on first use.

    The key is the secret text's UTF-8 bytes (what a receiver configures).
    It is read on every pass, so replacing the file rotates it without a restart.
    Generated only for the embedded database: with an external one, runtimes
    on other hosts would each generate their own (issue 25 item 8).
    """
    if settings.callback_signing_secret:
        return settings.callback_signing_secret.encode("utf-8")
    problem = settings.replace(workers_enabled=True).callback_secret_problem()
    if problem is not None:
        raise ConfigError(problem)
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


async def dispatch_pending_callbacks(
    ctx: ServiceContext, *, resolver: Resolver = system_resolver
) -> int:
    """The callback_dispatcher pass: claim and sign (one commit), send concurrently, record.

    `resolver` turns a host name into the addresses to check and connect to
    (tests answer private addresses with it; the rules run on what it returns).
    """
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
        await _sign_once(tx, settings, rows)
    if not rows:
        return 0
    rows.sort(key=lambda r: (r["created_at"], r["id"]))
    backend = CheckedBackend(resolver, allowlist(settings), api_port=settings.api_port)
    async with (
        httpx.AsyncClient(
            transport=CheckedTransport(backend, _tls_context()),
            timeout=httpx.Timeout(timeout),
            follow_redirects=False,
        ) as client,
        trio.open_nursery() as nursery,
    ):
        for row in rows:
            nursery.start_soon(_deliver, ctx.db, client, settings, row)
    return len(rows)


async def _sign_once(tx: Tx, settings: Settings, rows: list[dict[str, Any]]) -> None:
    """Give every claimed row that has none its signature, stored with the claim.

    A row is signed once, with the secret current at its first attempt; every
    retry sends the stored signature, so a retry stays byte-for-byte the same
    request even when MG_CALLBACK_SIGNING_SECRET is rotated in between.
    """
    unsigned = [row for row in rows if row["callback_signature"] is None]
    if not unsigned:
        return
    secret = load_callback_secret(settings)
    for row in unsigned:
        row["callback_signature"] = sign_callback(
            secret, row["callback_timestamp"], row["callback_nonce"], encode_payload(row["payload"])
        )
    await tx.execute(
        SQL.store_signatures,
        {
            "ids": [row["id"] for row in unsigned],
            "signatures": [row["callback_signature"] for row in unsigned],
        },
    )


async def next_due(ctx: ServiceContext) -> datetime | None:
    """The earliest pending next_attempt_at (a retry, or a lease running out)."""
    # timestamptz or NULL
    value: datetime | None = await ctx.db.fetchval(
        SQL.next_due, {"network_class": ctx.settings.network_class}
    )
    return value


async def _deliver(
    db: Database, client: httpx.AsyncClient, settings: Settings, row: dict[str, Any]
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
        headers = signed_headers(
            row["callback_timestamp"], row["callback_nonce"], row["callback_signature"]
        )
        try:
            # httpx's timeout bounds each read/write; this bounds the whole request,
            # so a receiver that trickles bytes cannot stretch it either.
            with trio.fail_after(settings.callback_timeout_seconds):
                async with client.stream("POST", url, content=body, headers=headers) as response:
                    status_code = response.status_code  # the body is never read
        except TargetRefused as exc:
            refused, error = True, f"refused: {exc}"
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
