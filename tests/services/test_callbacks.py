"""callback_dispatcher (reference §4) against a real HTTP receiver on loopback."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import trio
from receiver import HANG, Receiver
from sidecar_fixtures import context, ensure_template, make_settings, new_movement

from qtg.config import Settings
from qtg.db import Database, Query
from qtg.services.callbacks import (
    dispatch_pending_callbacks,
    failure_outcome,
    load_callback_secret,
    next_due,
    validate_callback_url,
)
from qtg.services.context import ServiceContext
from qtg.services.errors import InvalidInput

SECRET = "test-callback-secret"

ROWS = Query(
    "test/callback_rows",
    "SELECT id, request_id, status, attempts, max_attempts, last_status_code, last_error,"
    " callback_timestamp, callback_nonce, payload, sent_at, next_attempt_at, updated_at,"
    " extract(epoch FROM next_attempt_at - updated_at)::float8 AS delay"
    " FROM movement_callback_outbox WHERE request_id = %(request_id)s ORDER BY id",
)
MAKE_DUE = Query(
    "test/make_due",
    "UPDATE movement_callback_outbox SET next_attempt_at = now() WHERE id = %(id)s",
)
INSERT_RAW = Query(
    "test/insert_raw_callback",
    "INSERT INTO movement_callback_outbox (request_id, event_type, callback_url, payload)"
    " VALUES (%(request_id)s, 'test', %(url)s, '{}'::jsonb) RETURNING id",
)


@pytest.fixture
async def receiver(nursery: trio.Nursery) -> Receiver:
    return await nursery.start(Receiver(secret=SECRET.encode()).serve)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
async def ctx(db: Database, settings: Settings) -> ServiceContext:
    await ensure_template(db)
    return context(db, settings)


async def rows_of(db: Database, movement: dict[str, Any]) -> list[dict[str, Any]]:
    return await db.fetch(ROWS, {"request_id": movement["id"]})


async def test_delivers_signed_pure_payload(ctx: ServiceContext, receiver: Receiver) -> None:
    movement = await new_movement(ctx.db, ctx.settings, callback_url=receiver.url("/hook"))
    [row] = await rows_of(ctx.db, movement)
    assert row["status"] == "pending"

    assert await dispatch_pending_callbacks(ctx) == 1

    [got] = receiver.on("/hook")
    assert got.signature_ok, "receiver's own HMAC check failed"
    assert got.headers["x-qtg-callback-signature-version"] == "v3"
    assert got.headers["content-type"] == "application/json"
    assert got.timestamp == str(row["callback_timestamp"])
    assert got.nonce == row["callback_nonce"]
    assert got.json() == json.loads(json.dumps(row["payload"]))  # the pure payload, no envelope
    assert got.json()["event_type"] == "request_created"
    assert got.json()["request_id"] == str(movement["id"])
    [row] = await rows_of(ctx.db, movement)
    assert row["status"] == "sent"
    assert row["attempts"] == 1 and row["last_status_code"] == 200
    assert row["sent_at"] is not None and row["last_error"] is None
    assert await dispatch_pending_callbacks(ctx) == 0  # nothing left, nothing resent


async def test_wrong_secret_fails_the_receivers_check(
    db: Database, tmp_path: Path, receiver: Receiver
) -> None:
    await ensure_template(db)
    ctx = context(db, make_settings(tmp_path, callback_signing_secret="not-the-secret"))
    await new_movement(db, ctx.settings, callback_url=receiver.url("/hook"))
    await dispatch_pending_callbacks(ctx)
    [got] = receiver.on("/hook")
    assert not got.signature_ok


async def test_retry_backoff_then_dlq_with_fixed_timestamp_and_nonce(
    dsn: str, settings: Settings, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """8 attempts allowed: delays 2, 4, 8, 16, 32, 64, 64 s (read from the DB), then dlq."""
    receiver.behave("/down", 500)
    async with Database(dsn, callback_max_attempts=8) as db:
        await ensure_template(db)
        ctx = context(db, settings.replace(callback_max_attempts=8))
        movement = await new_movement(db, ctx.settings, callback_url=receiver.url("/down"))
        [row] = await rows_of(db, movement)
        assert row["max_attempts"] == 8
        delays = []
        with caplog.at_level(logging.DEBUG):
            for attempt in range(1, 9):
                assert await dispatch_pending_callbacks(ctx) == 1
                [row] = await rows_of(db, movement)
                assert row["attempts"] == attempt
                assert row["last_status_code"] == 500 and row["last_error"] == "HTTP 500"
                if row["status"] == "dlq":
                    break
                delays.append(row["delay"])
                # not due yet: a pass right now leaves it alone
                assert await dispatch_pending_callbacks(ctx) == 0
                assert await next_due(ctx) == row["next_attempt_at"]
                await db.execute(MAKE_DUE, {"id": row["id"]})
        assert delays == [2, 4, 8, 16, 32, 64, 64]
        assert row["status"] == "dlq" and row["attempts"] == 8
        assert await dispatch_pending_callbacks(ctx) == 0  # dlq is final
        assert await next_due(ctx) is None

    sent = receiver.on("/down")
    assert len(sent) == 8
    assert {r.timestamp for r in sent} == {str(row["callback_timestamp"])}
    assert {r.nonce for r in sent} == {row["callback_nonce"]}
    assert {r.body for r in sent} == {sent[0].body}
    assert {r.headers["x-qtg-callback-signature"] for r in sent} == {
        sent[0].headers["x-qtg-callback-signature"]
    }
    assert all(r.signature_ok for r in sent)
    assert SECRET not in caplog.text


async def test_default_max_attempts_is_five(ctx: ServiceContext, receiver: Receiver) -> None:
    receiver.behave("/down", 503)
    movement = await new_movement(ctx.db, ctx.settings, callback_url=receiver.url("/down"))
    for _ in range(5):
        [row] = await rows_of(ctx.db, movement)
        await ctx.db.execute(MAKE_DUE, {"id": row["id"]})
        assert await dispatch_pending_callbacks(ctx) == 1
    [row] = await rows_of(ctx.db, movement)
    assert (row["status"], row["attempts"], row["max_attempts"]) == ("dlq", 5, 5)


def test_failure_outcome_rule() -> None:
    assert [failure_outcome(a, 99).delay_seconds for a in range(8)] == [2, 4, 8, 16, 32, 64, 64, 64]
    assert failure_outcome(3, 5).status == "pending"
    assert failure_outcome(4, 5).status == "dlq"


async def test_hanging_receiver_does_not_hold_up_a_healthy_one(
    db: Database, tmp_path: Path, receiver: Receiver
) -> None:
    timeout = 1.5
    await ensure_template(db)
    ctx = context(db, make_settings(tmp_path, callback_timeout_seconds=timeout))
    receiver.behave("/stuck", HANG)
    stuck = await new_movement(db, ctx.settings, callback_url=receiver.url("/stuck"))
    healthy = await new_movement(db, ctx.settings, callback_url=receiver.url("/ok"))

    start = trio.current_time()
    with trio.fail_after(timeout + 5):
        assert await dispatch_pending_callbacks(ctx) == 2
    elapsed = trio.current_time() - start

    [ok] = receiver.on("/ok")
    assert ok.at - start < timeout / 2, "the healthy receiver waited behind the stuck one"
    assert timeout <= elapsed < timeout + 2
    [row] = await rows_of(db, healthy)
    assert row["status"] == "sent"
    [row] = await rows_of(db, stuck)
    assert row["status"] == "pending" and row["attempts"] == 1
    assert row["last_error"] == f"timed out after {timeout:g}s"
    assert row["last_status_code"] is None
    assert row["delay"] == 2


async def test_in_flight_row_is_leased_not_locked(
    dsn: str, tmp_path: Path, receiver: Receiver
) -> None:
    """While one runtime waits on a stuck receiver, a second runtime neither resends
    that row nor is blocked by it: the claim committed before HTTP began."""
    settings = make_settings(tmp_path, callback_timeout_seconds=3.0)
    receiver.behave("/stuck", HANG)
    async with Database(dsn) as db_a, Database(dsn) as db_b:
        await ensure_template(db_a)
        ctx_a, ctx_b = context(db_a, settings), context(db_b, settings)
        await new_movement(db_a, settings, callback_url=receiver.url("/stuck"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dispatch_pending_callbacks, ctx_a)
            with trio.fail_after(2):
                await receiver.wait_for("/stuck")
            later = await new_movement(db_a, settings, callback_url=receiver.url("/ok"))
            with trio.fail_after(2):  # not blocked by runtime A's in-flight row
                assert await dispatch_pending_callbacks(ctx_b) == 1
            [row] = await rows_of(db_b, later)
            assert row["status"] == "sent"
            assert len(receiver.on("/stuck")) == 1
    assert len(receiver.on("/stuck")) == 1


async def test_two_dispatchers_share_a_burst_without_duplicates(
    dsn: str, tmp_path: Path, receiver: Receiver
) -> None:
    settings = make_settings(tmp_path, callback_batch_size=3)
    async with Database(dsn) as db_a, Database(dsn) as db_b:
        await ensure_template(db_a)
        for _ in range(12):
            await new_movement(db_a, settings, callback_url=receiver.url("/burst"))

        async def drain(ctx: ServiceContext) -> None:
            while await dispatch_pending_callbacks(ctx):
                pass

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain, context(db_a, settings))
                nursery.start_soon(drain, context(db_b, settings))
    got = receiver.on("/burst")
    assert len(got) == 12
    assert len({r.nonce for r in got}) == 12


async def test_dispatcher_refuses_a_row_aimed_at_its_own_api(
    ctx: ServiceContext, receiver: Receiver
) -> None:
    """A row that bypassed create-time validation is dead-lettered, never sent."""
    movement = await new_movement(ctx.db, ctx.settings)
    own_api = f"http://localhost:{ctx.settings.api_port}/v3/movements"
    row_id = await ctx.db.fetchval(INSERT_RAW, {"request_id": movement["id"], "url": own_api})
    assert await dispatch_pending_callbacks(ctx) == 1
    [row] = await rows_of(ctx.db, movement)
    assert row["id"] == row_id and row["status"] == "dlq"
    assert row["last_error"].startswith("refused: callback_url points at this runtime's own API")


async def test_a_url_the_client_cannot_send_to_fails_alone(
    ctx: ServiceContext, receiver: Receiver
) -> None:
    """A row that bypassed create-time validation with a host httpx cannot encode
    is one failed attempt; the healthy row in the same batch is delivered."""
    bad = await new_movement(ctx.db, ctx.settings)
    await ctx.db.fetchval(INSERT_RAW, {"request_id": bad["id"], "url": "http://.com/"})
    good = await new_movement(ctx.db, ctx.settings, callback_url=receiver.url("/good"))
    while await dispatch_pending_callbacks(ctx):
        pass
    [bad_row] = await rows_of(ctx.db, bad)  # bad has no callback_url: only the raw row
    assert bad_row["status"] == "dlq"
    assert bad_row["last_error"].startswith("refused: callback_url has a host name")
    assert all(r["status"] == "sent" for r in await rows_of(ctx.db, good))


async def test_unreachable_receiver_is_a_failed_attempt(ctx: ServiceContext) -> None:
    with trio.socket.socket() as sock:  # a port nobody listens on
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    movement = await new_movement(ctx.db, ctx.settings, callback_url=f"http://127.0.0.1:{port}/")
    assert await dispatch_pending_callbacks(ctx) == 1
    [row] = await rows_of(ctx.db, movement)
    assert row["status"] == "pending" and row["attempts"] == 1
    assert row["last_error"].startswith("ConnectError")


async def test_create_movement_refuses_bad_callback_urls(ctx: ServiceContext) -> None:
    with pytest.raises(InvalidInput) as caught:
        await new_movement(ctx.db, ctx.settings, callback_url="ftp://example.com/hook")
    assert caught.value.detail["field"] == "callback_url"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/hook", "http or https"),
        ("javascript:alert(1)", "http or https"),
        ("file:///etc/passwd", "http or https"),
        ("example.com/hook", "http or https"),
        ("http:///nohost", "no host"),
        ("https://user:pw@example.com/hook", "credentials"),
        ("https://exa mple.com/", "spaces"),
        ("http://example.com:99999/", "not a valid URL"),
        ("", "non-empty"),
        ("http://127.0.0.1:8000/v3/movements", "own API"),
        ("http://localhost:8000/", "own API"),
        ("http://LOCALHOST.:8000/", "own API"),
        ("http://[::1]:8000/", "own API"),
        ("http://127.1:8000/", "own API"),
        ("http://2130706433:8000/", "own API"),
        ("http://[::ffff:127.0.0.1]:8000/", "own API"),
        ("http://0.0.0.0:8000/", "own API"),
        ("http://.com/", "cannot be used"),
        (f"http://{'a' * 64}.example.com/", "cannot be used"),
    ],
)
def test_validate_callback_url_refuses(url: str, why: str) -> None:
    with pytest.raises(InvalidInput, match=why) as caught:
        validate_callback_url(url, Settings())
    assert caught.value.detail["field"] == "callback_url"


def test_validate_callback_url_refuses_non_strings() -> None:
    with pytest.raises(InvalidInput):
        validate_callback_url(42, Settings())


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/hooks/qtg?tenant=7",
        "HTTPS://Example.com:8000/",  # port 8000 elsewhere is fine
        "http://93.184.215.14:8000/",
    ],
)
def test_validate_callback_url_accepts(url: str) -> None:
    assert validate_callback_url(url, Settings()) == url


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9000/hook",  # a co-located receiver on another port
        "http://10.0.0.5:8000/",
    ],
)
def test_validate_callback_url_accepts_allowlisted_private_targets(url: str) -> None:
    settings = Settings().replace(callback_allowed_hosts="127.0.0.1, 10.0.0.0/8")
    assert validate_callback_url(url, settings) == url


def test_wildcard_api_host_covers_every_local_spelling() -> None:
    settings = Settings().replace(api_host="0.0.0.0", api_port=9443)
    for url in ("https://127.0.0.1:9443/", "https://localhost:9443/", "https://[::1]:9443/"):
        with pytest.raises(InvalidInput, match="own API"):
            validate_callback_url(url, settings)
    assert validate_callback_url("https://example.com:9443/", settings)


def test_secret_from_setting_wins(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, callback_signing_secret="from-env")
    assert load_callback_secret(settings) == b"from-env"
    assert not (tmp_path / "callback_secret").exists()


def test_secret_generated_once_and_kept_private(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", callback_signing_secret=None)
    first = load_callback_secret(settings)
    path = tmp_path / "data" / "callback_secret"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert len(first) == 64
    assert load_callback_secret(settings) == first
    assert [p.name for p in path.parent.iterdir()] == ["callback_secret"]  # no temp left


def test_empty_secret_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "callback_secret").write_text("")
    with pytest.raises(Exception, match="callback_secret is empty"):
        load_callback_secret(make_settings(tmp_path, callback_signing_secret=None))
