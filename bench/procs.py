"""Real runtime processes for the benchmark: `bin/qtg-runtime`, exactly as an operator runs it.

Each process is started with a clean MG_* environment (only what the
benchmark chooses), its JSON log read line by line by a task in the caller's
nursery, and stopped with SIGTERM (SIGKILL only if it does not exit in time).
Resident memory and CPU time come from /proc.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import trio

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / "bin" / "qtg-runtime"
CLK_TCK = os.sysconf("SC_CLK_TCK")

#: The audit key every benchmark runtime chains with (and bench/workload.py's
#: settle_audit promotes with: a keyed runtime refuses an unkeyed chain head).
AUDIT_HMAC_KEY = "bench-only-audit-key-0123456789abcdef"

READY_TIMEOUT_SECONDS = 60
STOP_TIMEOUT_SECONDS = 15
#: Log records kept per process (the last ones: what is shown when it fails).
KEEP_RECORDS = 200


def runtime_env(dsn: str, *, reactive: bool, **overrides: str) -> dict[str, str]:
    """The environment of a benchmark runtime: every MG_* default except these."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MG_")}
    env.update(
        {
            "MG_DATABASE_URL": dsn,
            "MG_REACTIVE": "true" if reactive else "false",
            "MG_LOG_FORMAT": "json",
            "MG_LOG_LEVEL": "INFO",
            # Keyed, as production should run (README, audit anchoring): the
            # HMAC is part of the cost measured, and no "UNKEYED" warning per run.
            "MG_AUDIT_HMAC_KEY": AUDIT_HMAC_KEY,
            # required with an external database: every runtime signs with one key
            "MG_CALLBACK_SIGNING_SECRET": "bench-only-callback-secret-0123456789",
        }
    )
    env.update(overrides)
    # QTG_BENCH_RUNTIME_ENV="MG_A=1,MG_B=2": settings for A/B runs of one lever
    extra = os.environ.get("QTG_BENCH_RUNTIME_ENV", "")
    env.update(dict(kv.split("=", 1) for kv in extra.split(",") if "=" in kv))
    return env


def launcher_args() -> list[str]:
    """`--workers-only` when the launcher has it (the API server adds it): workers, no API."""
    out = subprocess.run([str(BIN), "--help"], capture_output=True, text=True, check=False)
    return ["--workers-only"] if "--workers-only" in out.stdout else []


class Runtime:
    """One running `bin/qtg-runtime` process."""

    def __init__(self, name: str, process: trio.Process) -> None:
        self.name = name
        self.process = process
        self.ready = trio.Event()
        self.exited = trio.Event()
        self.ready_record: dict[str, Any] = {}
        self.records: list[dict[str, Any]] = []
        self.levels: Counter[str] = Counter()

    @property
    def pid(self) -> int:
        return self.process.pid

    async def read_logs(self) -> None:
        assert self.process.stderr is not None
        buffer = b""
        try:
            async for chunk in self.process.stderr:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    self._record(line.decode(errors="replace"))
        finally:
            self.exited.set()

    def _record(self, line: str) -> None:
        try:
            record = json.loads(line)
        except ValueError:
            record = {"level": "RAW", "msg": line}
        if not isinstance(record, dict):
            record = {"level": "RAW", "msg": line}
        self.levels[str(record.get("level", "?")).upper()] += 1
        self.records.append(record)
        del self.records[:-KEEP_RECORDS]
        if record.get("msg") == "qtg runtime ready":
            self.ready_record = record
            self.ready.set()

    def problems(self) -> list[str]:
        """The warning and error lines it logged (kept ones), for the report."""
        return [
            f"{r.get('level')}: {r.get('msg')} {r.get('error', '')}".strip()
            for r in self.records
            if str(r.get("level", "")).upper() in ("WARNING", "ERROR", "CRITICAL", "RAW")
            and not _startup_skip(r)
        ]

    def workers(self) -> list[str]:
        """The workers it runs (from its readiness line)."""
        return list(self.ready_record.get("workers", []))

    def tail(self, n: int = 30) -> str:
        return "\n".join(json.dumps(r) for r in self.records[-n:])

    def rss_mb(self) -> float:
        return rss_mb(self.pid)

    def cpu_seconds(self) -> float:
        return cpu_seconds([self.pid])


def _startup_skip(record: dict[str, Any]) -> bool:
    """The start-up line saying a worker is skipped (the registry's decision, not a problem)."""
    return str(record.get("msg", "")).startswith("worker ") and " skipped: " in str(
        record.get("msg", "")
    )


@contextlib.asynccontextmanager
async def runtime(
    name: str, env: Mapping[str, str], args: list[str] | None = None
) -> AsyncIterator[Runtime]:
    """Start one runtime, wait for its `qtg runtime ready` line, stop it on exit."""
    async with runtimes([name], env, args) as started:
        yield started[0]


@contextlib.asynccontextmanager
async def runtimes(
    names: list[str], env: Mapping[str, str], args: list[str] | None = None
) -> AsyncIterator[list[Runtime]]:
    """Start several runtimes at once (same environment), wait until all are ready,
    stop them all on exit."""
    async with trio.open_nursery() as nursery:
        started: list[Runtime] = []
        try:
            for name in names:
                process = await trio.lowlevel.open_process(
                    [str(BIN), *(args or [])],
                    env=dict(env),
                    # the launcher's own checkout: `python -m` imports qtg from
                    # the working directory first (bench.ab --tree runs others)
                    cwd=BIN.parents[1],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
                rt = Runtime(name, process)
                started.append(rt)
                nursery.start_soon(rt.read_logs)
            for rt in started:
                await _wait_ready(rt)
            yield started
        finally:
            with trio.CancelScope(shield=True):
                for rt in started:
                    if rt.process.returncode is None:
                        rt.process.send_signal(signal.SIGTERM)
                for rt in started:
                    await stop(rt)
            nursery.cancel_scope.cancel()


async def _wait_ready(rt: Runtime) -> None:
    with trio.move_on_after(READY_TIMEOUT_SECONDS):
        async with trio.open_nursery() as waiting:
            waiting.start_soon(_cancel_when, rt.ready, waiting.cancel_scope)
            waiting.start_soon(_cancel_when, rt.exited, waiting.cancel_scope)
    if not rt.ready.is_set():
        raise RuntimeError(
            f"runtime {rt.name} did not become ready (exit code {rt.process.returncode}):\n"
            + rt.tail()
        )


async def _cancel_when(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def stop(rt: Runtime) -> int:
    """SIGTERM, wait for a clean exit; SIGKILL if it does not come."""
    if rt.process.returncode is None:
        rt.process.send_signal(signal.SIGTERM)
    with trio.move_on_after(STOP_TIMEOUT_SECONDS):
        return await rt.process.wait()
    rt.process.kill()
    return await rt.process.wait()


# ------------------------------------------------------------------ /proc


def rss_mb(pid: int) -> float:
    """Resident memory (VmRSS) of one process, in MB (10^6 bytes)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / 1e6
    raise LookupError(f"no VmRSS for pid {pid}")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes (all their threads), in seconds."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLK_TCK


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    return {pid: cpu_seconds([pid]) for pid in pids}


def process_family(root: int) -> list[int]:
    """`root` and its children (a postmaster's: backends, walwriter, checkpointer …)."""
    pids = [root]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == root:
                pids.append(int(stat.parent.name))
    return pids


#: The private server's postmaster pid, handed to a peer's process (bench/peers.py) so that
#: its drain counts PostgreSQL's CPU as qtg's drain does (bench/throughput.py).
POSTMASTER_ENV = "QTG_BENCH_POSTMASTER"


class CpuWindow:
    """CPU seconds of this process (every thread) and of PostgreSQL's processes (the
    postmaster in POSTMASTER_ENV and its children, each one's growth, as qtg's drain counts
    them) between `start()` and `stop()`: a peer's drain, measured as qtg's is."""

    def __init__(self) -> None:
        self.postmaster = int(os.environ.get(POSTMASTER_ENV) or 0)
        self._started: tuple[float, dict[int, float]] | None = None

    def _postgres(self) -> dict[int, float]:
        return cpu_by_pid(process_family(self.postmaster)) if self.postmaster else {}

    def start(self) -> None:
        """Open the window (once: later calls are no-ops)."""
        if self._started is None:
            self._started = (time.process_time(), self._postgres())

    def stop(self) -> float | None:
        """CPU seconds since `start()`; None when it never started or no server was named."""
        if self._started is None or not self.postmaster:
            return None
        own, before = self._started
        after = self._postgres()
        postgres = sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
        return time.process_time() - own + postgres


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of a process (tid → seconds); the main thread's tid is pid."""
    out = {}
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            out[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out
