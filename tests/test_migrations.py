"""Migrations: applied once, in order, under a lock, checksummed; `qtg migrate` on top."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest

from qtg.db.migrate import MIGRATIONS_ROOT, MigrationError, check, discover, migrate

# Every table of DESIGN §2 (plus the transition tables the guard triggers read).
DESIGN_TABLES = {
    "movement_templates",
    "template_versions",
    "plan_nodes",
    "plan_edges",
    "template_proposals",
    "movement_requests",
    "movement_request_nodes",
    "movement_events",
    "movement_callback_outbox",
    "audit_outbox",
    "audit_events",
    "executors",
    "signers",
    "worker_heartbeats",
    "api_tokens",
    "schema_migrations",
    "node_state_transitions",
    "request_state_transitions",
}
ALL_VERSIONS = [m.version for m in discover()]
QTG = str(Path(sys.executable).parent / "qtg")


def _tables(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
    return {name for (name,) in rows}


def _recorded(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()
    return [version for (version,) in rows]


def _copy_migrations(tmp_path: Path) -> Path:
    root = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_ROOT, root)
    return root


def test_apply_on_empty_database_creates_the_whole_schema(empty_dsn: str) -> None:
    assert _tables(empty_dsn) == set()
    assert check(empty_dsn).pending == ALL_VERSIONS
    applied = migrate(empty_dsn)
    assert applied == ALL_VERSIONS
    assert not DESIGN_TABLES - _tables(empty_dsn), "tables missing"
    assert _recorded(empty_dsn) == ALL_VERSIONS
    status = check(empty_dsn)
    assert status.current and status.applied == ALL_VERSIONS


def test_second_run_is_a_no_op(empty_dsn: str) -> None:
    migrate(empty_dsn)
    with psycopg.connect(empty_dsn) as conn:
        before = conn.execute("SELECT version, applied_at FROM schema_migrations").fetchall()
    assert migrate(empty_dsn) == []
    with psycopg.connect(empty_dsn) as conn:
        after = conn.execute("SELECT version, applied_at FROM schema_migrations").fetchall()
    assert sorted(after) == sorted(before)


def test_concurrent_migrators_apply_the_schema_exactly_once(empty_dsn: str) -> None:
    """Several threads, each with its own connection, migrate one empty database at once."""
    racers = 3
    barrier = threading.Barrier(racers)
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        barrier.wait()
        try:
            results.append(migrate(empty_dsn))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert sorted(results, key=len) == [[]] * (racers - 1) + [ALL_VERSIONS]
    assert _recorded(empty_dsn) == ALL_VERSIONS


def test_edited_migration_is_refused_naming_the_file(empty_dsn: str, tmp_path: Path) -> None:
    root = _copy_migrations(tmp_path)
    migrate(empty_dsn, root=root)
    edited = root / "0001_core.sql"
    edited.write_text(edited.read_text() + "\n-- a harmless-looking edit\n")
    with pytest.raises(MigrationError, match=r"0001_core\.sql was edited"):
        migrate(empty_dsn, root=root)
    with pytest.raises(MigrationError, match=r"0001_core\.sql"):
        check(empty_dsn, root=root)


def test_applied_migration_missing_here_is_refused(empty_dsn: str, tmp_path: Path) -> None:
    root = _copy_migrations(tmp_path)
    migrate(empty_dsn, root=root)
    last = sorted(root.glob("*.sql"))[-1]
    last.unlink()
    with pytest.raises(MigrationError, match=rf"{last.stem}\.sql was applied .* missing"):
        check(empty_dsn, root=root)


def test_failing_migration_leaves_nothing_of_itself(empty_dsn: str, tmp_path: Path) -> None:
    root = _copy_migrations(tmp_path)
    (root / "9999_broken.sql").write_text(
        "CREATE TABLE qtg_half_applied (id integer);\n"
        "INSERT INTO qtg_half_applied VALUES (1);\n"
        "SELECT 1 / 0;\n"
    )
    with pytest.raises(MigrationError, match=r"9999_broken\.sql failed") as caught:
        migrate(empty_dsn, root=root)
    assert "division by zero" in str(caught.value)
    assert "qtg_half_applied" not in _tables(empty_dsn)
    assert _recorded(empty_dsn) == ALL_VERSIONS  # the good ones before it stay applied
    assert check(empty_dsn, root=root).pending == ["9999_broken"]


def test_badly_named_migration_file_is_refused(tmp_path: Path) -> None:
    root = _copy_migrations(tmp_path)
    (root / "10_Oops.sql").write_text("SELECT 1;\n")
    with pytest.raises(MigrationError, match=r"10_Oops\.sql"):
        discover(root)


# ---------------------------------------------------------------- the CLI


def _qtg(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MG_")}
    environment.update(env or {})
    return subprocess.run([QTG, *args], capture_output=True, text=True, timeout=60, env=environment)


def test_cli_migrate_and_check_exit_codes(empty_dsn: str) -> None:
    pending = _qtg("migrate", "--check", "--database-url", empty_dsn)
    assert pending.returncode == 1, pending.stderr
    assert f"pending {', '.join(ALL_VERSIONS)}" in pending.stdout
    assert _tables(empty_dsn) == set()  # --check changes nothing

    applied = _qtg("migrate", env={"MG_DATABASE_URL": empty_dsn})
    assert applied.returncode == 0, applied.stderr
    assert f"applied {', '.join(ALL_VERSIONS)}" in applied.stdout
    assert not DESIGN_TABLES - _tables(empty_dsn), "tables missing"

    again = _qtg("migrate", "--database-url", empty_dsn)
    assert again.returncode == 0 and "nothing to apply" in again.stdout

    current = _qtg("migrate", "--check", "--database-url", empty_dsn)
    assert current.returncode == 0, current.stderr
    assert "pending none" in current.stdout


def test_cli_refuses_an_edited_migration(dsn: str) -> None:
    # What an edited file looks like from the database's side: another checksum.
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE schema_migrations SET checksum = 'x' WHERE version = '0001_core'")
    checked = _qtg("migrate", "--check", "--database-url", dsn)
    assert checked.returncode == 1
    assert "0001_core.sql was edited" in checked.stderr
    refused = _qtg("migrate", "--database-url", dsn)
    assert refused.returncode == 2
    assert refused.stderr.startswith("qtg migrate: error: migrations/0001_core.sql was edited")
    assert "Traceback" not in refused.stderr


def test_cli_concurrent_processes_migrate_once(empty_dsn: str) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MG_")}
    procs = [
        subprocess.Popen(
            [QTG, "migrate", "--database-url", empty_dsn],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    stdout = sorted(out for out, _ in outputs)
    assert "nothing to apply" in stdout[1] or "nothing to apply" in stdout[0]
    assert sum("applied 0001_core" in out for out in stdout) == 1
    assert _recorded(empty_dsn) == ALL_VERSIONS


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (
            ["--database-url", "postgresql://qtg:hunter2@127.0.0.1:1/qtg"],
            {},
            "cannot reach the database",
        ),
        (["--database-url", "host=127.0.0.1 port=1 password=hunter2"], {}, "cannot reach"),
        ([], {"MG_DATABASE_URL": "postgresql://qtg:hunter2@127.0.0.1:1/qtg"}, "cannot reach"),
        (
            ["--database-url", "postgresql://qtg:hunter2@127.0.0.1:1/qtg"],
            {"MG_NODE_DISPATCH_INTERVAL_SECONDS": "2s"},
            "MG_NODE_DISPATCH_INTERVAL_SECONDS: expected a number",
        ),
    ],
)
def test_cli_errors_are_one_line_without_password(
    args: list[str], env: dict[str, str], says: str
) -> None:
    result = _qtg("migrate", *args, env={"PGCONNECT_TIMEOUT": "3", **env})
    assert result.returncode == 2
    assert result.stderr.startswith("qtg migrate: error: ")
    assert says in result.stderr
    assert result.stderr.count("\n") == 1
    assert "hunter2" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://qtg:hunter2@db.example:6432/money",
        "host=db.example port=6432 user=qtg password=hunter2 dbname=money",
        "host=db.example port=6432 user=qtg password='hunter2' dbname=money",
    ],
)
def test_dsns_are_described_and_scrubbed_without_password(dsn: str) -> None:
    from qtg.cli.common import describe_dsn, scrub

    assert describe_dsn(dsn) == "qtg@db.example:6432/money"
    assert "hunter2" not in scrub(f"could not use {dsn}: hunter2 refused", dsn)
    assert "hunter2" not in scrub(f"could not use {dsn}")  # shape-based, DSN unknown


def test_0017_backfills_request_created_at_without_touching_the_nodes(
    empty_dsn: str, tmp_path: Path
) -> None:
    """Nodes that exist before migrations/0017 get their request's created_at;
    the backfill is not a change of the node (updated_at stays as it was)."""
    import schema_rows as rows

    migrate(empty_dsn, root=rows.migrations_before(tmp_path, "0017"))
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        p = rows.plan(conn)
        nodes = [rows.node(conn, p, rows.request(conn, p)) for _ in range(3)]
        rows.walk_node_to(conn, nodes[0], "READY")
        before = dict(conn.execute("SELECT id, updated_at FROM movement_request_nodes").fetchall())
        events_before = conn.execute("SELECT count(*) FROM movement_events").fetchone()
    assert migrate(empty_dsn)[0] == "0017_claim_walks"
    with psycopg.connect(empty_dsn) as conn:
        found = conn.execute(
            "SELECT n.id, n.request_created_at, r.created_at, n.updated_at"
            " FROM movement_request_nodes n JOIN movement_requests r ON r.id = n.request_id"
        ).fetchall()
        events = conn.execute("SELECT count(*) FROM movement_events").fetchone()
    assert len(found) == 3
    for node_id, copied, created, updated_at in found:
        assert copied == created
        assert updated_at == before[node_id]
    assert events == events_before  # no node_state_changed (or other) event written
