"""A real PostgreSQL primary and streaming standby on loopback ports, for the HA tests.

Built from the PostgreSQL 15 server binaries (initdb, pg_basebackup -R,
postgres), each server its own process group so that `kill_primary` is a
SIGKILL of the postmaster and every backend at once — the host is gone, not
shut down. As root the servers run as the system user `postgres` (initdb
refuses root).

`Cluster.start(synchronous=True)` names the standby in the primary's
synchronous_standby_names, so a commit returns only once the standby flushed
it; the standby itself is configured with no synchronous standby of its own,
which is what an HA manager (Patroni's synchronous_mode without
synchronous_mode_strict) sets on a primary left alone.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
from evm.anvil import free_port

BIN_CANDIDATES = [Path("/usr/lib/postgresql/15/bin"), Path("/usr/lib/postgresql/16/bin")]
STANDBY_NAME = "standby1"


def find_bin() -> Path | None:
    for candidate in BIN_CANDIDATES:
        if (candidate / "initdb").exists() and (candidate / "pg_basebackup").exists():
            return candidate
    return None


def _server_user() -> pwd.struct_passwd | None:
    """The user the servers run as: `postgres` when we are root, else ourselves."""
    if os.geteuid() != 0:
        return None
    return pwd.getpwnam("postgres")


class Server:
    def __init__(
        self,
        bin_dir: Path,
        data: Path,
        port: int,
        user: pwd.struct_passwd | None,
        listen: str = "127.0.0.1",
    ):
        self.bin_dir = bin_dir
        self.data = data
        self.port = port
        self.user = user
        self.listen = listen
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data.parent / f"{data.name}.log"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the server writes to it until killed
        self.proc = subprocess.Popen(
            [
                str(self.bin_dir / "postgres"),
                "-D",
                str(self.data),
                "-p",
                str(self.port),
                "-c",
                f"listen_addresses={self.listen}",
                "-c",
                f"unix_socket_directories={self.data.parent}",
            ],
            stdout=log,
            stderr=log,
            start_new_session=True,  # its own process group: kill() takes every backend
            user=self.user.pw_uid if self.user else None,
            group=self.user.pw_gid if self.user else None,
        )
        log.close()
        self.wait_accepting()

    def wait_accepting(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                pass
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"postgres on {self.port} exited:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"postgres on {self.port} not accepting:\n{self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-30:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend at once (the host died)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)  # fast shutdown
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def execute(self, text: str, dbname: str = "postgres") -> list[tuple]:
        with psycopg.connect(self.dsn(dbname), autocommit=True, connect_timeout=5) as conn:
            cur = conn.execute(text)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []


class Cluster:
    """A primary and one streaming standby; `dsn()` is the multi-host DSN over both."""

    def __init__(self, root: Path, bin_dir: Path) -> None:
        self.root = root
        self.bin_dir = bin_dir
        self.user = _server_user()
        self.primary = Server(bin_dir, root / "primary", free_port(), self.user)
        self.standby = Server(bin_dir, root / "standby", free_port(), self.user)

    def _run(self, *argv: str) -> None:
        result = subprocess.run(
            [str(self.bin_dir / argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            user=self.user.pw_uid if self.user else None,
            group=self.user.pw_gid if self.user else None,
            timeout=300,
        )
        if result.returncode != 0:
            raise AssertionError(f"{argv[0]} failed: {result.stdout}\n{result.stderr}")

    def start(self, *, synchronous: bool) -> None:
        if self.user is not None:
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self._run(
            "initdb",
            "-D",
            str(self.primary.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        sync_names = f"'{STANDBY_NAME}'" if synchronous else "''"
        with open(self.primary.data / "postgresql.conf", "a") as conf:
            conf.write(
                "\n# tests/ha/cluster.py\n"
                "wal_level = replica\nmax_wal_senders = 5\nhot_standby = on\n"
                "fsync = off\nfull_page_writes = off\n"  # the OS never crashes in these tests
                "max_connections = 200\n"
                f"synchronous_standby_names = {sync_names}\n"
                "wal_sender_timeout = 5s\nwal_receiver_timeout = 5s\n"
            )
        with open(self.primary.data / "pg_hba.conf", "a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        self.primary.start()
        self._run(
            "pg_basebackup",
            "-D",
            str(self.standby.data),
            "-R",
            "-X",
            "stream",
            "-d",
            f"host=127.0.0.1 port={self.primary.port} user=postgres",
        )
        with open(self.standby.data / "postgresql.auto.conf", "a") as conf:
            conf.write(
                f"primary_conninfo = 'host=127.0.0.1 port={self.primary.port} user=postgres "
                f"application_name={STANDBY_NAME}'\n"
                # promoted and alone, the standby must not wait for a standby of its own
                "synchronous_standby_names = ''\n"
            )
        self.standby.start()
        self.wait_streaming(synchronous=synchronous)

    def wait_streaming(self, *, synchronous: bool, timeout: float = 60) -> None:
        want = "sync" if synchronous else "async"
        deadline = time.monotonic() + timeout
        while True:
            rows = self.primary.execute(
                "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'"
            )
            if [r[0] for r in rows] == [want]:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"standby not streaming ({want}): {rows}")
            time.sleep(0.05)

    def dsn(self, dbname: str, **extra: str) -> str:
        """libpq's multi-host form: the primary first, the standby second; only a
        read-write server is accepted."""
        params = {
            "host": "127.0.0.1,127.0.0.1",
            "port": f"{self.primary.port},{self.standby.port}",
            "user": "postgres",
            "dbname": dbname,
            "target_session_attrs": "read-write",
            "connect_timeout": "3",
            **extra,
        }
        return " ".join(f"{k}={v}" for k, v in params.items())

    def walreceiver_pid(self) -> int | None:
        rows = self.standby.execute("SELECT pid FROM pg_stat_wal_receiver")
        return rows[0][0] if rows else None

    def promote_standby(self) -> None:
        [(promoted,)] = self.standby.execute("SELECT pg_promote(wait => true, wait_seconds => 60)")
        assert promoted, self.standby.log_tail()

    def stop(self) -> None:
        for server in (self.standby, self.primary):
            server.stop()


@contextlib.contextmanager
def cluster(*, synchronous: bool) -> Iterator[Cluster]:
    bin_dir = find_bin()
    if bin_dir is None:
        raise AssertionError("PostgreSQL server binaries missing (apt-get install postgresql-15)")
    root = Path(tempfile.mkdtemp(prefix="qtg-ha-"))
    root.chmod(0o711)
    made = Cluster(root, bin_dir)
    try:
        made.start(synchronous=synchronous)
        yield made
    finally:
        made.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def single_server(*, listen: str, conf: str) -> Iterator[Server]:
    """One primary, no standby, listening on `listen` (a comma list of addresses)
    with `conf` appended to its postgresql.conf."""
    bin_dir = find_bin()
    if bin_dir is None:
        raise AssertionError("PostgreSQL server binaries missing (apt-get install postgresql-15)")
    root = Path(tempfile.mkdtemp(prefix="qtg-ha-"))
    root.chmod(0o711)
    made = Cluster(root, bin_dir)
    server = Server(bin_dir, root / "primary", free_port(), made.user, listen=listen)
    try:
        if made.user is not None:
            os.chown(root, made.user.pw_uid, made.user.pw_gid)
        made._run(
            "initdb",
            "-D",
            str(server.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        with open(server.data / "postgresql.conf", "a") as f:
            f.write("\n# tests/ha/cluster.py\nfsync = off\nmax_connections = 200\n" + conf)
        with open(server.data / "pg_hba.conf", "a") as hba:
            hba.write("host all all 0.0.0.0/0 trust\n")
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
