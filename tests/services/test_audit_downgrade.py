"""Audit downgrade (issue 26): with a key configured, an unkeyed chain is not proof.

The attack from the issue: edit a row and re-hash the *whole* chain as legacy
unkeyed rows. Before, `qtg audit verify` said OK (only `--checkpoint` caught
it). Now, with MG_AUDIT_HMAC_KEY set, a chain with no keyed row fails verify,
the runtime refuses to extend it, and `qtg audit adopt` is the explicit way to
continue a genuinely old unkeyed chain. The embedded database generates and
keeps its own key, so its default is keyed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from runtime.rt_procs import RuntimeProcess, base_env
from services.test_audit import write_facts
from services.test_audit_anchoring import (
    KEY,
    KEY_ID,
    _rehash_from,
    attack,
    chained,
    keys_for,
    rows,
    run_qtg,
)

from qtg.config import Settings
from qtg.db import Database
from qtg.services.audit import (
    EMBEDDED_KEY_FILE_NAME,
    UnkeyedChainError,
    audit_keys,
    check_chain_extendable,
    promote_pending,
    verify_audit_chain,
    with_embedded_key,
)


async def verify(dsn: str, key: str | None = KEY):
    return await run_qtg("verify", "--database-url", dsn, key=key)


async def test_the_issue_attack_rewrite_everything_as_legacy_fails_verify(
    db: Database, dsn: str
) -> None:
    await chained(db, 6)
    table = _rehash_from(dsn, 0, legacy=True)  # row 0 edited, every row re-hashed unkeyed
    assert table[0]["actor"] == "mallory"
    assert all(r["chain_version"] == 1 for r in rows(dsn))
    broken = await verify(dsn)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert f"BROKEN at audit_events id {table[5]['id']}: no keyed row" in broken.stdout
    assert "all 6 rows are unkeyed" in broken.stdout
    # without a key the same table is only a self-consistent legacy chain (and says so)
    unkeyed = await verify(dsn, key=None)
    assert unkeyed.returncode == 0 and "no MG_AUDIT_HMAC_KEY configured" in unkeyed.stderr


async def test_a_chain_that_loses_its_keyed_rows_fails_verify(db: Database, dsn: str) -> None:
    await write_facts(db, 4)
    assert await promote_pending(db) == 4  # legacy rows from before the key
    adopted = await run_qtg("adopt", "--database-url", dsn)
    assert adopted.returncode == 0, adopted.stdout + adopted.stderr
    await chained(db, 3, start=4)
    assert (await verify(dsn)).returncode == 0
    attack(dsn, ("DELETE FROM audit_events WHERE chain_version = 2", None))
    assert [r["chain_version"] for r in rows(dsn)] == [1, 1, 1, 1]
    broken = await verify(dsn)
    assert broken.returncode == 1
    assert "no keyed row" in broken.stdout


async def test_a_keyed_promoter_refuses_to_extend_an_unkeyed_head(db: Database) -> None:
    await write_facts(db, 3)
    assert await promote_pending(db) == 3
    await write_facts(db, 2, start=3)
    with pytest.raises(UnkeyedChainError, match=r"newest row \(audit_events id \d+\) is unkeyed"):
        await promote_pending(db, keys=keys_for())
    with pytest.raises(UnkeyedChainError, match="qtg audit adopt"):
        await check_chain_extendable(db, keys_for())
    # nothing was appended: the two facts wait in the outbox
    assert len(await _events(db)) == 3
    await check_chain_extendable(db, None)  # an unkeyed runtime is not affected


async def test_an_unkeyed_promoter_refuses_to_extend_a_keyed_head(db: Database) -> None:
    """The downgrade the other way: a runtime started without the key (a lost setting)
    must not append legacy rows after keyed ones."""
    await chained(db, 2)  # keyed rows
    await write_facts(db, 2, start=2)
    with pytest.raises(UnkeyedChainError, match="MG_AUDIT_HMAC_KEY or MG_AUDIT_HMAC_KEY_FILE"):
        await promote_pending(db)
    with pytest.raises(UnkeyedChainError, match=f"keyed with key id '{KEY_ID}'"):
        await check_chain_extendable(db, None)
    assert len(await _events(db)) == 2  # the two facts wait in the outbox
    await check_chain_extendable(db, keys_for())  # the keyed runtime goes on
    assert await promote_pending(db, keys=keys_for()) == 2


async def _events(db: Database) -> list[dict]:
    from services.test_audit import EVENTS

    return await db.fetch(EVENTS)


async def test_adopt_continues_an_unkeyed_chain_keyed_and_verify_passes(
    db: Database, dsn: str
) -> None:
    await write_facts(db, 4)
    assert await promote_pending(db) == 4
    before = await verify(dsn)
    assert before.returncode == 1 and "no keyed row" in before.stdout
    adopted = await run_qtg("adopt", "--database-url", dsn)
    assert adopted.returncode == 0, adopted.stdout + adopted.stderr
    table = rows(dsn)
    assert f"adopted the unkeyed chain up to audit_events id {table[3]['id']}" in adopted.stdout
    assert table[4]["action"] == "audit.chain_adopted"
    assert table[4]["chain_version"] == 2 and table[4]["key_id"] == KEY_ID
    assert table[4]["detail"]["unkeyed_head_hash"] == table[3]["row_hash"]
    await chained(db, 2, start=4)  # the runtime's keyed promoter goes on from it
    ok = await verify(dsn)
    assert ok.returncode == 0 and "OK, 7 audit events verified" in ok.stdout
    again = await run_qtg("adopt", "--database-url", dsn)
    assert again.returncode == 0 and "nothing to adopt" in again.stdout
    assert (await verify_audit_chain(db, keys=keys_for())).ok


@pytest.mark.slow
def test_a_keyed_runtime_will_not_start_on_an_unkeyed_chain(dsn: str, procs) -> None:
    import trio

    async def legacy() -> None:
        async with Database(dsn, min_size=1, max_size=2) as db:
            await write_facts(db, 2)
            await promote_pending(db)

    trio.run(legacy)
    proc = RuntimeProcess.launcher(base_env(MG_DATABASE_URL=dsn, MG_AUDIT_HMAC_KEY=KEY))
    procs.append(proc)
    assert proc.wait_exit(60) == 1
    log = proc.log()
    assert "qtg runtime cannot start" in log
    assert "is unkeyed" in log and "qtg audit adopt" in log
    assert KEY not in log


@pytest.mark.slow
def test_a_runtime_without_the_key_will_not_start_on_a_keyed_chain(dsn: str, procs) -> None:
    import trio

    async def keyed() -> None:
        async with Database(dsn, min_size=1, max_size=2) as db:
            await chained(db, 2)

    trio.run(keyed)
    proc = RuntimeProcess.launcher(base_env(MG_DATABASE_URL=dsn))
    procs.append(proc)
    assert proc.wait_exit(60) == 1
    log = proc.log()
    assert "qtg runtime cannot start" in log
    assert "the audit chain is keyed" in log and "MG_AUDIT_HMAC_KEY" in log


def test_embedded_settings_get_a_generated_0600_key(tmp_path: Path) -> None:
    data = tmp_path / "qtg-data"
    settings = Settings.from_env({"MG_EMBEDDED_DATA_DIR": str(data)})
    assert audit_keys(settings) is None
    assert with_embedded_key(settings, create=False) is settings  # commands never create one
    keyed = with_embedded_key(settings, create=True)
    path = data / EMBEDDED_KEY_FILE_NAME
    assert keyed.audit_hmac_key_file == str(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    keys = audit_keys(keyed)
    assert keys is not None
    # kept: a second start uses the same key, and a command finds it
    assert audit_keys(with_embedded_key(settings, create=True)).current_id == keys.current_id
    assert audit_keys(with_embedded_key(settings, create=False)).current_id == keys.current_id
    # an external database, or a configured key, is left alone
    external = settings.replace(database_url="postgresql:///x")
    assert with_embedded_key(external, create=True) is external
    own = settings.replace(audit_hmac_key=KEY)
    assert with_embedded_key(own, create=True) is own


@pytest.mark.slow
def test_embedded_seed_demo_runtime_is_keyed_by_default(tmp_path: Path, procs) -> None:
    import signal
    import subprocess
    import sys

    from runtime.rt_procs import private_dir

    with private_dir("qtg-audit-key-") as root:
        data = root / "qtg-data"
        env = base_env(MG_EMBEDDED_DATA_DIR=str(data), MG_DB_POOL_MAX_SIZE="20")
        proc = RuntimeProcess.launcher(env, "--seed-demo")
        procs.append(proc)
        proc.wait_ready(90)
        key_file = data / EMBEDDED_KEY_FILE_NAME
        assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
        proc.send(signal.SIGTERM)
        assert proc.wait_exit(30) == 0
        key = key_file.read_text().strip()
        assert len(key) >= 32 and key not in proc.log()
        # `qtg audit verify` on the embedded folder finds the key by itself
        done = subprocess.run(
            [str(Path(sys.executable).parent / "qtg"), "audit", "verify"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "no MG_AUDIT_HMAC_KEY configured" not in done.stderr


@pytest.mark.slow
def test_an_old_unkeyed_embedded_folder_is_adopted_when_its_key_is_made(procs) -> None:
    """A folder from before the embedded key: the key is generated next to the rows,
    so refusing would protect nothing; the runtime adopts the chain and says so."""
    import signal
    import subprocess
    import sys

    import trio
    from runtime.rt_procs import private_dir

    from qtg.db.embedded import EmbeddedPostgres
    from qtg.db.migrate import migrate

    with private_dir("qtg-audit-old-") as root:
        data = root / "qtg-data"
        server = EmbeddedPostgres(data)
        server.start()
        try:
            dsn = server.ensure_database("qtg")
            migrate(dsn)

            async def legacy() -> None:
                async with Database(dsn, min_size=1, max_size=2) as db:
                    await write_facts(db, 3)
                    assert await promote_pending(db) == 3

            trio.run(legacy)
        finally:
            server.stop()
        assert not (data / EMBEDDED_KEY_FILE_NAME).exists()
        env = base_env(MG_EMBEDDED_DATA_DIR=str(data), MG_DB_POOL_MAX_SIZE="20")
        proc = RuntimeProcess.launcher(env)
        procs.append(proc)
        warned = proc.wait_for(
            lambda r: r.get("msg", "").startswith("the embedded audit chain was unkeyed"), 90
        )
        assert warned["level"] == "warning"
        proc.wait_ready(60)
        proc.send(signal.SIGTERM)
        assert proc.wait_exit(30) == 0
        assert stat.S_IMODE(os.stat(data / EMBEDDED_KEY_FILE_NAME).st_mode) == 0o600
        done = subprocess.run(
            [str(Path(sys.executable).parent / "qtg"), "audit", "verify"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "OK, 4 audit events verified" in done.stdout  # 3 unkeyed + the adoption
