"""Throughput: drain a backlog of approved movements with one or two runtime processes.

Each drain runs on its own clone of the backlog database. A start gate (an
EXCLUSIVE lock on movement_request_nodes, held by the benchmark while the
runtimes start) makes every runtime begin at the same moment. The rate is
nodes completed over the span between the first write-ahead claim's commit
and the last node completion's commit (PostgreSQL's commit times); a polling
run, which would take hours, is cut after a fixed window and its rate is what
completed within it.

Beside the rate, each drain records:
- sandbox submissions per node (a node submitted twice is a failed benchmark);
- statements per node: every top-level statement the database ran for this
  database (pg_stat_statements; statements inside triggers do not count, nor
  do BEGIN and COMMIT, which qtg.db sends in the pipelines of the statements
  beside them — pg_stat_statements does not see them once psycopg has
  prepared them), and the commits: write transactions, from the growth of the
  server's next transaction id over the drain (a single autocommit write
  counts; a read-only transaction, which makes no WAL flush, does not);
- CPU seconds of the runtime processes and of every PostgreSQL process over
  the drain, against its wall time (2 cores);
- resident memory of the first runtime at every progress tick (growth while
  it works through thousands of nodes = a leak) and of each runtime after.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg
import trio
from psycopg import sql
from psycopg.rows import dict_row

from bench import procs, profile
from bench.queries import bench_sql
from bench.server import PrivateServer
from qtg.db import sql_family

SQL = bench_sql(
    "start_gate",
    "drain_progress",
    "drain_window",
    "submissions",
    "statements",
    "notify_off",
    "wait_events",
    "database_commits",
)

#: The engine's claim statements (each runs under a savepoint), recognised in
#: pg_stat_statements by their text up to the first parameter.
CLAIM_PREFIXES = tuple(
    q.text.split("%(")[0]
    for q in (
        sql_family("dispatch", "claim_candidate").claim_candidate,
        sql_family("observe", "claim_node").claim_node,
        sql_family("recover", "claim_node").claim_node,
    )
)
SAVEPOINT_STATEMENTS = ("SAVEPOINT ", "RELEASE SAVEPOINT ", "ROLLBACK TO SAVEPOINT ")

PROGRESS_EVERY_SECONDS = 0.25
DRAIN_TIMEOUT_SECONDS = 300.0
MARKER = "%qtg-bench%"
#: Wait-event samples per second during a profiled drain.
WAIT_SAMPLE_HZ = 50


@dataclass
class DrainResult:
    label: str
    processes: int
    reactive: bool
    notify: bool
    movements: int
    nodes_completed: int = 0
    nodes_claimed: int = 0
    span_s: float = 0.0
    wall_s: float = 0.0
    window_bounded: bool = False
    submissions: int = 0
    submission_nodes: int = 0
    duplicate_submits: int = 0
    statements: list[dict[str, Any]] = field(default_factory=list)
    xact_commits: int = 0  # write transactions over the drain (transaction ids)
    runtime_cpu_s: float = 0.0
    loop_thread_cpu_s: float = 0.0  # first runtime: its trio thread
    other_threads_cpu_s: float = 0.0  # first runtime: every other thread
    postgres_cpu_s: float = 0.0
    rss_after_mb: list[float] = field(default_factory=list)
    rss_trace_mb: list[float] = field(default_factory=list)  # first runtime, every progress tick
    queue: dict[str, list[int]] = field(default_factory=dict)  # node counts per progress sample
    wait_events: Counter[str] = field(default_factory=Counter)
    profile: profile.ProfileSummary | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def nodes_per_s(self) -> float:
        return self.nodes_completed / self.span_s if self.span_s > 0 else 0.0

    @property
    def round_trips(self) -> int:
        return sum(int(s["calls"]) for s in self.statements)

    @property
    def commits(self) -> int:
        return self.xact_commits

    def queue_mean(self, state: str) -> float:
        values = self.queue.get(state, [])
        return sum(values) / len(values) if values else 0.0

    def per_node(self, count: int) -> float:
        return count / self.nodes_completed if self.nodes_completed else float("nan")

    @property
    def commits_per_s(self) -> float:
        """Commits per node at the drain's node rate (start-up and idle tail left out)."""
        return self.per_node(self.commits) * self.nodes_per_s if self.nodes_completed else 0.0


async def drain(
    server: PrivateServer,
    backlog_db: str,
    movements: int,
    *,
    label: str,
    processes: int = 1,
    reactive: bool = True,
    notify: bool = True,
    window_s: float | None = None,
    profile_s: float = 0.0,
) -> DrainResult:
    """One drain on a fresh clone of `backlog_db`; see the module docstring."""
    result = DrainResult(label, processes, reactive, notify, movements)
    name = f"qtg_bench_drain_{label}"
    dsn = await trio.to_thread.run_sync(server.create_database, name, backlog_db)
    try:
        if not notify:
            await trio.to_thread.run_sync(_admin, server, SQL.notify_off.text, name)
        await _drain(server, dsn, name, result, window_s, profile_s)
    finally:
        await trio.to_thread.run_sync(server.drop_database, name)
    return result


async def _drain(
    server: PrivateServer,
    dsn: str,
    name: str,
    result: DrainResult,
    window_s: float | None,
    profile_s: float,
) -> None:
    env = procs.runtime_env(dsn, reactive=result.reactive)
    args = procs.launcher_args()
    monitor = await trio.to_thread.run_sync(_connect, dsn)
    gate = await trio.to_thread.run_sync(_connect, dsn, False)
    try:
        await trio.to_thread.run_sync(gate.execute, SQL.start_gate.text)
        names = [f"{name}_{i}" for i in range(result.processes)]
        async with procs.runtimes(names, env, args) as runtimes:
            pids = [rt.pid for rt in runtimes]
            pg_before = procs.cpu_by_pid(server.postgres_pids())
            rt_before = procs.cpu_seconds(pids)
            first_before = procs.cpu_seconds(pids[:1])
            loop_before = procs.thread_cpu(pids[0]).get(pids[0], 0.0)
            commits_before = await trio.to_thread.run_sync(_commits, monitor, name)
            released = time.monotonic()
            await trio.to_thread.run_sync(gate.commit)  # the gate opens

            async with trio.open_nursery() as side:
                sampler = _WaitSampler(server, name) if profile_s else None
                if sampler is not None:
                    side.start_soon(trio.to_thread.run_sync, sampler.run)
                    side.start_soon(_record_profile, runtimes[0].pid, profile_s, result)
                limit = window_s or (profile_s or DRAIN_TIMEOUT_SECONDS)
                finished = await _wait_drained(monitor, result, limit, runtimes[0])
                if sampler is not None:
                    sampler.stop()
            result.wall_s = time.monotonic() - released
            result.xact_commits = (
                await trio.to_thread.run_sync(_commits, monitor, name) - commits_before
            )
            result.runtime_cpu_s = procs.cpu_seconds(pids) - rt_before
            result.loop_thread_cpu_s = procs.thread_cpu(pids[0]).get(pids[0], 0.0) - loop_before
            result.other_threads_cpu_s = (
                procs.cpu_seconds(pids[:1]) - first_before - result.loop_thread_cpu_s
            )
            pg_after = procs.cpu_by_pid(server.postgres_pids())
            result.postgres_cpu_s = sum(
                cpu - pg_before.get(pid, 0.0) for pid, cpu in pg_after.items()
            )
            if sampler is not None:
                result.wait_events = sampler.counts
            result.window_bounded = not finished
            if not finished and window_s is None and not profile_s:
                result.problems.append(f"{name}: not drained within {DRAIN_TIMEOUT_SECONDS:g} s")
            await trio.to_thread.run_sync(_collect, monitor, server, name, result)
            result.rss_after_mb = [rt.rss_mb() for rt in runtimes]
            for rt in runtimes:
                result.problems.extend(f"{rt.name}: {p}" for p in rt.problems())
    finally:
        await trio.to_thread.run_sync(gate.close)
        await trio.to_thread.run_sync(monitor.close)


async def _wait_drained(
    monitor: psycopg.Connection[Any], result: DrainResult, limit_s: float, rt: procs.Runtime
) -> bool:
    """Until every movement is COMPLETED (True) or `limit_s` passed (False).

    Every tick also records the backlog by node state and `rt`'s resident memory."""
    with trio.move_on_after(limit_s):
        while True:
            progress = await trio.to_thread.run_sync(_fetchone, monitor, SQL.drain_progress.text)
            if progress["stuck"]:
                raise RuntimeError(
                    f"{result.label}: {progress['stuck']} movements stopped short of COMPLETED"
                )
            for state in ("ready", "submitting", "observing"):
                result.queue.setdefault(state, []).append(int(progress[state]))
            result.rss_trace_mb.append(rt.rss_mb())
            if progress["completed"] == progress["total"]:
                return True
            await trio.sleep(PROGRESS_EVERY_SECONDS)
    return False


def _collect(
    monitor: psycopg.Connection[Any], server: PrivateServer, name: str, result: DrainResult
) -> None:
    window = _fetchone(monitor, SQL.drain_window.text)
    result.nodes_completed = int(window["nodes_completed"])
    result.nodes_claimed = int(window["nodes_claimed"])
    if window["first_claim"] is not None:
        end = window["last_completion"] if not result.window_bounded else window["now"]
        if end is not None:
            result.span_s = (end - window["first_claim"]).total_seconds()
    subs = _fetchone(monitor, SQL.submissions.text)
    result.submissions = int(subs["submissions"])
    result.submission_nodes = int(subs["nodes"])
    result.duplicate_submits = int(subs["duplicates"])
    if not server.stat_statements:
        result.problems.append("pg_stat_statements is not available: round trips not counted")
        return
    with server.admin() as admin:
        admin.row_factory = dict_row  # type: ignore[assignment]
        statements = admin.execute(SQL.statements.text, {"db": name, "marker": MARKER}).fetchall()
    result.statements = with_savepoints(statements)


def with_savepoints(statements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """pg_stat_statements stops seeing SAVEPOINT / RELEASE once psycopg prepares them
    (after 5 uses on a connection), so their counted calls are replaced by what the
    claims imply: each claim runs inside one SAVEPOINT … RELEASE pair (a miss adds a
    ROLLBACK TO, not counted: the figure is a lower bound)."""
    claims = sum(
        int(s["calls"])
        for s in statements
        if any(s["query"].startswith(prefix) for prefix in CLAIM_PREFIXES)
    )
    kept = [s for s in statements if not s["query"].startswith(SAVEPOINT_STATEMENTS)]
    kept.append(
        {
            "query": "SAVEPOINT / RELEASE SAVEPOINT (2 per claim, inferred)",
            "calls": 2 * claims,
            "exec_ms": 0.0,
        }
    )
    return sorted(kept, key=lambda s: -int(s["calls"]))


async def _record_profile(pid: int, seconds: float, result: DrainResult) -> None:
    result.profile = await profile.record(pid, seconds)


class _WaitSampler:
    """Samples what the runtime's backends wait on, from a thread, until stopped."""

    def __init__(self, server: PrivateServer, dbname: str) -> None:
        self._server = server
        self._db = dbname
        self._stop = threading.Event()
        self.counts: Counter[str] = Counter()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        with self._server.admin() as conn:
            while not self._stop.is_set():
                rows = conn.execute(
                    SQL.wait_events.text, {"db": self._db, "app": "qtg-runtime:%"}
                ).fetchall()
                for state, wait_type, wait_event in rows:
                    self.counts[f"{state} | {wait_type}:{wait_event}"] += 1
                self._stop.wait(1 / WAIT_SAMPLE_HZ)


def _connect(dsn: str, autocommit: bool = True) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=autocommit, row_factory=dict_row)


def _commits(conn: psycopg.Connection[Any], name: str) -> int:
    """The server's next transaction id (bench/sql/database_commits.sql): the
    drain is the only writer on the private server while it runs."""
    return int(_fetchone(conn, SQL.database_commits.text)["next_xid"])


def _fetchone(conn: psycopg.Connection[Any], text: str) -> dict[str, Any]:
    row = conn.execute(text).fetchone()  # type: ignore[call-overload]
    assert row is not None
    return row


def _admin(server: PrivateServer, text: str, dbname: str) -> None:
    with server.admin() as conn:
        conn.execute(sql.SQL(text).format(db=sql.Identifier(dbname)))
