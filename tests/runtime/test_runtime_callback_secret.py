"""One callback key for every runtime on an external database (issue 25 item 8).

With MG_DATABASE_URL several runtimes, on several hosts, send the callbacks of
one set of movements. A secret generated per host would sign with a different
key on each, so start-up refuses without MG_CALLBACK_SIGNING_SECRET — before
anything is touched — and the secret file is generated only for the embedded
database.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qtg.config import ConfigError, Settings
from qtg.services.callbacks import load_callback_secret
from runtime.rt_procs import RuntimeProcess, base_env, query

pytestmark = pytest.mark.slow


def _without_secret(**overrides: str) -> dict[str, str]:
    env = base_env(**overrides)
    env.pop("MG_CALLBACK_SIGNING_SECRET")
    return env


def test_external_database_without_a_secret_refuses_to_start(
    empty_dsn: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    proc = RuntimeProcess.launcher(
        _without_secret(MG_DATABASE_URL=empty_dsn, MG_EMBEDDED_DATA_DIR=str(data)),
        "--migrate",
        "--seed-demo",
    )
    assert proc.wait_exit(30) == 2, proc.log()
    assert len(proc.lines) == 1, proc.log()
    assert "MG_CALLBACK_SIGNING_SECRET" in proc.lines[0]
    assert "external database" in proc.lines[0]
    assert "Traceback" not in proc.log()
    # nothing happened: no migration, no generated secret
    assert query(empty_dsn, "SELECT to_regclass('schema_migrations')") == [(None,)]
    assert not data.exists()


def test_api_only_needs_no_secret(dsn: str) -> None:
    """An API-only process sends no callbacks: it starts without the secret."""
    proc = RuntimeProcess.launcher(_without_secret(MG_DATABASE_URL=dsn), "--api-only")
    try:
        proc.wait_ready(30)
    finally:
        proc.kill()


def test_with_the_secret_an_external_database_starts(dsn: str) -> None:
    proc = RuntimeProcess.launcher(base_env(MG_DATABASE_URL=dsn), "--workers-only")
    try:
        proc.wait_ready(30)
    finally:
        proc.kill()


def test_no_secret_is_generated_for_an_external_database(tmp_path: Path) -> None:
    settings = Settings().replace(
        database_url="postgresql://qtg@db.example/qtg",
        embedded_data_dir=str(tmp_path),
        callback_signing_secret=None,
    )
    with pytest.raises(ConfigError, match="MG_CALLBACK_SIGNING_SECRET is required"):
        load_callback_secret(settings)
    assert list(tmp_path.iterdir()) == []
    # the embedded database (no MG_DATABASE_URL) still generates one
    assert len(load_callback_secret(settings.replace(database_url=None))) == 64
