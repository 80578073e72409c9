"""Callback targets (issue 17 item 3) and signatures across a secret rotation (item 6).

Every test here sends real HTTP to a real receiver on loopback, and the
injected resolver only ever answers addresses that are loopback or that the
rules must refuse *before* connecting. Where a private address is the point,
the resolver answers the allowlisted receiver first and the private address
second: a dispatcher that checked only the first answer (or none) would reach
the receiver — which the test sees — and never the private network.
"""

from __future__ import annotations

from ipaddress import ip_address
from pathlib import Path
from typing import Any

import pytest
import trio
from receiver import Received, Receiver, signature_valid
from sidecar_fixtures import context, ensure_template, make_settings, new_movement

from qtg.config import ConfigError, Settings
from qtg.db import Database, Query
from qtg.domain import callback_targets as targets
from qtg.services.callbacks import dispatch_pending_callbacks, validate_callback_url
from qtg.services.context import ServiceContext
from qtg.services.errors import InvalidInput

SECRET = "test-callback-secret"

ROWS = Query(
    "test/target_rows",
    "SELECT id, status, attempts, last_error, callback_signature, callback_timestamp,"
    " callback_nonce FROM movement_callback_outbox WHERE request_id = %(request_id)s ORDER BY id",
)
MAKE_DUE = Query(
    "test/target_make_due",
    "UPDATE movement_callback_outbox SET next_attempt_at = now() WHERE id = %(id)s",
)
INSERT_RAW = Query(
    "test/target_insert_raw",
    "INSERT INTO movement_callback_outbox (request_id, event_type, callback_url, payload)"
    " VALUES (%(request_id)s, 'test', %(url)s, '{}'::jsonb) RETURNING id",
)


class FakeResolver:
    """Answers fixed addresses per host name and records every question."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        return self.answers[host]


@pytest.fixture
async def receiver(nursery: trio.Nursery) -> Receiver:
    return await nursery.start(Receiver(secret=SECRET.encode()).serve)


async def rows_of(db: Database, movement: dict[str, Any]) -> list[dict[str, Any]]:
    return await db.fetch(ROWS, {"request_id": movement["id"]})


async def raw_row(ctx: ServiceContext, url: str) -> dict[str, Any]:
    """A movement without a callback_url plus a hand-written outbox row aimed at `url`:
    a row that create-time validation never saw (written before an upgrade, or by SQL)."""
    movement = await new_movement(ctx.db, ctx.settings)
    await ctx.db.fetchval(INSERT_RAW, {"request_id": movement["id"], "url": url})
    return movement


async def setup(db: Database, tmp_path: Path, allowed: str = "") -> ServiceContext:
    await ensure_template(db)
    return context(db, make_settings(tmp_path, callback_allowed_hosts=allowed))


# ------------------------------------------------------------ at send time


@pytest.mark.parametrize(
    "private",
    [
        "10.0.0.5",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata
        "100.64.0.1",  # carrier-grade NAT
        "fd00::1",  # unique-local
        "fe80::1",  # link-local
        "224.0.0.1",  # multicast
        "0.0.0.0",
        "::",
        "::ffff:10.0.0.1",  # IPv4-mapped
        "127.0.0.2",  # loopback, just not the allowlisted address
    ],
)
async def test_a_name_resolving_to_a_refused_address_is_never_contacted(
    db: Database, tmp_path: Path, receiver: Receiver, private: str
) -> None:
    ctx = await setup(db, tmp_path, allowed="127.0.0.1")
    resolver = FakeResolver({"hooks.example": ["127.0.0.1", private]})
    movement = await new_movement(
        db, ctx.settings, callback_url=f"http://hooks.example:{receiver.port}/hook"
    )
    assert await dispatch_pending_callbacks(ctx, resolver=resolver) == 1
    assert receiver.requests == [], "a refused target was contacted"
    assert resolver.asked == [("hooks.example", receiver.port)]  # resolved once
    [row] = await rows_of(db, movement)
    assert row["status"] == "dlq" and row["attempts"] == 1  # refused: final, never retried
    assert row["last_error"].startswith(
        f"refused: callback_url host hooks.example resolves to {ip_address(private)}, a "
    ), row["last_error"]


async def test_dns_rebinding_is_caught_at_send_time(
    db: Database, tmp_path: Path, receiver: Receiver
) -> None:
    """The URL passed creation (a public-looking name); at send time the name answers
    loopback (no allowlist): refused, and the loopback receiver never sees a request."""
    ctx = await setup(db, tmp_path, allowed="")
    url = f"http://rebind.example:{receiver.port}/hook"
    assert validate_callback_url(url, ctx.settings) == url
    movement = await new_movement(db, ctx.settings, callback_url=url)
    resolver = FakeResolver({"rebind.example": ["127.0.0.1"]})
    assert await dispatch_pending_callbacks(ctx, resolver=resolver) == 1
    assert receiver.requests == []
    [row] = await rows_of(db, movement)
    assert row["status"] == "dlq"
    assert row["last_error"] == (
        "refused: callback_url host rebind.example resolves to 127.0.0.1, a loopback address"
    )


async def test_the_connection_goes_to_the_checked_address_under_the_names_host_header(
    db: Database, tmp_path: Path, receiver: Receiver
) -> None:
    """`receiver.test` exists only in the injected resolver: the request can only have
    reached the receiver through the address the check approved."""
    ctx = await setup(db, tmp_path, allowed="127.0.0.1")
    resolver = FakeResolver({"receiver.test": ["127.0.0.1"]})
    movement = await new_movement(
        db, ctx.settings, callback_url=f"http://receiver.test:{receiver.port}/hook"
    )
    assert await dispatch_pending_callbacks(ctx, resolver=resolver) == 1
    [got] = receiver.on("/hook")
    assert got.headers["host"] == f"receiver.test:{receiver.port}"
    assert got.signature_ok
    assert resolver.asked == [("receiver.test", receiver.port)]
    [row] = await rows_of(db, movement)
    assert row["status"] == "sent"


async def test_an_allowlisted_host_name_may_resolve_to_a_private_address(
    db: Database, tmp_path: Path, receiver: Receiver
) -> None:
    ctx = await setup(db, tmp_path, allowed="hooks.internal")
    resolver = FakeResolver({"hooks.internal": ["127.0.0.1"]})
    movement = await new_movement(
        db, ctx.settings, callback_url=f"http://hooks.internal:{receiver.port}/hook"
    )
    assert await dispatch_pending_callbacks(ctx, resolver=resolver) == 1
    assert len(receiver.on("/hook")) == 1
    assert [r["status"] for r in await rows_of(db, movement)] == ["sent"]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:{port}/hook", "is a loopback address (127.0.0.1)"),
        ("http://[::1]:{port}/hook", "is a loopback address (::1)"),
        ("http://0.0.0.0:{port}/hook", "is a unspecified address (0.0.0.0)"),
        ("http://2130706433:{port}/hook", "is a loopback address (127.0.0.1)"),
        ("http://localhost:{port}/hook", "names the local machine (localhost)"),
        ("http://metadata.google.internal/computeMetadata/v1/", "cloud metadata"),
    ],
)
async def test_a_stored_row_aimed_at_a_refused_literal_is_dead_lettered_unsent(
    db: Database, tmp_path: Path, receiver: Receiver, url: str, why: str
) -> None:
    ctx = await setup(db, tmp_path, allowed="")
    resolver = FakeResolver({})
    movement = await raw_row(ctx, url.format(port=receiver.port))
    assert await dispatch_pending_callbacks(ctx, resolver=resolver) == 1
    assert receiver.requests == [] and resolver.asked == []
    [row] = await rows_of(db, movement)
    assert row["status"] == "dlq"
    assert row["last_error"].startswith("refused: callback_url ") and why in row["last_error"]


async def test_a_name_that_does_not_resolve_is_an_ordinary_retried_failure(
    db: Database, tmp_path: Path
) -> None:
    ctx = await setup(db, tmp_path, allowed="")

    async def nxdomain(host: str, port: int) -> list[str]:
        raise OSError(-2, "Name or service not known")

    movement = await new_movement(db, ctx.settings, callback_url="https://gone.example/hook")
    assert await dispatch_pending_callbacks(ctx, resolver=nxdomain) == 1
    [row] = await rows_of(db, movement)
    assert row["status"] == "pending" and row["attempts"] == 1
    assert row["last_error"].startswith("ConnectError: cannot resolve gone.example")


# ------------------------------------------------------------ at creation


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:5432/",
        "http://[::1]/",
        "http://0.0.0.0/",
        "http://[::]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.1.2.3/",
        "http://192.168.0.10:8080/",
        "http://[fd12:3456::1]/",
        "http://[fe80::1]/",
        "http://224.0.0.251/",
        "http://[::ffff:169.254.169.254]/",
        "http://metadata.google.internal/",
        "http://METADATA.GOOGLE.INTERNAL./",
        "http://localhost:9000/",
    ],
)
def test_create_time_check_refuses_internal_targets(url: str) -> None:
    with pytest.raises(InvalidInput, match="MG_CALLBACK_ALLOWED_HOSTS") as caught:
        validate_callback_url(url, Settings())
    assert caught.value.detail["field"] == "callback_url"


def test_allowlist_admits_only_what_it_lists() -> None:
    settings = Settings().replace(callback_allowed_hosts="10.20.0.0/16, hooks.internal, ::1")
    assert validate_callback_url("http://10.20.3.4/h", settings)
    assert validate_callback_url("http://[::1]:9000/h", settings)
    assert validate_callback_url("http://HOOKS.internal./h", settings)
    for url in ("http://10.21.0.1/h", "http://127.0.0.1:9000/h", "http://169.254.169.254/"):
        with pytest.raises(InvalidInput):
            validate_callback_url(url, settings)


def test_bad_allowlist_is_a_start_up_error_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="MG_CALLBACK_ALLOWED_HOSTS: 'not a host'"):
        Settings.from_env({"MG_CALLBACK_ALLOWED_HOSTS": "10.0.0.0/8,not a host"})
    parsed = targets.parse_allowlist(" 10.0.0.0/8 , hooks.internal.,[::1] ")
    assert parsed.hosts == {"hooks.internal"} and len(parsed.networks) == 2


def test_address_classes() -> None:
    def kind(text: str) -> str | None:
        return targets.address_class(targets.literal_address(text))  # type: ignore[arg-type]

    assert kind("8.8.8.8") is None and kind("2606:4700::1111") is None
    assert kind("127.0.0.1") == kind("::1") == kind("127.1") == "loopback"
    assert kind("169.254.169.254") == kind("fe80::1") == "link-local"
    assert kind("10.0.0.1") == kind("172.31.255.255") == kind("192.168.1.1") == "private"
    assert kind("fd00::1") == "unique-local"
    assert kind("224.0.0.1") == kind("ff02::1") == "multicast"
    assert kind("0.0.0.0") == kind("::") == "unspecified"
    assert kind("64:ff9b::a9fe:a9fe") == "link-local"  # NAT64 of 169.254.169.254
    assert kind("2002:0a00:0001::1") == "private"  # 6to4 of 10.0.0.1
    assert kind("100.64.0.1") == "reserved"


# ------------------------------------------------------ item 6: rotation


def _valid_under(secret: bytes, request: Received) -> bool:
    return signature_valid(secret, request.headers, request.body)


async def test_a_retry_after_a_secret_rotation_is_byte_for_byte_the_first_request(
    db: Database, tmp_path: Path, receiver: Receiver
) -> None:
    """The secret lives in the data folder's file (what rotation replaces); the first
    attempt fails, the file is rotated, the retry carries the first signature."""
    await ensure_template(db)
    settings = make_settings(tmp_path, callback_signing_secret=None)
    (tmp_path / "callback_secret").write_text("old-secret\n")
    ctx = context(db, settings)
    receiver.secret = b"old-secret"
    receiver.behave("/flaky", 500)
    movement = await new_movement(db, settings, callback_url=receiver.url("/flaky"))

    assert await dispatch_pending_callbacks(ctx) == 1
    [row] = await rows_of(db, movement)
    assert row["attempts"] == 1 and row["callback_signature"]

    (tmp_path / "callback_secret").write_text("new-secret\n")  # rotation
    receiver.behave("/flaky", 200)
    await db.execute(MAKE_DUE, {"id": row["id"]})
    assert await dispatch_pending_callbacks(ctx) == 1

    first, retry = receiver.on("/flaky")
    assert retry.body == first.body
    signed = {k: v for k, v in first.headers.items() if k.startswith("x-qtg-")}
    assert {k: v for k, v in retry.headers.items() if k.startswith("x-qtg-")} == signed
    assert signed["x-qtg-callback-signature"] == row["callback_signature"]
    assert _valid_under(b"old-secret", retry) and not _valid_under(b"new-secret", retry)
    [row] = await rows_of(db, movement)
    assert row["status"] == "sent"

    # a callback first sent after the rotation is signed with the new secret
    later = await new_movement(db, settings, callback_url=receiver.url("/later"))
    assert await dispatch_pending_callbacks(ctx) == 1
    [got] = receiver.on("/later")
    assert _valid_under(b"new-secret", got)
    [row] = await rows_of(db, later)
    assert row["callback_signature"] == got.headers["x-qtg-callback-signature"]


# ------------------------------------------------ own API, on the resolved address (issue 26)


def loopback_host_name() -> str:
    """A name (not `localhost`) the system resolver answers with a loopback address:
    this machine's host name, else one from /etc/hosts."""
    import socket

    candidates = [socket.gethostname()]
    try:
        for line in Path("/etc/hosts").read_text().splitlines():
            fields = line.split("#", 1)[0].split()
            if fields and fields[0].startswith("127."):
                candidates += fields[1:]
    except OSError:
        pass
    for name in candidates:
        if name == "localhost" or name.endswith(".localhost"):
            continue
        try:
            infos = socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)
        except OSError:
            continue
        if infos and all(ip_address(i[4][0]).is_loopback for i in infos):
            return name
    pytest.skip("no host name other than localhost resolves to loopback here")


@pytest.mark.parametrize("allowed", ["127.0.0.1", "127.0.0.1,api.internal"])
async def test_a_name_resolving_to_loopback_on_the_api_port_is_refused_at_send_time(
    db: Database, tmp_path: Path, receiver: Receiver, allowed: str
) -> None:
    """The receiver plays the API (MG_API_PORT is its port). The name passes the
    create-time check (it is not a loopback spelling); what it resolves to does not."""
    ctx = await setup(db, tmp_path, allowed=allowed)
    ctx = context(db, ctx.settings.replace(api_host="127.0.0.1", api_port=receiver.port))
    url = f"http://api.internal:{receiver.port}/v1/movements"
    assert validate_callback_url(url, ctx.settings) == url
    movement = await new_movement(db, ctx.settings, callback_url=url)
    resolver = FakeResolver({"api.internal": ["127.0.0.1"]})
    assert await dispatch_pending_callbacks(ctx, resolver=resolver) == 1
    assert receiver.requests == [], "the runtime posted to its own API"
    [row] = await rows_of(db, movement)
    assert row["status"] == "dlq" and row["attempts"] == 1
    assert row["last_error"] == (
        f"refused: callback_url host api.internal resolves to 127.0.0.1 port {receiver.port},"
        " this runtime's own API (MG_API_PORT)"
    )


async def test_a_hosts_file_name_for_the_api_is_refused_with_the_system_resolver(
    db: Database, tmp_path: Path, receiver: Receiver
) -> None:
    """The issue's bypass, with the real resolver: http://<hostname>:<API port>/…"""
    name = loopback_host_name()
    ctx = await setup(db, tmp_path, allowed="127.0.0.1")
    ctx = context(db, ctx.settings.replace(api_host="127.0.0.1", api_port=receiver.port))
    url = f"http://{name}:{receiver.port}/v1/movements"
    assert validate_callback_url(url, ctx.settings) == url
    movement = await new_movement(db, ctx.settings, callback_url=url)
    assert await dispatch_pending_callbacks(ctx) == 1
    assert receiver.requests == []
    [row] = await rows_of(db, movement)
    assert row["status"] == "dlq"
    assert "this runtime's own API" in row["last_error"], row["last_error"]


async def test_the_same_name_on_another_port_is_delivered(
    db: Database, tmp_path: Path, receiver: Receiver
) -> None:
    """Control: only the API's port is refused, so the guard is not 'refuse loopback'."""
    name = loopback_host_name()
    ctx = await setup(db, tmp_path, allowed="127.0.0.1")
    ctx = context(db, ctx.settings.replace(api_host="127.0.0.1", api_port=receiver.port + 1))
    movement = await new_movement(
        db, ctx.settings, callback_url=f"http://{name}:{receiver.port}/hook"
    )
    assert await dispatch_pending_callbacks(ctx) == 1
    assert len(receiver.on("/hook")) == 1
    assert [r["status"] for r in await rows_of(db, movement)] == ["sent"]


def test_own_api_rule_and_local_addresses() -> None:
    from qtg.services.callbacks import is_local_address

    rule = targets.own_api_refusal
    assert rule(ip_address("127.0.0.1"), 8000, 8000, local=True)
    assert rule(ip_address("127.5.6.7"), 8000, 8000, local=False)  # all of 127/8
    assert rule(ip_address("::ffff:127.0.0.1"), 8000, 8000, local=False)
    assert rule(ip_address("0.0.0.0"), 8000, 8000, local=False)
    assert rule(ip_address("10.1.2.3"), 8000, 8000, local=True)  # this machine's interface
    assert rule(ip_address("10.1.2.3"), 8000, 8000, local=False) is None
    assert rule(ip_address("127.0.0.1"), 8001, 8000, local=True) is None
    assert rule(ip_address("127.0.0.1"), 8000, 0, local=True) is None  # ephemeral API port
    assert is_local_address(ip_address("127.0.0.1"))
    assert not is_local_address(ip_address("192.0.2.1"))  # TEST-NET-1: nobody's address
