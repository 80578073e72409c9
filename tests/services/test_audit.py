"""audit_outbox_promoter and the hash chain (reference §9, DESIGN §2 beyond)."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import trio

from qtg.db import Database, Query
from qtg.domain import audit_chain
from qtg.services.audit import SQL, promote_pending, verify_audit_chain
from qtg.services.auditing import record_audit

EVENTS = Query(
    "test/audit_events",
    "SELECT id, outbox_id, actor, action, object_type, object_id, detail, occurred_at,"
    " prev_hash, row_hash FROM audit_events ORDER BY id",
)
OUTBOX_COUNT = Query("test/outbox_count", "SELECT count(*) FROM audit_outbox")
UNLOCK_TRIGGER = Query(
    "test/unlock", "ALTER TABLE audit_events DISABLE TRIGGER audit_events_append_only"
)
EDIT_ROW = Query(
    "test/edit",
    "UPDATE audit_events SET detail = jsonb_set(detail, '{n}', '999') WHERE id = %(id)s",
)
DELETE_ROW = Query("test/delete", "DELETE FROM audit_events WHERE id = %(id)s")
REHASH_ROW = Query(
    "test/rehash",
    "UPDATE audit_events SET actor = 'mallory', row_hash = %(row_hash)s WHERE id = %(id)s",
)


async def write_facts(db: Database, n: int, *, per_tx: int = 10, start: int = 0) -> None:
    for base in range(start, start + n, per_tx):
        async with db.transaction() as tx:
            for i in range(base, min(base + per_tx, start + n)):
                await record_audit(
                    tx,
                    actor=f"user:{i % 3}",
                    action="thing.do",
                    object_type="thing",
                    object_id=str(i),
                    detail={"n": i, "note": "é ü", "nested": {"b": 1.5, "a": [1, None]}},
                )


async def test_promotes_in_id_order_exactly_once_with_valid_chain(db: Database) -> None:
    await write_facts(db, 25)
    assert await promote_pending(db, limit=10) == 10
    assert await promote_pending(db, limit=10) == 10
    assert await promote_pending(db, limit=10) == 5
    assert await promote_pending(db, limit=10) == 0
    rows = await db.fetch(EVENTS)
    assert await db.fetchval(OUTBOX_COUNT) == 0
    assert [r["object_id"] for r in rows] == [str(i) for i in range(25)]
    assert [r["outbox_id"] for r in rows] == sorted(r["outbox_id"] for r in rows)
    assert rows[0]["prev_hash"] == audit_chain.GENESIS_HASH
    for before, after in itertools.pairwise(rows):
        assert after["prev_hash"] == before["row_hash"]
    assert rows[3]["detail"] == {"n": 3, "note": "é ü", "nested": {"a": [1, None], "b": 1.5}}
    result = await verify_audit_chain(db, page_size=7)  # several pages
    assert result.ok and result.checked == 25 and result.first_broken_id is None


async def test_two_concurrent_promoters_never_interleave_the_chain(dsn: str) -> None:
    """Two runtimes (separate pools) race over 300 committed facts in small batches."""
    async with Database(dsn, max_size=4) as db_a, Database(dsn, max_size=4) as db_b:
        await write_facts(db_a, 300, per_tx=50)
        promoted = {"a": 0, "b": 0}

        async def promoter(name: str, db: Database) -> None:
            while await db.fetchval(OUTBOX_COUNT):
                promoted[name] += await promote_pending(db, limit=7)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(promoter, "a", db_a)
                nursery.start_soon(promoter, "b", db_b)
        rows = await db_a.fetch(EVENTS)
    assert promoted["a"] + promoted["b"] == 300
    assert len(rows) == 300
    assert [r["object_id"] for r in rows] == [str(i) for i in range(300)]
    assert len({r["outbox_id"] for r in rows}) == 300
    broken, _, checked = audit_chain.verify_chain(rows)
    assert broken is None and checked == 300


async def test_promotion_under_concurrent_writers_is_exactly_once(dsn: str) -> None:
    """Writers commit while two promoters run: every fact lands once, the chain holds."""
    async with Database(dsn, max_size=6) as db_a, Database(dsn, max_size=6) as db_b:
        done = trio.Event()

        async def writer(start: int) -> None:
            await write_facts(db_a, 60, per_tx=3, start=start)

        async def promoter(db: Database) -> None:
            while not done.is_set() or await db.fetchval(OUTBOX_COUNT):
                await promote_pending(db, limit=5)

        with trio.fail_after(30):
            async with trio.open_nursery() as outer:
                outer.start_soon(promoter, db_a)
                outer.start_soon(promoter, db_b)
                async with trio.open_nursery() as writers:
                    for start in (0, 1000, 2000):
                        writers.start_soon(writer, start)
                done.set()
        rows = await db_a.fetch(EVENTS)
    assert sorted(int(r["object_id"]) for r in rows) == sorted(
        [*range(60), *range(1000, 1060), *range(2000, 2060)]
    )
    broken, _, _ = audit_chain.verify_chain(rows)
    assert broken is None


async def test_pass_returns_zero_while_another_promoter_holds_the_chain(db: Database) -> None:
    await write_facts(db, 3)
    async with db.transaction() as other:
        assert await other.fetchval(SQL.try_lock) is True
        assert await promote_pending(db) == 0
        assert await db.fetchval(OUTBOX_COUNT) == 3
    assert await promote_pending(db) == 3


async def test_audit_events_refuse_update_and_delete(db: Database) -> None:
    await write_facts(db, 1)
    await promote_pending(db)
    row_id = (await db.fetch(EVENTS))[0]["id"]
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
        await db.execute(EDIT_ROW, {"id": row_id})
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
        await db.execute(DELETE_ROW, {"id": row_id})


async def _tampered_chain(db: Database) -> list[int]:
    await write_facts(db, 6)
    await promote_pending(db)
    assert (await verify_audit_chain(db)).ok
    await db.execute(UNLOCK_TRIGGER)
    return [r["id"] for r in await db.fetch(EVENTS)]


async def test_edited_row_is_named(db: Database) -> None:
    ids = await _tampered_chain(db)
    await db.execute(EDIT_ROW, {"id": ids[3]})
    result = await verify_audit_chain(db, page_size=2)
    assert not result.ok
    assert result.first_broken_id == ids[3]
    assert result.checked == 3
    assert "edited" in (result.reason or "")


async def test_deleted_row_breaks_at_its_successor(db: Database) -> None:
    ids = await _tampered_chain(db)
    await db.execute(DELETE_ROW, {"id": ids[2]})
    result = await verify_audit_chain(db)
    assert not result.ok and result.first_broken_id == ids[3]
    assert "prev_hash" in (result.reason or "")


async def test_edited_and_rehashed_row_breaks_at_its_successor(db: Database) -> None:
    """Re-computing the edited row's own hash does not help: the next row no longer links."""
    ids = await _tampered_chain(db)
    rows = await db.fetch(EVENTS)
    forged = dict(rows[1], actor="mallory")
    await db.execute(
        REHASH_ROW, {"id": ids[1], "row_hash": audit_chain.row_hash(rows[1]["prev_hash"], forged)}
    )
    result = await verify_audit_chain(db)
    assert not result.ok and result.first_broken_id == ids[2]


def test_row_hash_depends_on_the_instant_not_the_time_zone() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    instant = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    row = {
        "outbox_id": 1,
        "actor": "a",
        "action": "x",
        "object_type": "t",
        "object_id": "1",
        "detail": {"b": 1, "a": 2},
    }
    here = audit_chain.row_hash("0" * 64, {**row, "occurred_at": instant})
    there = audit_chain.row_hash(
        "0" * 64, {**row, "occurred_at": instant.astimezone(timezone(timedelta(hours=9)))}
    )
    assert here == there
    assert here != audit_chain.row_hash("0" * 64, {**row, "occurred_at": instant, "actor": "b"})
    assert here != audit_chain.row_hash("1" * 64, {**row, "occurred_at": instant})


async def _qtg_audit_verify(dsn: str) -> subprocess.CompletedProcess[str]:
    return await trio.to_thread.run_sync(
        lambda: subprocess.run(
            [str(Path(sys.executable).parent / "qtg"), "audit", "verify", "--database-url", dsn],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    )


async def test_cli_verify_reports_ok_then_names_the_tampered_row(db: Database, dsn: str) -> None:
    await write_facts(db, 4)
    await promote_pending(db)
    ok = await _qtg_audit_verify(dsn)
    assert ok.returncode == 0, ok.stderr
    assert "OK, 4 audit events verified" in ok.stdout

    await db.execute(UNLOCK_TRIGGER)
    ids = [r["id"] for r in await db.fetch(EVENTS)]
    await db.execute(EDIT_ROW, {"id": ids[1]})
    broken = await _qtg_audit_verify(dsn)
    assert broken.returncode == 1, broken.stderr
    assert f"BROKEN at audit_events id {ids[1]}:" in broken.stdout
