"""Retention (issue 29 item 4): `qtg prune` against real PostgreSQL.

Rows are made old by moving their timestamps back on a connection with
`session_replication_role = replica` (the touch triggers would otherwise reset
updated_at); audit facts are old from birth (written to audit_outbox with an
old occurred_at), since occurred_at is part of their hash. The CLI runs as a
real subprocess wherever its output or exit code is the point.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import schema_rows as rows
import trio
from runtime.rt_procs import base_env
from services.test_audit import write_facts

from qtg.config import Settings
from qtg.db import Database, Query
from qtg.services.audit import (
    audit_keys,
    promote_pending,
    take_checkpoint,
    verify_audit_chain,
)
from qtg.services.retention import (
    PARTS,
    RetentionError,
    RetentionPolicy,
    archive_audit,
    prune,
    verify_archive_files,
)

KEY = "r" * 16 + "-retention-test-key-0123456789"
RECORD_EVENT = Query(
    "test/record_event",
    "SELECT qtg_record_event(%(id)s, NULL, NULL, 'note', NULL, NULL, '{}')",
)
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "REJECTED", "EXPIRED")


def qtg(*args: str, key: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    environment = base_env(**env)
    if key is not None:
        environment["MG_AUDIT_HMAC_KEY"] = key
    return subprocess.run(
        [str(Path(sys.executable).parent / "qtg"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=environment,
    )


async def run_qtg(
    *args: str, key: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    return await trio.to_thread.run_sync(lambda: qtg(*args, key=key, **env))


def sql(dsn: str, text: str, params: Any = None, *, replica: bool = False) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        if replica:
            conn.execute("SET session_replication_role = replica")
        result: list[tuple[Any, ...]] = []
        for statement in text.split(";"):  # params go to the statements that take them
            cur = conn.execute(statement, params if "%" in statement else None)
            result = cur.fetchall() if cur.description else []
        conn.commit()
        return result


def count(dsn: str, text: str, params: Any = None) -> int:
    return int(sql(dsn, text, params)[0][0])


def movement(dsn: str, state: str, *, callback_url: str | None = None) -> uuid.UUID:
    """A request walked to `state` through allowed transitions (events by the triggers)."""
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        p = rows.plan(conn)
        request_id = rows.request(conn, p, callback_url=callback_url)
        rows.walk_request_to(conn, request_id, state)
        conn.commit()
    return request_id


def age_movement(dsn: str, request_id: uuid.UUID, days: float) -> None:
    """Move a movement's terminal time and its events `days` into the past."""
    sql(
        dsn,
        "UPDATE movement_requests SET state_entered_at = now() - make_interval(days => %(d)s),"
        " updated_at = now() - make_interval(days => %(d)s) WHERE id = %(id)s;"
        " UPDATE movement_events SET created_at = now() - make_interval(days => %(d)s)"
        " WHERE request_id = %(id)s",
        {"id": request_id, "d": days},
        replica=True,
    )


def events_of(dsn: str, request_id: uuid.UUID) -> list[int]:
    return [
        r[0]
        for r in sql(
            dsn, "SELECT id FROM movement_events WHERE request_id = %s ORDER BY id", (request_id,)
        )
    ]


# ---------------------------------------------------------------- movement_events


async def test_events_only_of_movements_terminal_past_retention(dsn: str) -> None:
    # created oldest first, as they would be: ids follow created_at (events_bound.sql)
    old_terminal = {state: movement(dsn, state) for state in TERMINAL}
    for request_id in old_terminal.values():
        age_movement(dsn, request_id, 100)
    live = movement(dsn, "EXECUTING")  # live for 100 days: its events stay, however old
    age_movement(dsn, live, 100)
    # an old terminal movement whose callback still points at one of its events
    with_callback = movement(dsn, "COMPLETED", callback_url="https://cb.example/x")
    age_movement(dsn, with_callback, 100)
    pointed = events_of(dsn, with_callback)[-1]
    sql(
        dsn,
        "INSERT INTO movement_callback_outbox (request_id, event_id, event_type, callback_url,"
        " payload) VALUES (%s, %s, 'request_state_changed', 'https://cb.example/x', '{}')",
        (with_callback, pointed),
    )
    recent = movement(dsn, "COMPLETED")  # terminal 10 days ago: inside the 90 days
    age_movement(dsn, recent, 10)
    doomed = sum(len(events_of(dsn, r)) for r in old_terminal.values())
    pointed_at = {  # the trigger queued callbacks for its events too
        r[0]
        for r in sql(
            dsn, "SELECT event_id FROM movement_callback_outbox WHERE event_id IS NOT NULL"
        )
    }
    assert pointed in pointed_at
    doomed += len(set(events_of(dsn, with_callback)) - pointed_at)
    kept = {r: events_of(dsn, r) for r in (live, recent)}
    total = count(dsn, "SELECT count(*) FROM movement_events")

    dry = await run_qtg("prune", "--dry-run", "--only", "events", "--database-url", dsn)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"movement_events: {doomed}" in dry.stdout and "would remove" in dry.stdout
    assert count(dsn, "SELECT count(*) FROM movement_events") == total

    done = await run_qtg("prune", "--only", "events", "--batch-size", "3", "--database-url", dsn)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"movement_events: {doomed}" in done.stdout
    for request_id in old_terminal.values():
        assert events_of(dsn, request_id) == []
    assert events_of(dsn, with_callback) == sorted(pointed_at)
    assert {r: events_of(dsn, r) for r in (live, recent)} == kept
    assert count(dsn, "SELECT count(*) FROM movement_events") == total - doomed
    # the movements themselves stay (their rows, nodes and states are the record)
    assert count(dsn, "SELECT count(*) FROM movement_requests") == len(TERMINAL) + 3

    again = await run_qtg("prune", "--only", "events", "--database-url", dsn)
    assert "movement_events: 0" in again.stdout


# ---------------------------------------------------------------- outboxes


async def test_sent_and_dlq_outbox_rows_past_retention_go_pending_ones_stay(dsn: str) -> None:
    request_id = movement(dsn, "COMPLETED")
    ids = {}
    for name, status, days in (
        ("sent_old", "sent", 40),
        ("dlq_old", "dlq", 40),
        ("pending_old", "pending", 40),
        ("sent_young", "sent", 5),
    ):
        ids[name] = sql(
            dsn,
            "INSERT INTO movement_callback_outbox (request_id, event_type, callback_url, payload,"
            " status, updated_at) VALUES (%s, 'x', 'https://cb.example', '{}', %s,"
            " now() - make_interval(days => %s)) RETURNING id",
            (request_id, status, days),
            replica=True,
        )[0][0]
    # notifications: one resolved long ago, sent; one open; one resolved, message dlq
    messages = {}
    for name, status, days in (
        ("m_sent_old", "sent", 40),
        ("m_dlq_old", "dlq", 40),
        ("m_pending", "pending", 40),
        ("m_sent_young", "sent", 5),
    ):
        messages[name] = sql(
            dsn,
            "INSERT INTO notification_messages (route, kind, notification_count, severity,"
            " subject, body, payload, status, max_attempts, updated_at) VALUES ('webhook',"
            " 'single', 1, 'info', 's', 'b', '{}', %s, 5, now() - make_interval(days => %s))"
            " RETURNING id",
            (status, days),
            replica=True,
        )[0][0]
    notes = {}
    for name, message, resolved_days in (
        ("n_over", "m_sent_old", 40),  # resolved, delivered long ago: goes
        ("n_dlq", "m_dlq_old", 40),  # resolved, dead-lettered long ago: goes
        ("n_open", "m_sent_old", None),  # still open: stays (its delivery goes)
        ("n_unsent", "m_pending", 40),  # its message is still pending: stays
        ("n_young", "m_sent_young", 40),  # its message is recent: stays
    ):
        notes[name] = sql(
            dsn,
            "SELECT qtg_raise_notification('test', 'info', %s, 'subject')",
            (f"dedupe-{name}",),
        )[0][0]
        sql(
            dsn,
            "UPDATE notifications SET routed_at = now() WHERE id = %(n)s;"
            " INSERT INTO notification_deliveries (notification_id, route, message_id)"
            " VALUES (%(n)s, 'webhook', %(m)s)",
            {"n": notes[name], "m": messages[message]},
        )
        if resolved_days is not None:
            sql(
                dsn,
                "UPDATE notifications SET resolved_at = now() - make_interval(days => %s)"
                " WHERE id = %s",
                (resolved_days, notes[name]),
            )

    # resolved long ago but never routed: the dispatcher may be routing it now, so it stays
    notes["n_unrouted"] = sql(
        dsn, "SELECT qtg_raise_notification('test', 'info', 'dedupe-unrouted', 'subject')"
    )[0][0]
    sql(
        dsn,
        "UPDATE notifications SET resolved_at = now() - make_interval(days => 40) WHERE id = %s",
        (notes["n_unrouted"],),
    )
    dry = await run_qtg("prune", "--dry-run", "--only", "outboxes", "--database-url", dsn)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "movement_callback_outbox: 2" in dry.stdout
    assert "notification_messages: 2" in dry.stdout
    assert "notifications: 2" in dry.stdout
    done = await run_qtg("prune", "--only", "outboxes", "--batch-size", "1", "--database-url", dsn)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "movement_callback_outbox: 2" in done.stdout
    assert "notification_messages: 2" in done.stdout
    assert "notifications: 2" in done.stdout
    left = {r[0] for r in sql(dsn, "SELECT id FROM movement_callback_outbox")}
    assert left == {ids["pending_old"], ids["sent_young"]}
    left = {r[0] for r in sql(dsn, "SELECT id FROM notification_messages")}
    assert left == {messages["m_pending"], messages["m_sent_young"]}
    left = {r[0] for r in sql(dsn, "SELECT id FROM notifications")}
    assert left == {notes["n_open"], notes["n_unsent"], notes["n_young"], notes["n_unrouted"]}
    deliveries = {r[0] for r in sql(dsn, "SELECT notification_id FROM notification_deliveries")}
    assert deliveries == {notes["n_unsent"], notes["n_young"]}


# ---------------------------------------------------------------- heartbeats


async def test_heartbeats_of_dead_processes_go_live_and_slow_ones_stay(dsn: str) -> None:
    def beat(worker: str, instance: str, interval: float, age_days: float) -> None:
        sql(
            dsn,
            "INSERT INTO worker_heartbeats (network_class, worker_name, worker_group, status,"
            " instance_id, host, pid, interval_seconds, updated_at) VALUES ('default', %s,"
            " 'core', 'running', %s, 'h', 1, %s, now() - make_interval(days => %s))",
            (worker, instance, interval, age_days),
            replica=True,
        )

    beat("node_dispatcher", "dead-a", 1.0, 8)
    beat("node_observer", "dead-a", 1.0, 8)
    beat("node_dispatcher", "live-b", 1.0, 0)
    beat("weekly_report", "slow-c", 86_400.0, 8)  # beats daily: 8 days < 10 intervals
    done = await run_qtg("prune", "--only", "heartbeats", "--database-url", dsn)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "worker_heartbeats: 2" in done.stdout
    left = sorted(r[0] for r in sql(dsn, "SELECT instance_id FROM worker_heartbeats"))
    assert left == ["live-b", "slow-c"]


# ---------------------------------------------------------------- audit


def old_facts(dsn: str, n: int, days: float, start: int = 0) -> None:
    """Audit facts that happened `days` ago (occurred_at is hashed: old from birth)."""
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        for i in range(start, start + n):
            conn.execute(
                "INSERT INTO audit_outbox (actor, action, object_type, object_id, detail,"
                " occurred_at) VALUES ('user:old', 'thing.old', 'thing', %s, %s,"
                " now() - make_interval(days => %s))",
                (str(i), json.dumps({"n": i, "note": "é", "f": 1.5}), days),
            )
        conn.commit()


async def promote_all(db: Database, keys: Any) -> None:
    while await promote_pending(db, keys=keys):
        pass


def policy(tmp_path: Path, **overrides: Any) -> RetentionPolicy:
    values: dict[str, Any] = {
        "events_days": 90.0,
        "outbox_days": 30.0,
        "heartbeat_seconds": 7 * 86_400.0,
        "audit_days": 365.0,
        "batch_size": 7,
        "audit_archive_dir": tmp_path / "archive",
    }
    values.update(overrides)
    return RetentionPolicy(**values)


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
async def test_audit_archive_then_prune_keeps_the_chain_verifiable(
    db: Database, dsn: str, tmp_path: Path, keyed: bool
) -> None:
    key = KEY if keyed else None
    keys = audit_keys(Settings.from_env({"MG_AUDIT_HMAC_KEY": KEY})) if keyed else None
    old_facts(dsn, 30, days=400)
    await write_facts(db, 12)  # recent
    await promote_all(db, keys)
    ids = [r[0] for r in sql(dsn, "SELECT id FROM audit_events ORDER BY id")]
    before_cp = await take_checkpoint(db, keys) if keys is not None else None
    assert before_cp is None or before_cp["count"] == 42

    dry = await run_qtg(
        "prune",
        "--dry-run",
        "--only",
        "audit",
        "--audit-archive-dir",
        str(tmp_path / "archive"),
        "--database-url",
        dsn,
        key=key,
    )
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "audit_events: 30" in dry.stdout
    assert count(dsn, "SELECT count(*) FROM audit_events") == 42

    done = await run_qtg(
        "prune",
        "--only",
        "audit",
        "--batch-size",
        "4",
        "--audit-archive-dir",
        str(tmp_path / "archive"),
        "--database-url",
        dsn,
        key=key,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "audit_events: 30" in done.stdout
    remaining = [r[0] for r in sql(dsn, "SELECT id FROM audit_events ORDER BY id")]
    assert remaining == ids[30:]
    files = sorted((tmp_path / "archive").glob("audit-*.jsonl"))
    assert len(files) == 1 and f"audit: {files[0]}".replace("audit: ", "") in done.stdout
    # the first remaining row chains to the archived head
    anchor = sql(dsn, "SELECT head_id, head_hash, count FROM audit_archives")
    first_prev = sql(dsn, "SELECT prev_hash FROM audit_events WHERE id = %s", (ids[30],))[0][0]
    assert anchor == [(ids[29], first_prev, 30)]

    verified = await run_qtg("audit", "verify", "--database-url", dsn, key=key)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "OK, 12 audit events verified" in verified.stdout
    assert "30 earlier events archived" in verified.stdout
    offline = await run_qtg("audit", "verify-archive", str(files[0]), key=key)
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert f"OK, 30 audit events verified from the genesis hash up to id {ids[29]}" in (
        offline.stdout
    )
    if before_cp is not None:  # a checkpoint taken before the prune still verifies
        cp = tmp_path / "before.json"
        cp.write_text(json.dumps(before_cp))
        against = await run_qtg(
            "audit", "verify", "--checkpoint", str(cp), "--database-url", dsn, key=key
        )
        assert against.returncode == 0, against.stdout + against.stderr

    # the chain goes on; a second archive continues the first; both files verify together
    await write_facts(db, 5, start=100)
    await promote_all(db, keys)
    result = await prune(db, policy(tmp_path, audit_days=0.0), keys=keys, parts=("audit",))
    assert result.counts["audit_events"] == 12 + 5 - 1  # everything but the head
    assert count(dsn, "SELECT count(*) FROM audit_events") == 1
    files = sorted((tmp_path / "archive").glob("audit-*.jsonl"))
    assert len(files) == 2
    both = verify_archive_files(files, keys)
    assert both.broken is None and both.rows == 46 and both.count == 46
    check = await verify_audit_chain(db, keys=keys)
    assert check.ok and check.checked == 1 and check.archived == 46, check
    if before_cp is not None:  # its head (id 42) is archived now: checked against the anchor
        assert before_cp["head_id"] < count(dsn, "SELECT min(id) FROM audit_events")
        assert (await verify_audit_chain(db, keys=keys, checkpoint=before_cp)).ok
    if keys is not None:
        cp = await take_checkpoint(db, keys)
        assert cp["count"] == 47
        await write_facts(db, 2, start=200)
        await promote_all(db, keys)
        assert (await verify_audit_chain(db, keys=keys, checkpoint=cp)).ok
    # out of order (second file first) does not verify
    assert verify_archive_files(files[::-1], keys).broken is not None


async def test_audit_rows_are_kept_without_an_archive_folder(db: Database, dsn: str) -> None:
    old_facts(dsn, 5, days=400)
    await write_facts(db, 1)
    await promote_all(db, None)
    done = await run_qtg("prune", "--only", "audit", "--database-url", dsn)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "audit_events kept: no archive folder" in done.stdout
    assert count(dsn, "SELECT count(*) FROM audit_events") == 6


async def test_a_keyed_chain_is_not_archived_without_the_key(
    db: Database, dsn: str, tmp_path: Path
) -> None:
    keys = audit_keys(Settings.from_env({"MG_AUDIT_HMAC_KEY": KEY}))
    old_facts(dsn, 5, days=400)
    await write_facts(db, 1)
    await promote_all(db, keys)
    done = await run_qtg(
        "prune",
        "--only",
        "audit",
        "--audit-archive-dir",
        str(tmp_path / "a"),
        "--database-url",
        dsn,
    )
    assert done.returncode == 2
    assert "the archive written does not verify" in done.stderr
    assert "no MG_AUDIT_HMAC_KEY is configured" in done.stderr and "nothing deleted" in done.stderr
    assert count(dsn, "SELECT count(*) FROM audit_events") == 6
    assert count(dsn, "SELECT count(*) FROM audit_archives") == 0
    assert list((tmp_path / "a").iterdir()) == []


async def test_deleting_audit_rows_is_still_refused_outside_a_prune(
    db: Database, dsn: str, tmp_path: Path
) -> None:
    old_facts(dsn, 5, days=400)
    await write_facts(db, 3)
    await promote_all(db, None)
    await prune(db, policy(tmp_path), keys=None, parts=("audit",))
    ids = [r[0] for r in sql(dsn, "SELECT id FROM audit_events ORDER BY id")]
    # a row after the anchor, even with the prune's setting: refused
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        sql(dsn, "SET qtg.audit_prune = 'on'; DELETE FROM audit_events WHERE id = %s", (ids[0],))
    # the anchors themselves are append-only
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        sql(dsn, "DELETE FROM audit_archives")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        sql(dsn, "UPDATE audit_archives SET count = count + 1")


async def test_keyed_verify_refuses_a_forged_anchor_and_an_edited_archive(
    db: Database, dsn: str, tmp_path: Path
) -> None:
    keys = audit_keys(Settings.from_env({"MG_AUDIT_HMAC_KEY": KEY}))
    old_facts(dsn, 10, days=400)
    await write_facts(db, 6)
    await promote_all(db, keys)
    await prune(db, policy(tmp_path), keys=keys, parts=("audit",))
    (archive,) = sorted((tmp_path / "archive").glob("audit-*.jsonl"))
    ids = [r[0] for r in sql(dsn, "SELECT id FROM audit_events ORDER BY id")]
    assert (await verify_audit_chain(db, keys=keys)).ok

    # an attacker deletes two more rows and writes an unsigned anchor that skips them
    sql(
        dsn,
        "INSERT INTO audit_archives (head_id, head_hash, count, head_chain_version,"
        " checkpoint, archive_file, archive_sha256, rows_archived)"
        " SELECT id, row_hash, 12, 2, jsonb_build_object('head_id', id, 'head_hash', row_hash,"
        " 'count', 12, 'key_id', NULL, 'created_at', 'x'), 'f', 'x', 2"
        " FROM audit_events WHERE id = %(b)s;"
        " DELETE FROM audit_events WHERE id IN (%(a)s, %(b)s)",
        {"a": ids[0], "b": ids[1]},
        replica=True,
    )
    assert count(dsn, "SELECT count(*) FROM audit_archives") == 2
    forged = await verify_audit_chain(db, keys=keys)
    assert not forged.ok and "not signed" in (forged.reason or "")
    # without the forged anchor the same deletion is a plain break
    unkeyed_view = await verify_audit_chain(db, keys=None)
    assert not unkeyed_view.ok

    # an edited archive line does not verify offline
    lines = archive.read_text().splitlines()
    row = json.loads(lines[3])
    row["actor"] = "mallory"
    lines[3] = json.dumps(row, sort_keys=True)
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join(lines) + "\n")
    broken = await run_qtg("audit", "verify-archive", str(edited), key=KEY)
    assert broken.returncode == 1
    assert f"BROKEN at audit_events id {row['id']}" in broken.stdout


# ---------------------------------------------------------------- concurrency


async def test_a_concurrent_writer_loses_nothing(db: Database, dsn: str, tmp_path: Path) -> None:
    """Events of a live movement and audit facts written (and promoted) on other
    connections while a prune deletes in small batches all survive, and the
    chain still verifies with the rows written during the prune."""
    keys = audit_keys(Settings.from_env({"MG_AUDIT_HMAC_KEY": KEY}))
    doomed = [movement(dsn, "COMPLETED") for _ in range(40)]
    for request_id in doomed:
        age_movement(dsn, request_id, 100)
    live = movement(dsn, "EXECUTING")
    old_facts(dsn, 200, days=400)
    await promote_all(db, keys)
    live_before = len(events_of(dsn, live))

    written = {"events": 0, "facts": 0, "during": 0}
    done, started = trio.Event(), trio.Event()

    async def writer() -> None:
        async with Database(dsn, min_size=1, max_size=2) as other:
            i = 0
            while not done.is_set():
                async with other.transaction() as tx:
                    await tx.execute(RECORD_EVENT, {"id": live})
                written["events"] += 1
                await write_facts(other, 1, start=10_000 + i)
                written["facts"] += 1
                started.set()
                await promote_pending(other, keys=keys)
                if not done.is_set():
                    written["during"] += 1
                i += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        # wait until the writer is under way, then prune while it writes
        with trio.fail_after(60):
            await started.wait()
        report = await prune(db, policy(tmp_path, batch_size=3), keys=keys, parts=PARTS)
        done.set()
    await promote_all(db, keys)
    assert written["during"] > 0
    assert report.counts["audit_events"] == 200
    assert all(events_of(dsn, r) == [] for r in doomed)
    assert len(events_of(dsn, live)) == live_before + written["events"]
    facts = count(dsn, "SELECT count(*) FROM audit_events WHERE action = 'thing.do'")
    assert facts == written["facts"]
    assert count(dsn, "SELECT count(*) FROM audit_outbox") == 0
    check = await verify_audit_chain(db, keys=keys)
    assert check.ok, check
    assert check.archived == 200 and check.checked == written["facts"]


# ---------------------------------------------------------------- bad input


def test_bad_values_exit_2_naming_what_is_wrong(dsn: str) -> None:
    negative = qtg("prune", "--events-days", "-1", "--database-url", dsn)
    assert negative.returncode == 2
    assert "--events-days: must be a number of days >= 0, got -1" in negative.stderr
    word = qtg("prune", "--outbox-days", "soon", "--database-url", dsn)
    assert word.returncode == 2 and "'soon' is not a number of days" in word.stderr
    part = qtg("prune", "--only", "events,everything", "--database-url", dsn)
    assert part.returncode == 2 and "choose from outboxes, events" in part.stderr
    setting = qtg("prune", "--database-url", dsn, MG_RETENTION_EVENTS_DAYS="-3")
    assert setting.returncode == 2
    assert "MG_RETENTION_EVENTS_DAYS" in setting.stderr and "Traceback" not in setting.stderr


async def test_two_concurrent_archivers_never_anchor_overlapping_ranges(
    db: Database, dsn: str, tmp_path: Path
) -> None:
    keys = audit_keys(Settings.from_env({"MG_AUDIT_HMAC_KEY": KEY}))
    old_facts(dsn, 300, days=400)
    await write_facts(db, 20)
    await promote_all(db, keys)
    outcomes: list[str] = []

    async def archiver(days: float) -> None:
        async with Database(dsn, min_size=1, max_size=2) as own:
            try:
                await archive_audit(
                    own,
                    keys=keys,
                    older_than_days=days,
                    archive_dir=tmp_path / "archive",
                    batch_size=10,
                )
                outcomes.append("archived")
            except RetentionError as exc:
                assert "another prune archived audit rows meanwhile" in str(exc)
                outcomes.append("lost")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(archiver, 365.0)
        nursery.start_soon(archiver, 0.0)
    assert "archived" in outcomes and len(outcomes) == 2
    anchors = sql(dsn, "SELECT head_id, archive_file, count FROM audit_archives ORDER BY head_id")
    files = [Path(f) for _, f, _ in anchors]
    assert sorted(files) == sorted((tmp_path / "archive").glob("audit-*.jsonl"))
    assert list((tmp_path / "archive").glob(".*")) == []  # no temporary file left
    together = verify_archive_files(files, keys)
    assert together.broken is None and together.count == anchors[-1][2]
    check = await verify_audit_chain(db, keys=keys)
    assert check.ok and check.archived == anchors[-1][2], check
    assert check.archived + check.checked == 320
