"""Debian's pgbouncer, started by the test on a loopback port in transaction pooling.

As root it runs as the system user `postgres` (pgbouncer refuses root). `restart()`
is an immediate shutdown (SIGTERM: every client and server connection cut) and a
fresh start on the same port.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psycopg
from evm.anvil import free_port


def find_binary() -> str | None:
    return shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
    )


class PgBouncer:
    def __init__(self, folder: Path, server_host: str, server_port: int, pool_size: int) -> None:
        binary = find_binary()
        assert binary is not None, "pgbouncer is not installed (apt-get install pgbouncer)"
        self.binary = binary
        self.folder = folder
        self.port = free_port()
        self.user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        (folder / "userlist.txt").write_text('"postgres" ""\n')
        self.config = folder / "pgbouncer.ini"
        self.config.write_text(
            "[databases]\n"
            f"* = host={server_host} port={server_port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {folder / 'userlist.txt'}\n"
            # what qtg needs (README, Deployment): transaction pooling, no reset query
            # (nothing session-level is left behind), enough server connections for
            # every client connection that may hold a transaction (no pool-in-pool wait)
            "pool_mode = transaction\n"
            "server_reset_query =\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 1000\n"
            "ignore_startup_parameters = extra_float_digits\n"
            "admin_users = postgres\n"
            f"logfile = {folder / 'pgbouncer.log'}\n"
            f"pidfile = {folder / 'pgbouncer.pid'}\n"
        )
        if self.user is not None:
            for path in (folder, *folder.iterdir()):
                os.chown(path, self.user.pw_uid, self.user.pw_gid)
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def dsn(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            user=self.user.pw_uid if self.user else None,
            group=self.user.pw_gid if self.user else None,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.dsn("postgres"), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                    return
            except psycopg.OperationalError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"pgbouncer did not start:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)  # immediate shutdown: every connection cut
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)

    def restart(self) -> None:
        self.stop()
        self.start()
        self.restarts += 1

    def log_tail(self) -> str:
        try:
            return "\n".join((self.folder / "pgbouncer.log").read_text().splitlines()[-30:])
        except OSError:
            return ""

    def log_text(self) -> str:
        try:
            return (self.folder / "pgbouncer.log").read_text(errors="replace")
        except OSError:
            return ""
