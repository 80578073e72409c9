"""Audit anchoring (issue 17 item 4): the keyed chain and checkpoints against real attacks.

Every attack is direct SQL on its own connection with
`SET session_replication_role = replica`, which skips the append-only trigger
exactly as a database owner could. Each is run against `qtg audit verify
--checkpoint` (the real CLI, as a subprocess) or the same service function.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio
from runtime.rt_procs import RuntimeProcess, base_env, query, wait_until
from services.test_audit import OUTBOX_COUNT, write_facts

from qtg.config import ConfigError, Settings
from qtg.db import Database
from qtg.domain import audit_chain
from qtg.services.audit import (
    adopt_unkeyed_chain,
    audit_keys,
    promote_pending,
    take_checkpoint,
    verify_audit_chain,
)

KEY = "k" * 16 + "-audit-test-key-0123456789"  # 42 bytes
OLD_KEY = "o" * 40
KEY_ID = audit_chain.key_id(KEY.encode())


def keys_for(key: str = KEY, previous: str | None = None):
    env = {"MG_AUDIT_HMAC_KEY": key}
    if previous:
        env["MG_AUDIT_HMAC_PREVIOUS_KEYS"] = previous
    return audit_keys(Settings.from_env(env))


def attack(dsn: str, *statements: tuple[str, Any]) -> None:
    """Run statements as an attacker who bypasses triggers (one transaction)."""
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        conn.execute("SET session_replication_role = replica")
        for text, params in statements:
            conn.execute(text, params)  # type: ignore[arg-type]
        conn.commit()


def rows(dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        cur = conn.cursor(row_factory=psycopg.rows.dict_row)
        return cur.execute(
            "SELECT id, outbox_id, actor, action, object_type, object_id, detail, occurred_at,"
            " prev_hash, row_hash, chain_version, key_id FROM audit_events ORDER BY id"
        ).fetchall()


def qtg(*args: str, key: str | None = KEY) -> subprocess.CompletedProcess[str]:
    env = base_env()
    if key is not None:
        env["MG_AUDIT_HMAC_KEY"] = key
    return subprocess.run(
        [str(Path(sys.executable).parent / "qtg"), "audit", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


async def run_qtg(*args: str, key: str | None = KEY) -> subprocess.CompletedProcess[str]:
    return await trio.to_thread.run_sync(lambda: qtg(*args, key=key))


async def chained(db: Database, n: int, start: int = 0) -> None:
    await write_facts(db, n, start=start)
    assert await promote_pending(db, keys=keys_for()) == n


async def cli_checkpoint(dsn: str, tmp_path: Path) -> Path:
    out = tmp_path / "checkpoint.json"
    made = await run_qtg("checkpoint", "--out", str(out), "--database-url", dsn)
    assert made.returncode == 0, made.stdout + made.stderr
    return out


async def cli_verify(dsn: str, checkpoint: Path | None) -> subprocess.CompletedProcess[str]:
    extra = ["--checkpoint", str(checkpoint)] if checkpoint else []
    return await run_qtg("verify", "--database-url", dsn, *extra)


# ---------------------------------------------------------------- control


async def test_control_untouched_chain_extended_after_checkpoint_verifies(
    db: Database, dsn: str, tmp_path: Path
) -> None:
    await chained(db, 6)
    cp = await cli_checkpoint(dsn, tmp_path)
    doc = json.loads(cp.read_text())
    assert doc["count"] == 6 and doc["key_id"] == KEY_ID
    assert KEY not in cp.read_text()
    await chained(db, 5, start=6)  # legitimate events after the checkpoint
    ok = await cli_verify(dsn, cp)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"OK, 11 audit events verified, extending checkpoint head id {doc['head_id']}" in (
        ok.stdout
    )
    assert all(r["chain_version"] == 2 and r["key_id"] == KEY_ID for r in rows(dsn))


# ---------------------------------------------------------------- the four attacks


async def test_attack_a_delete_the_tail(db: Database, dsn: str, tmp_path: Path) -> None:
    await chained(db, 6)
    cp = await cli_checkpoint(dsn, tmp_path)
    ids = [r["id"] for r in rows(dsn)]
    attack(dsn, ("DELETE FROM audit_events WHERE id >= %(id)s", {"id": ids[4]}))
    # the chain alone still adds up: only the checkpoint can tell
    assert (await cli_verify(dsn, None)).returncode == 0
    broken = await cli_verify(dsn, cp)
    assert broken.returncode == 1
    assert f"BROKEN at audit_events id {ids[3]}: truncated below the checkpoint" in broken.stdout
    assert f"the checkpoint's head is id {ids[5]}" in broken.stdout


async def test_attack_a2_delete_the_tail_then_append_legitimately(
    db: Database, dsn: str, tmp_path: Path
) -> None:
    """Deleting the head and letting the runtime go on must not hide the deletion."""
    await chained(db, 6)
    cp = await cli_checkpoint(dsn, tmp_path)
    ids = [r["id"] for r in rows(dsn)]
    attack(dsn, ("DELETE FROM audit_events WHERE id >= %(id)s", {"id": ids[4]}))
    await chained(db, 3, start=6)
    broken = await cli_verify(dsn, cp)
    assert broken.returncode == 1
    assert f"the checkpoint's head id {ids[5]} is missing" in broken.stdout


async def test_attack_b_delete_everything(db: Database, dsn: str, tmp_path: Path) -> None:
    await chained(db, 6)
    cp = await cli_checkpoint(dsn, tmp_path)
    attack(dsn, ("DELETE FROM audit_events", None))
    empty = await cli_verify(dsn, None)
    assert empty.returncode == 0 and "WARNING: the audit log is empty" in empty.stderr
    broken = await cli_verify(dsn, cp)
    assert broken.returncode == 1
    assert "BROKEN at the table: empty table but the checkpoint says 6 rows" in broken.stdout


def _rehash_from(dsn: str, index: int, *, legacy: bool) -> list[dict[str, Any]]:
    """Edit row `index` and re-hash it and every later row with the unkeyed algorithm."""
    table = rows(dsn)
    table[index]["actor"] = "mallory"
    prev = table[index - 1]["row_hash"] if index else audit_chain.GENESIS_HASH
    statements = []
    for row in table[index:]:
        row["prev_hash"], row["row_hash"] = prev, audit_chain.row_hash(prev, row)
        prev = row["row_hash"]
        statements.append(
            (
                "UPDATE audit_events SET actor = %(actor)s, prev_hash = %(prev_hash)s,"
                " row_hash = %(row_hash)s, chain_version = %(v)s, key_id = %(k)s"
                " WHERE id = %(id)s",
                {
                    **row,
                    "v": 1 if legacy else row["chain_version"],
                    "k": None if legacy else row["key_id"],
                },
            )
        )
    # row_hash is UNIQUE: a re-hash can collide with nothing, so one pass is fine
    attack(dsn, *statements)
    return table


@pytest.mark.parametrize("legacy", [False, True], ids=["keep-keyed-label", "relabel-legacy"])
async def test_attack_c_edit_and_rehash_the_rest_without_the_key(
    db: Database, dsn: str, tmp_path: Path, legacy: bool
) -> None:
    await chained(db, 6)
    cp = await cli_checkpoint(dsn, tmp_path)
    table = _rehash_from(dsn, 2, legacy=legacy)
    broken = await cli_verify(dsn, None)  # caught even without the checkpoint
    assert broken.returncode == 1
    expected = "forged row: an unkeyed (legacy) row" if legacy else "forged row (bad HMAC)"
    assert f"BROKEN at audit_events id {table[2]['id']}: {expected}" in broken.stdout
    assert (await cli_verify(dsn, cp)).returncode == 1


async def test_attack_c_rewrite_whole_history_as_legacy(
    db: Database, dsn: str, tmp_path: Path
) -> None:
    """Re-hashing from the genesis as an all-legacy chain: a self-consistent legacy
    chain, but with a key configured it has no keyed row (issue 26); the checkpoint
    names the rewritten head."""
    await chained(db, 6)
    cp = await cli_checkpoint(dsn, tmp_path)
    table = _rehash_from(dsn, 0, legacy=True)
    no_keyed = await cli_verify(dsn, None)
    assert no_keyed.returncode == 1 and "no keyed row" in no_keyed.stdout
    broken = await cli_verify(dsn, cp)
    assert broken.returncode == 1
    assert f"BROKEN at audit_events id {table[5]['id']}: hash mismatch" in broken.stdout


@pytest.mark.parametrize("label", ["legacy", "keyed-with-guessed-key"])
async def test_attack_d_append_a_correctly_hashed_forged_row(
    db: Database, dsn: str, tmp_path: Path, label: str
) -> None:
    await chained(db, 6)
    cp = await cli_checkpoint(dsn, tmp_path)
    head = rows(dsn)[-1]
    forged = {**head, "outbox_id": 10_000, "actor": "mallory", "detail": {"n": 1}}
    if label == "legacy":
        forged.update(
            chain_version=1, key_id=None, row_hash=audit_chain.row_hash(head["row_hash"], forged)
        )
    else:
        forged.update(
            chain_version=2,
            key_id=KEY_ID,  # the key id is public; the key is not
            row_hash=audit_chain.keyed_row_hash(b"g" * 32, head["row_hash"], forged),
        )
    attack(
        dsn,
        (
            "INSERT INTO audit_events (outbox_id, actor, action, object_type, object_id, detail,"
            " occurred_at, prev_hash, row_hash, chain_version, key_id) VALUES (%(outbox_id)s,"
            " %(actor)s, %(action)s, %(object_type)s, %(object_id)s, %(detail)s::jsonb,"
            " %(occurred_at)s, %(prev)s, %(row_hash)s, %(chain_version)s, %(key_id)s)",
            {**forged, "detail": json.dumps(forged["detail"]), "prev": head["row_hash"]},
        ),
    )
    forged_id = rows(dsn)[-1]["id"]
    for checkpoint in (None, cp):
        broken = await cli_verify(dsn, checkpoint)
        assert broken.returncode == 1
        assert f"BROKEN at audit_events id {forged_id}: forged row" in broken.stdout


# ---------------------------------------------------------------- legacy, rotation, checkpoint


async def test_legacy_rows_still_verify_and_the_keyed_chain_continues_from_them(
    db: Database, dsn: str, tmp_path: Path
) -> None:
    await write_facts(db, 4)
    assert await promote_pending(db) == 4  # written before a key was configured
    # the operator vouches for the unkeyed past (issue 26): one keyed adoption row
    assert await adopt_unkeyed_chain(db, keys_for(), actor="test") is not None
    await chained(db, 3, start=4)
    table = rows(dsn)
    assert [r["chain_version"] for r in table] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert table[4]["prev_hash"] == table[3]["row_hash"]
    assert (await verify_audit_chain(db, keys=keys_for())).ok
    cp = await take_checkpoint(db, keys_for())
    assert (await verify_audit_chain(db, keys=keys_for(), checkpoint=cp)).checked == 8
    no_key = await verify_audit_chain(db)
    assert not no_key.ok and "no MG_AUDIT_HMAC_KEY is configured" in (no_key.reason or "")


async def test_key_rotation_verifies_with_previous_keys(db: Database) -> None:
    await write_facts(db, 3)
    await promote_pending(db, keys=keys_for(OLD_KEY))
    old_cp = await take_checkpoint(db, keys_for(OLD_KEY))
    await write_facts(db, 3, start=3)
    await promote_pending(db, keys=keys_for(KEY, previous=OLD_KEY))
    rotated = keys_for(KEY, previous=OLD_KEY)
    assert (await verify_audit_chain(db, keys=rotated, checkpoint=old_cp)).checked == 6
    without_old = await verify_audit_chain(db, keys=keys_for(KEY))
    assert not without_old.ok
    assert (
        without_old.reason
        == f"signed with another key (key id {audit_chain.key_id(OLD_KEY.encode())})"
    )


async def test_an_edited_checkpoint_is_refused(db: Database) -> None:
    await chained(db, 3)
    cp = await take_checkpoint(db, keys_for())
    result = await verify_audit_chain(db, keys=keys_for(), checkpoint={**cp, "count": 2})
    assert not result.ok and "checkpoint mac does not verify" in (result.reason or "")


async def test_two_keyed_promoters_racing_keep_one_linear_chain(dsn: str) -> None:
    async with Database(dsn, max_size=4) as db_a, Database(dsn, max_size=4) as db_b:
        await write_facts(db_a, 200, per_tx=50)

        async def promoter(db: Database) -> None:
            while await db.fetchval(OUTBOX_COUNT):
                await promote_pending(db, limit=7, keys=keys_for())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(promoter, db_a)
            nursery.start_soon(promoter, db_b)
        result = await verify_audit_chain(db_a, keys=keys_for())
        assert result.ok and result.checked == 200


# ---------------------------------------------------------------- settings, secrecy


def test_short_unreadable_or_doubled_keys_stop_start_up(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^MG_AUDIT_HMAC_KEY: .*at least 32 bytes, got 5$"):
        Settings.from_env({"MG_AUDIT_HMAC_KEY": "short"})
    with pytest.raises(ConfigError, match=r"^MG_AUDIT_HMAC_KEY_FILE: cannot read"):
        Settings.from_env({"MG_AUDIT_HMAC_KEY_FILE": str(tmp_path / "missing")})
    short = tmp_path / "short"
    short.write_text("tiny-secret\n")
    with pytest.raises(ConfigError, match=r"^MG_AUDIT_HMAC_KEY_FILE: ") as info:
        Settings.from_env({"MG_AUDIT_HMAC_KEY_FILE": str(short)})
    assert "tiny-secret" not in str(info.value)
    good = tmp_path / "key"
    good.write_text(KEY + "\n")
    assert audit_keys(Settings.from_env({"MG_AUDIT_HMAC_KEY_FILE": str(good)})).current_id == KEY_ID
    with pytest.raises(ConfigError, match="both set"):
        Settings.from_env({"MG_AUDIT_HMAC_KEY": KEY, "MG_AUDIT_HMAC_KEY_FILE": str(good)})
    assert Settings.from_env({"MG_AUDIT_HMAC_KEY": KEY}).redacted()["MG_AUDIT_HMAC_KEY"] == "***"


@pytest.mark.slow
def test_the_key_never_reaches_the_runtime_log(dsn: str) -> None:
    """A real runtime, DEBUG logs, keyed promotion happening: the key is in no line."""
    proc = RuntimeProcess.launcher(
        base_env(MG_DATABASE_URL=dsn, MG_AUDIT_HMAC_KEY=KEY, MG_LOG_LEVEL="DEBUG")
    )
    try:
        proc.wait_ready()
        query(
            dsn,
            "INSERT INTO audit_outbox (actor, action, object_type, object_id)"
            " VALUES ('t', 'a', 'o', '1')",
        )
        wait_until(
            lambda: query(dsn, "SELECT 1 FROM audit_events WHERE key_id = %s", (KEY_ID,)),
            timeout=30,
            what="a keyed audit event",
        )
        proc.send(signal.SIGTERM)
        assert proc.wait_exit(10) == 0
    finally:
        proc.kill()
    text = "\n".join(proc.lines)
    assert text.strip()  # the runtime did log
    assert KEY not in text and KEY[:20] not in text


# ---------------------------------------------------------------- periodic checkpoints


async def test_promoter_publishes_checkpoints_to_the_log_and_a_jsonl_file(
    db: Database, dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch
) -> None:
    from qtg.services import audit as audit_service
    from qtg.services.context import ServiceContext

    monkeypatch.setattr(audit_service, "_last_checkpoint_at", None)
    settings = Settings.from_env(
        {"MG_AUDIT_HMAC_KEY": KEY, "MG_AUDIT_CHECKPOINT_DIR": str(tmp_path / "cp")}
    )
    ctx = ServiceContext(db=db, settings=settings, providers=None)  # type: ignore[arg-type]
    await write_facts(db, 4)
    with caplog.at_level("INFO", logger="qtg.services.audit"):
        assert await audit_service.promote_audit_outbox(ctx) == 4
        await write_facts(db, 2, start=4)
        assert await audit_service.promote_audit_outbox(ctx) == 2  # within the hour: no new one
    published = [r for r in caplog.records if r.getMessage().startswith("audit checkpoint ")]
    assert len(published) == 1 and published[0].audit_checkpoint["count"] == 4
    assert KEY not in caplog.text
    jsonl = tmp_path / "cp" / audit_service.CHECKPOINT_FILE_NAME
    assert [json.loads(line) for line in jsonl.read_text().splitlines()] == [
        published[0].audit_checkpoint
    ]
    assert (await cli_verify(dsn, jsonl)).returncode == 0
    attack(dsn, ("DELETE FROM audit_events WHERE id > %(id)s", {"id": rows(dsn)[1]["id"]}))
    broken = await cli_verify(dsn, jsonl)
    assert broken.returncode == 1 and "truncated below the checkpoint" in broken.stdout
