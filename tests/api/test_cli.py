"""`qtg token …` and `qtg watch` as real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio
from runtime.rt_procs import private_dir

from qtg.cli.watch import describe_close, format_event, stream_url
from qtg.db import Query
from qtg.services import tokens

from .conftest import Api, make_movement, make_template
from .streaming import until

QTG = [str(Path(sys.executable).parent / "qtg")]
HASHES = Query("t/hashes", "SELECT name, token_hash, revoked_at FROM api_tokens ORDER BY name")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MG_")}
    env.update(extra)
    return env


async def _qtg(*args: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [*QTG, *args], capture_stdout=True, capture_stderr=True, check=False, env=_env(**env)
    )


async def test_token_create_list_revoke(dsn: str, db: Any) -> None:
    created = await _qtg(
        "token", "create", "--name", "carol", "--role", "viewer", "--database-url", dsn
    )
    assert created.returncode == 0, created.stderr
    token = created.stdout.decode().strip()
    assert token.startswith("qtg_") and "\n" not in token
    assert b"shown once" in created.stderr
    rows = await db.fetch(HASHES)
    assert [(r["name"], r["token_hash"]) for r in rows] == [("carol", tokens.hash_token(token))]
    assert (await tokens.authenticate(db, token)).name == "carol"

    again = await _qtg(
        "token", "create", "--name", "carol", "--role", "admin", "--database-url", dsn
    )
    assert again.returncode == 2 and b"revoke it first" in again.stderr

    listed = await _qtg("token", "list", "--database-url", dsn)
    assert listed.returncode == 0 and b"carol" in listed.stdout and b"viewer" in listed.stdout
    assert token.encode() not in listed.stdout

    revoked = await _qtg("token", "revoke", "--name", "carol", "--database-url", dsn)
    assert revoked.returncode == 0, revoked.stderr
    assert await tokens.authenticate(db, token) is None
    gone = await _qtg("token", "revoke", "--name", "carol", "--database-url", dsn)
    assert gone.returncode == 2 and b"no live token" in gone.stderr


async def test_token_create_on_the_embedded_database_names_its_socket() -> None:
    """The embedded database has no TCP port; "…:5432/qtg" sent a newcomer
    looking for one (issue 26). Its socket file is named instead."""
    with private_dir("qtg-cli-embedded-") as root:
        data = root / "qtg-data"
        # the README's first step on a fresh machine: no runtime start, no `qtg migrate`
        # before it; the embedded database is migrated for the command
        created = await _qtg(
            "token",
            "create",
            "--name",
            "dana",
            "--role",
            "viewer",
            MG_EMBEDDED_DATA_DIR=str(data),
        )
    assert created.returncode == 0, created.stderr
    assert created.stdout.decode().strip().startswith("qtg_")
    said = created.stderr.decode()
    assert ":5432" not in said, said
    [line] = said.splitlines()
    socket_dir = line.split("@", 1)[1].split("/.s.PGSQL.5432 (socket)/qtg: token for dana", 1)[0]
    assert socket_dir == str(data / "pgdata"), line


async def test_token_create_on_an_unmigrated_database_names_qtg_migrate(
    empty_dsn: str,
) -> None:
    """An external database is migrated only when asked: the command says how, in one
    line, instead of `relation "api_tokens" does not exist`; it creates nothing."""
    created = await _qtg(
        "token", "create", "--name", "erin", "--role", "viewer", "--database-url", empty_dsn
    )
    assert created.returncode == 2 and created.stdout == b""
    said = created.stderr.decode()
    assert "is not migrated (pending: 0001_" in said and "run `qtg migrate` first" in said, said
    assert "Traceback" not in said and len(said.strip().splitlines()) == 1
    migrated = await _qtg("migrate", "--database-url", empty_dsn)
    assert migrated.returncode == 0, migrated.stderr
    again = await _qtg(
        "token", "create", "--name", "erin", "--role", "viewer", "--database-url", empty_dsn
    )
    assert again.returncode == 0 and again.stdout.decode().startswith("qtg_"), again.stderr


def test_a_socket_dsn_is_described_by_its_socket_file() -> None:
    from qtg.cli.common import describe_dsn

    assert describe_dsn("host=/run/pg port=5433 user=u dbname=d") == (
        "u@/run/pg/.s.PGSQL.5433 (socket)/d"
    )
    assert describe_dsn("postgresql://u@/d?host=/run/pg") == "u@/run/pg/.s.PGSQL.5432 (socket)/d"
    assert describe_dsn("postgresql://u@db:6432/d") == "u@db:6432/d"


async def test_watch_tails_a_movement_to_completion(api: Api) -> None:
    await make_template(api)
    movement = await make_movement(api, who="alice")
    rid = movement["id"]
    result: list[subprocess.CompletedProcess[bytes]] = []

    async def watch() -> None:
        result.append(
            await _qtg(
                "watch",
                "--url",
                api.url,
                "--request-id",
                rid,
                "--until-final",
                QTG_TOKEN=api.tokens["vic"],
            )
        )

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            await until(lambda: api.feed.subscriber_count >= 1, deadline=20)
            assert (await api["bob"].post(f"/v3/movements/{rid}/approve")).status_code == 200
            r = await api["bob"].post(f"/v3/movements/{rid}/nodes/confirm/complete")
            assert r.status_code == 200
    done = result[0]
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert any("request: PENDING_APPROVAL -> APPROVED" in line for line in lines), lines
    assert any("node confirm: READY -> COMPLETED" in line for line in lines), lines
    assert "COMPLETED" in lines[-1] and "request:" in lines[-1]
    ids = [int(line.split()[0][1:]) for line in lines]
    assert ids == sorted(set(ids))


async def test_watch_refuses_without_a_valid_token(api: Api) -> None:
    missing = await _qtg("watch", "--url", api.url)
    assert missing.returncode == 2 and b"QTG_TOKEN" in missing.stderr
    bad = await _qtg("watch", "--url", api.url, QTG_TOKEN="qtg_nope")
    assert bad.returncode == 2 and b"401" in bad.stderr


def test_format_event_and_url() -> None:
    base = {
        "id": 7,
        "request_id": "r1",
        "occurred_at": "2024-06-01T10:00:00.123456Z",
        "node_key": None,
        "from_state": None,
        "to_state": None,
        "data": {},
    }
    assert format_event(
        {
            **base,
            "event_type": "node_state_changed",
            "node_key": "burn",
            "from_state": "READY",
            "to_state": "SUBMITTING",
            "data": {"attempt_no": 1},
        }
    ).endswith("node burn: READY -> SUBMITTING (attempt 1)")
    assert format_event(
        {**base, "event_type": "frontier_advanced", "data": {"frontier": ["a", "b"]}}
    ).endswith("frontier: a, b")
    assert format_event(base | {"event_type": "request_created", "to_state": "X"}).startswith(
        "#7       10:00:00.123 r1"
    )
    assert stream_url("https://h:1/base/", {"after": 3, "request_id": None}) == (
        "wss://h:1/base/v3/stream?after=3"
    )


def test_a_closed_stream_is_described_in_words() -> None:
    lost = describe_close(1006, "")
    assert lost == (
        "stream the connection to the API was lost (no close frame: the API stopped or "
        "the network dropped) [code 1006]"
    )
    assert "( " not in lost and " )" not in lost
    assert describe_close(1001, "server shutting down; resume with after=7") == (
        "stream the API is restarting [code 1001]: server shutting down; resume with after=7"
    )
    assert describe_close(4999, None) == "stream closed [code 4999]"


async def test_seed_demo_says_the_templates_exist_instead_of_logging_an_empty_list(
    db: Any, caplog: Any
) -> None:
    from types import SimpleNamespace

    from qtg.runtime import assembly
    from qtg.runtime.demo import DEMO_TEMPLATES

    keys = [t["template_key"] for t in DEMO_TEMPLATES]
    caplog.set_level("INFO", logger="qtg.runtime")
    for _ in range(2):
        await assembly.seed_demo(SimpleNamespace(db=db))  # type: ignore[arg-type]
    seeded = [(r.getMessage(), r.templates) for r in caplog.records if hasattr(r, "templates")]
    assert seeded == [
        ("demo templates registered", keys),
        ("demo templates already registered", keys),
    ]


async def test_watch_refuses_a_url_it_cannot_use_in_one_line() -> None:
    """`--url ftp://x` once ended in a 21-line traceback from the WebSocket library."""
    for url, words in (
        ("ftp://x", b"http://HOST:PORT"),
        ("http://[::1", b"is not a URL"),
        ("127.0.0.1:8080", b"http://HOST:PORT"),
    ):
        done = await _qtg("watch", "--url", url, QTG_TOKEN="qtg_x")
        assert done.returncode == 2, done.stderr
        lines = done.stderr.decode().splitlines()
        assert len(lines) == 1 and lines[0].startswith("qtg watch: error: --url"), lines
        assert words in done.stderr, done.stderr
        assert b"Traceback" not in done.stderr


async def test_watch_names_a_failed_connection_and_gives_up_after_its_bound() -> None:
    """`--url http://127.0.0.1:1` once retried for ever, saying only `HandshakeError`."""
    started = trio.current_time()
    with trio.fail_after(60):
        done = await _qtg(
            "watch", "--url", "http://127.0.0.1:1", "--give-up-after", "2", QTG_TOKEN="qtg_x"
        )
    assert trio.current_time() - started >= 2
    assert done.returncode == 2, done.stderr
    lines = done.stderr.decode().splitlines()
    assert lines, lines
    assert all("connection refused" in line for line in lines), lines
    assert all("retrying in" in line for line in lines[:-1]), lines
    assert lines[-1].startswith("qtg watch: error: cannot reach http://127.0.0.1:1"), lines
    assert "gave up after" in lines[-1] and "--give-up-after 2" in lines[-1], lines
    assert b"Traceback" not in done.stderr
