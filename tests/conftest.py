"""Shared fixtures: a real PostgreSQL, a fresh database per test.

Where the server comes from, in order: QTG_TEST_DATABASE_URL (a DSN whose
user may CREATE DATABASE), else the server on 127.0.0.1:5432, else the
embedded PostgreSQL (qtg.db.embedded), so the tests pass on a machine with no
PostgreSQL installed.

Each test gets its own database cloned from a migrated template
(`CREATE DATABASE … TEMPLATE`), which takes tens of milliseconds instead of
re-running every migration. The template's name carries a hash of the
migration files, so an edited or added migration builds a new template.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from runtime.rt_procs import RuntimeProcess, terminate_all

from qtg.db import Database, ListenHub
from qtg.db.migrate import MIGRATIONS_ROOT, migrate

REPO = Path(__file__).resolve().parents[1]
LOCAL_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


def _reachable(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


def with_dbname(dsn: str, dbname: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return make_conninfo(**params)


@pytest.fixture(scope="session")
def admin_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A DSN on the server's maintenance database, allowed to create databases."""
    configured = os.environ.get("QTG_TEST_DATABASE_URL")
    if configured:
        yield configured
        return
    if _reachable(LOCAL_SERVER):
        yield LOCAL_SERVER
        return
    from qtg.db.embedded import EmbeddedPostgres

    # A 0711 folder outside pytest's 0700 tree: as root the server's user must
    # enter every parent, and qtg never widens a folder for it.
    folder = Path(tempfile.mkdtemp(prefix="qtg-test-pg-"))
    folder.chmod(0o711)
    server = EmbeddedPostgres(folder)
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _migrations_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(MIGRATIONS_ROOT.glob("*.sql")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def template_db(admin_dsn: str) -> str:
    """The name of a migrated database to clone from (built once per migrations digest)."""
    name = f"qtg_tpl_{_migrations_digest()}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists:
            return name
        building = f"{name}_building_{uuid.uuid4().hex[:8]}"
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(building)))
    migrate(with_dbname(admin_dsn, building))
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        try:
            conn.execute(
                sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                    sql.Identifier(building), sql.Identifier(name)
                )
            )
        except psycopg.errors.DuplicateDatabase:  # another session won the race
            conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(building)))
    return name


def create_database(admin_dsn: str, template: str | None) -> str:
    name = f"qtg_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        statement = (
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
            if template
            else sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        )
        conn.execute(statement)
    return name


def drop_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
def dsn(admin_dsn: str, template_db: str) -> Iterator[str]:
    """A fresh, fully migrated database for this test alone."""
    name = create_database(admin_dsn, template_db)
    try:
        yield with_dbname(admin_dsn, name)
    finally:
        drop_database(admin_dsn, name)


@pytest.fixture
def empty_dsn(admin_dsn: str) -> Iterator[str]:
    """A fresh database with no schema at all (migration tests)."""
    name = create_database(admin_dsn, None)
    try:
        yield with_dbname(admin_dsn, name)
    finally:
        drop_database(admin_dsn, name)


@pytest.fixture
async def db(dsn: str) -> AsyncIterator[Database]:
    database = Database(dsn, min_size=1, max_size=8, statement_timeout_ms=15_000)
    await database.open()
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
async def hub(dsn: str, nursery) -> ListenHub:
    listen_hub = ListenHub(dsn, reconnect_min_seconds=0.02, reconnect_max_seconds=0.5)
    await nursery.start(listen_hub.run)
    return listen_hub


@pytest.fixture
def procs() -> Iterator[list[RuntimeProcess]]:
    """Runtime processes a test starts (append them); all terminated at teardown."""
    started: list[RuntimeProcess] = []
    yield started
    terminate_all(started)
