"""Forward-only migrations: `migrations/NNNN_name.sql`, applied in order.

Each file runs in its own transaction together with the row that records it,
so a failed file leaves nothing behind. The whole run holds a session advisory
lock, so two runtimes that start at once do not race: the second waits, then
finds nothing to do. Every applied file's sha256 is recorded; a file edited
after it was applied makes `migrate` and `check` refuse, naming the file,
because the database no longer matches what the repository says it is.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from qtg.db.pool import session_params
from qtg.db.queries import sql_family

MIGRATIONS_ROOT = Path(__file__).resolve().parents[2] / "migrations"
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")

SQL = sql_family("migrate", "lock", "unlock", "ensure_table", "applied", "table_exists", "record")


class MigrationError(RuntimeError):
    """The database and the migration files disagree; the message names the file."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: str  # file name without .sql, e.g. "0001_core"
    path: Path
    text: str
    checksum: str


@dataclass(frozen=True, slots=True)
class MigrationStatus:
    applied: list[str]
    pending: list[str]

    @property
    def current(self) -> bool:
        return not self.pending


def discover(root: Path = MIGRATIONS_ROOT) -> list[Migration]:
    migrations = []
    numbers: dict[str, str] = {}
    for path in sorted(root.glob("*.sql")):
        match = _NAME.match(path.name)
        if match is None:
            raise MigrationError(f"{path.name}: migration files are named NNNN_lowercase_name.sql")
        if match.group(1) in numbers:
            raise MigrationError(
                f"{path.name}: number {match.group(1)} is also used by {numbers[match.group(1)]}"
            )
        numbers[match.group(1)] = path.name
        raw = path.read_bytes()
        migrations.append(
            Migration(path.stem, path, raw.decode("utf-8"), hashlib.sha256(raw).hexdigest())
        )
    return migrations


def _applied(conn: psycopg.Connection[Any]) -> dict[str, str]:
    present = conn.execute(SQL.table_exists.text).fetchone()
    if not present or not present["present"]:
        return {}
    return {r["version"]: r["checksum"] for r in conn.execute(SQL.applied.text).fetchall()}


def _verify(applied: dict[str, str], migrations: list[Migration]) -> None:
    by_version = {m.version: m for m in migrations}
    for version, checksum in applied.items():
        migration = by_version.get(version)
        if migration is None:
            raise MigrationError(
                f"migrations/{version}.sql was applied to this database but is missing here"
            )
        if migration.checksum != checksum:
            raise MigrationError(
                f"migrations/{migration.path.name} was edited after it was applied "
                f"(recorded sha256 {checksum[:12]}…, file has {migration.checksum[:12]}…); "
                "add a new migration instead"
            )


def check(dsn: str, root: Path = MIGRATIONS_ROOT) -> MigrationStatus:
    """What is applied and what is pending; raises MigrationError on an edited file."""
    migrations = discover(root)
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row, **session_params(dsn)) as conn:
        applied = _applied(conn)
    _verify(applied, migrations)
    return MigrationStatus(
        applied=sorted(applied),
        pending=[m.version for m in migrations if m.version not in applied],
    )


def migrate(dsn: str, root: Path = MIGRATIONS_ROOT) -> list[str]:
    """Apply every pending migration in order; return the versions applied now."""
    migrations = discover(root)
    done: list[str] = []
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row, **session_params(dsn)) as conn:
        conn.execute(SQL.lock.text)
        try:
            conn.execute(SQL.ensure_table.text)
            applied = _applied(conn)
            _verify(applied, migrations)
            for migration in migrations:
                if migration.version in applied:
                    continue
                try:
                    with conn.transaction():
                        conn.execute(migration.text.encode("utf-8"))  # type: ignore[arg-type]
                        conn.execute(
                            SQL.record.text,
                            {"version": migration.version, "checksum": migration.checksum},
                        )
                except psycopg.Error as exc:
                    raise MigrationError(f"migrations/{migration.path.name} failed: {exc}") from exc
                done.append(migration.version)
        finally:
            if not conn.closed:
                conn.execute(SQL.unlock.text)
    return done
