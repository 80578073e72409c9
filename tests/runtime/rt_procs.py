"""Runtime subprocesses for tests: start, read their JSON log lines, signal, wait.

Every wait has a deadline and waits for a condition (a log line, an exit, a
row count), never for a fixed time.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg

REPO = Path(__file__).resolve().parents[2]
ENTRY = Path(__file__).resolve().parent / "rt_entry.py"
BIN = REPO / "bin" / "qtg-runtime"


def base_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MG_")}
    env.update({"MG_LOG_FORMAT": "json", "MG_DB_POOL_MIN_SIZE": "1", "MG_DB_POOL_MAX_SIZE": "4"})
    env["MG_API_PORT"] = "0"  # the runtime serves the API: an ephemeral port, so runs never clash
    # required with an external database (issue 25 item 8); one key for every runtime of a test
    env["MG_CALLBACK_SIGNING_SECRET"] = "test-callback-signing-secret"
    env.update(overrides)
    return env


class RuntimeProcess:
    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @classmethod
    def entry(cls, env: dict[str, str], *args: str) -> RuntimeProcess:
        return cls([sys.executable, str(ENTRY), *args], env)

    @classmethod
    def launcher(cls, env: dict[str, str], *args: str) -> RuntimeProcess:
        """`bin/qtg-runtime` run by the interpreter running the tests (QTG_PYTHON),
        not whatever python3 the repository folder offers (issue 26)."""
        return cls([str(BIN), *args], {**env, "QTG_PYTHON": sys.executable})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def records(self) -> list[dict[str, Any]]:
        with self._cond:
            return self._parsed()

    def _parsed(self) -> list[dict[str, Any]]:
        out = []
        for line in self.lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"msg": line, "level": "raw"})
        return out

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 20) -> dict:
        """The first JSON log record matching `predicate`; fail if the process exits first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for record in self._parsed():
                    if predicate(record):
                        return record
                if self.proc.poll() is not None and not self._reader.is_alive():
                    raise AssertionError(
                        f"runtime exited ({self.proc.returncode}) before the condition:\n"
                        + self.log()
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("timed out waiting for a log line:\n" + self.log())
                self._cond.wait(min(left, 0.5))

    def wait_ready(self, timeout: float = 30) -> dict[str, Any]:
        return self.wait_for(lambda r: r.get("msg") == "qtg runtime ready", timeout)

    def send(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float = 10) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"runtime still running {timeout} s later:\n" + self.log()
            ) from None
        self._reader.join(timeout=5)
        return code

    def log(self) -> str:
        with self._cond:
            return "\n".join(self.lines[-60:])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def wait_until(condition: Callable[[], Any], timeout: float = 10, what: str = "condition") -> Any:
    """Poll `condition` until it returns something truthy, or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def query(dsn: str, text: str, params: Any = None) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        cur = conn.execute(text, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def request_states(dsn: str, ids: list[str]) -> dict[str, str]:
    """Each movement's request_state, by id."""
    return dict(
        query(
            dsn,
            "SELECT id::text, request_state FROM movement_requests WHERE id = ANY(%s::uuid[])",
            (ids,),
        )
    )


def all_completed(dsn: str, ids: list[str]) -> bool:
    """True once every movement is COMPLETED; a FAILED or MANUAL_INTERVENTION one
    fails the wait at once, with its nodes' errors, instead of timing it out."""
    rows = request_states(dsn, ids)
    stuck = {k: v for k, v in rows.items() if v in ("FAILED", "MANUAL_INTERVENTION")}
    if stuck:
        why = query(
            dsn,
            "SELECT node_key, node_state, error_code, error_detail FROM movement_request_nodes"
            " WHERE request_id = ANY(%s::uuid[]) AND error_code IS NOT NULL",
            (list(stuck),),
        )
        raise AssertionError(f"{stuck}: {why}")
    return len(rows) == len(ids) and set(rows.values()) == {"COMPLETED"}


@contextlib.contextmanager
def private_dir(prefix: str) -> Iterator[Path]:
    """A temporary directory for an embedded PostgreSQL, outside pytest's tmp tree.

    As root, the embedded server runs as the user `pgserver`, which must be able
    to enter every parent folder, and qtg never widens a folder's permissions
    for it (it refuses instead). So the test makes its own folder 0711: enter,
    not list. pytest's /tmp/pytest-of-<user> is 0700 and stays so.
    """
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def terminate_all(procs: list[RuntimeProcess]) -> None:
    for p in procs:
        if p.proc.poll() is None:
            p.send(signal.SIGTERM)
    for p in procs:
        try:
            p.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
