"""A port already in use stops start-up with one line, before anything changed (issue 17 item 10).

Real processes (`bin/qtg-runtime`) against a port held by a listening socket
on loopback: the embedded data folder is never created, an external database
is never migrated, and no demo template is seeded.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.rt_procs import RuntimeProcess, base_env, private_dir, query

pytestmark = pytest.mark.slow


@pytest.fixture
def busy_port() -> Iterator[int]:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        yield holder.getsockname()[1]
    finally:
        holder.close()


def _refused(proc: RuntimeProcess, port: int) -> None:
    assert proc.wait_exit(30) == 1, proc.log()
    errors = [r for r in proc.records() if r.get("level") == "error"]
    assert [e["msg"] for e in errors] == [
        f"qtg runtime cannot start: MG_API_HOST:MG_API_PORT 127.0.0.1:{port} is already in use"
    ], proc.log()
    assert "Traceback" not in proc.log()


def test_embedded_start_on_a_busy_port_touches_nothing(busy_port: int) -> None:
    with private_dir("qtg-rt-port-") as root:
        data = root / "qtg-data"
        proc = RuntimeProcess.launcher(
            base_env(MG_EMBEDDED_DATA_DIR=str(data), MG_API_PORT=str(busy_port)), "--seed-demo"
        )
        _refused(proc, busy_port)
        assert not data.exists(), "the embedded data folder was created before the port was bound"
        assert not any(r.get("msg") == "embedded PostgreSQL started" for r in proc.records())


def test_external_database_is_not_migrated_when_the_port_is_busy(
    empty_dsn: str, busy_port: int
) -> None:
    proc = RuntimeProcess.launcher(
        base_env(MG_DATABASE_URL=empty_dsn, MG_API_PORT=str(busy_port)), "--migrate", "--seed-demo"
    )
    _refused(proc, busy_port)
    assert query(empty_dsn, "SELECT to_regclass('schema_migrations')") == [(None,)]


def test_workers_only_needs_no_port(dsn: str, busy_port: int, tmp_path: Path) -> None:
    proc = RuntimeProcess.launcher(
        base_env(MG_DATABASE_URL=dsn, MG_API_PORT=str(busy_port)), "--workers-only"
    )
    try:
        proc.wait_ready(30)
    finally:
        proc.kill()
