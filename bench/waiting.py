"""`python -m bench.waiting`: the cost of *waiting* work (issue 29 item 1).

    .venv/bin/python -m bench.waiting                      # N = 1k, 10k, 50k; 1 and 2 runtimes
    .venv/bin/python -m bench.waiting --sizes 1000 --window 20 --burst-tail 20   # a quick try

N movements are in flight, each one observe node that stays PENDING (the
sandbox's `observations_to_complete` = 10^6) at the reference's 10 s interval
(`destination_chain_receive_observe`). The machinery is `python -m bench`'s:
its own PostgreSQL (bench/server.py), real `bin/qtg-runtime` processes,
movements created and approved through the engine's own functions, times
between PostgreSQL commit times, CPU from /proc, "others" from /proc/stat.

Per size, on one database:

1. **Burst.** The N movements were created (PENDING_APPROVAL) on a schema
   whose statistics were taken while it was empty, with autovacuum off for
   every table of that database (per-table `autovacuum_enabled = off`; the
   server's autovacuum stays on). One runtime runs; the benchmark approves
   the N movements as fast as it can (8 at a time), and the observation lag
   is taken over the burst and the minute after it (`--burst-tail`).
2. **Steady, one runtime.** ANALYZE, autovacuum back on; once every node has
   been observed since (the first full cycle, at most `--cycle-limit` s), a
   window of `--window` s: lag, observations per second, CPU, statements,
   write commits and table growth per observation, RSS; then the pickup of
   fresh one-action movements (READY commit → SUBMITTING commit), one at a
   time, while the N wait.
3. **Steady, two runtimes.** A second runtime joins; after one interval, the
   same window and pickups.

Observation lag: an observation's due time is the next_observe_at the
previous observation wrote (the first one's: the node's started_at, when
dispatch set it OBSERVING, due at once); it is observed when the observer's
write of "still pending, next at T" commits (the xmin of the node's row,
pg_xact_commit_timestamp). A sampler reads the rows written since its last
pass every SAMPLE_SECONDS (see bench/sql/waiting_sample.sql); an observation
is counted in a window when its commit falls inside it. Nodes overdue at the
end of a window (not observed yet, so not in the lag) are reported beside it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import trio
from psycopg import sql
from psycopg.rows import dict_row

from bench import databases, latency, load, procs, profile, workload
from bench.__main__ import code_version, machine
from bench.queries import bench_sql
from bench.server import PrivateServer
from bench.stats import Summary
from bench.throughput import MARKER
from qtg.db import Database, ListenHub, sql_family
from qtg.domain.observe_policy import observe_interval
from qtg.services.templates import create_template

SQL = bench_sql(
    "waiting_sample",
    "waiting_totals",
    "waiting_growth",
    "db_now",
    "user_tables",
    "autovacuum_table",
    "analyze",
    "backend_pid",
    "statements",
    "database_commits",
)

RESULTS = Path(__file__).resolve().parent / "results"

WAITING = "bench.one_observation_pending"
#: An observe lane at the reference's default 10 s interval.
ACTION_TYPE = "destination_chain_receive_observe"
INTERVAL_S = observe_interval(ACTION_TYPE, None)
OBSERVATIONS_TO_COMPLETE = 1_000_000

TEMPLATE: dict[str, Any] = {
    "template_key": WAITING,
    "name": "Benchmark: one observation that stays pending",
    "graph": {
        "nodes": [
            {
                "key": "watch",
                "kind": "observe",
                "action_type": ACTION_TYPE,
                "executor_key": "sandbox",
                "config": {"sandbox": {"observations_to_complete": OBSERVATIONS_TO_COMPLETE}},
            }
        ],
        "edges": [],
    },
}

#: Tables a waiting movement can grow (rows and bytes reported per hour).
GROWTH_TABLES = (
    "movement_events",
    "node_state_transitions",
    "request_state_transitions",
    "audit_events",
    "audit_outbox",
    "movement_callback_outbox",
    "notifications",
    "notification_messages",
    "worker_heartbeats",
    "movement_request_nodes",
    "sandbox_observations",
)

#: The observer's batch claim, recognised in pg_stat_statements by its text up to
#: the first parameter: its time per call is what collapses on stale statistics.
CLAIM_PREFIX = sql_family("observe", "claim_batch").claim_batch.text.split("%(")[0]

#: Of GROWTH_TABLES, those that only grow (history); the others are updated in
#: place (nodes, the sandbox's observation counters, heartbeats: their bytes are
#: bloat until vacuumed) or are queues (audit_outbox: emptied by the promoter).
HISTORY_TABLES = (
    "movement_events",
    "node_state_transitions",
    "request_state_transitions",
    "audit_events",
    "movement_callback_outbox",
    "notifications",
    "notification_messages",
)

SAMPLE_SECONDS = 2.5
#: A row comes back from the sampler while next_observe_at > previous sample + interval - this.
SAMPLE_MARGIN_S = 1.0
APPROVE_CONCURRENCY = 8
CREATE_CONCURRENCY = 8
PICKUP_WARMUP = 5
#: Sizes from which the catch-up after the burst is profiled (--profile).
PROFILE_MIN_SIZE = 10_000


# ------------------------------------------------------------------ pure helpers


@dataclass(frozen=True, slots=True)
class Observation:
    """One observation of a waiting node: when it was due and when its write committed."""

    node_id: Any
    count: int
    due: datetime
    committed: datetime

    @property
    def lag_s(self) -> float:
        return (self.committed - self.due).total_seconds()


class ObservationTracker:
    """Turns samples of waiting nodes' rows into observations.

    A row (id, observe_count, next_observe_at, started_at, committed) is what
    the observer wrote for its observe_count-th observation. That observation
    was due at the next_observe_at written by the one before (count - 1), or,
    for the first, at the node's started_at. An observation whose predecessor
    was not seen (it fell between two samples) has no known due time and is
    left out; a row seen again (same count) adds nothing.
    """

    def __init__(self) -> None:
        self._last: dict[Any, tuple[int, datetime]] = {}

    def feed(self, rows: Iterable[Mapping[str, Any]]) -> list[Observation]:
        found = []
        for row in rows:
            node, count = row["id"], int(row["observe_count"])
            last = self._last.get(node)
            if last is not None and last[0] >= count:
                continue
            if count == 1:
                due = row["started_at"]
            elif last is not None and last[0] == count - 1:
                due = last[1]
            else:
                due = None
            self._last[node] = (count, row["next_observe_at"])
            if due is not None and row["committed"] is not None:
                found.append(Observation(node, count, due, row["committed"]))
        return found


def committed_between(
    observations: Iterable[Observation], start: datetime, end: datetime
) -> list[Observation]:
    return [o for o in observations if start <= o.committed < end]


def lag_summary_s(observations: Sequence[Observation]) -> Summary:
    return Summary.of([o.lag_s for o in observations])


def per_hour(delta: float, seconds: float) -> float:
    """A growth over `seconds`, extrapolated to one hour."""
    return delta * 3600 / seconds if seconds > 0 else math.nan


def statement_deltas(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """pg_stat_statements rows (query, calls, exec_ms) after minus before, busiest first."""
    old = {r["query"]: (int(r["calls"]), float(r["exec_ms"])) for r in before}
    out = []
    for r in after:
        calls0, ms0 = old.get(r["query"], (0, 0.0))
        calls = int(r["calls"]) - calls0
        if calls > 0:
            out.append({"query": r["query"], "calls": calls, "exec_ms": float(r["exec_ms"]) - ms0})
    return sorted(out, key=lambda s: -s["exec_ms"])


# ------------------------------------------------------------------ results


@dataclass
class Case:
    size: int
    phase: str  # "burst", "steady"
    runtimes: int
    window_s: float = 0.0
    note: str = ""
    lag: Summary = field(default_factory=lambda: Summary.of([]))
    observations: int = 0  # observe_count growth over the window (every observation)
    overdue_end: int = 0
    oldest_due_end_s: float = 0.0
    runtime_cpu_s: float = 0.0
    postgres_cpu_s: float = 0.0
    statements: list[dict[str, Any]] = field(default_factory=list)
    commits: int = 0
    rss_mb: list[float] = field(default_factory=list)
    growth: dict[str, tuple[int, int]] = field(default_factory=dict)  # table → (rows, bytes)
    pickup: Summary | None = None
    others: float = 0.0
    busy: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def per_s(self) -> float:
        return self.observations / self.window_s if self.window_s else math.nan

    def per_obs(self, value: float) -> float:
        return value / self.observations if self.observations else math.nan

    def claim(self) -> tuple[int, float]:
        """The observer's batch claims in the window: calls, mean ms."""
        calls = sum(int(s["calls"]) for s in self.statements if s["query"].startswith(CLAIM_PREFIX))
        ms = sum(s["exec_ms"] for s in self.statements if s["query"].startswith(CLAIM_PREFIX))
        return calls, ms / calls if calls else math.nan

    @property
    def calls(self) -> int:
        return sum(int(s["calls"]) for s in self.statements)

    def growth_per_hour(self) -> tuple[float, float]:
        """Rows and bytes per hour of the history tables (in-place and queue tables left out)."""
        rows = sum(r for t, (r, _) in self.growth.items() if t in HISTORY_TABLES)
        size = sum(b for t, (_, b) in self.growth.items() if t in HISTORY_TABLES)
        return per_hour(rows, self.window_s), per_hour(size, self.window_s)


@dataclass
class Results:
    started: str
    command: str
    code: str
    machine: str
    server: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    idle_pickup: dict[int, Summary] = field(default_factory=dict)
    cases: list[Case] = field(default_factory=list)
    created: dict[int, float] = field(default_factory=dict)  # size → seconds to create
    approved: dict[int, float] = field(default_factory=dict)  # size → seconds of the burst
    others_total: float = 0.0
    problems: list[str] = field(default_factory=list)
    profiles: dict[int, profile.ProfileSummary] = field(default_factory=dict)  # size → py-spy


# ------------------------------------------------------------------ database edge


def _connect(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row)


def _one(
    conn: psycopg.Connection[Any], text: str, params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    row = conn.execute(text, params).fetchone()  # type: ignore[call-overload]
    assert row is not None
    return row


def _set_autovacuum(dsn: str, on: bool) -> None:
    options = sql.SQL("RESET (autovacuum_enabled)" if on else "SET (autovacuum_enabled = off)")
    with _connect(dsn) as conn:
        for row in conn.execute(SQL.user_tables.text).fetchall():
            conn.execute(
                sql.SQL(SQL.autovacuum_table.text).format(
                    table=sql.Identifier(row["relname"]), options=options
                )
            )


def _analyze(dsn: str) -> None:
    with _connect(dsn) as conn:
        conn.execute(SQL.analyze.text)


def _growth(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, int]]:
    out = {}
    for table in GROWTH_TABLES:
        row = _one(
            conn,
            sql.SQL(SQL.waiting_growth.text).format(  # type: ignore[arg-type]
                table=sql.Identifier(table)
            ),
            {"name": table},
        )
        out[table] = (int(row["rows"]), int(row["bytes"]))
    return out


class Sampler:
    """Reads the waiting nodes written since its last pass, every SAMPLE_SECONDS."""

    def __init__(self, dsn: str) -> None:
        self.conn = _connect(dsn)
        self.pid = int(_one(self.conn, SQL.backend_pid.text)["pid"])
        self.tracker = ObservationTracker()
        self.observations: list[Observation] = []
        self._since: datetime | None = None

    def sample(self) -> None:
        now = _one(self.conn, SQL.db_now.text)["now"]
        since = self._since or datetime.min.replace(tzinfo=dt.UTC)
        rows = self.conn.execute(SQL.waiting_sample.text, {"since": since}).fetchall()
        self.observations.extend(self.tracker.feed(rows))
        self._since = now + dt.timedelta(seconds=INTERVAL_S - SAMPLE_MARGIN_S)

    async def run(self) -> None:
        while True:
            await trio.to_thread.run_sync(self.sample)
            await trio.sleep(SAMPLE_SECONDS)

    def close(self) -> None:
        self.conn.close()


@dataclass
class Mark:
    db_now: datetime
    totals: dict[str, Any]
    statements: list[dict[str, Any]]
    next_xid: int
    runtime_cpu: float
    postgres_cpu: dict[int, float]
    growth: dict[str, tuple[int, int]]
    load: load.Mark


class Probe:
    """Everything a window reads at its start and end, on one connection."""

    def __init__(
        self,
        server: PrivateServer,
        dsn: str,
        dbname: str,
        monitor: load.LoadMonitor,
        ours: list[int],
    ) -> None:
        self.server = server
        self.dbname = dbname
        self.monitor = monitor
        self.conn = _connect(dsn)
        self.pid = int(_one(self.conn, SQL.backend_pid.text)["pid"])
        self.ours = [*ours, self.pid]  # the benchmark's own backends: not qtg's CPU

    def totals(self, cycle_start: datetime | None = None) -> dict[str, Any]:
        return _one(
            self.conn,
            SQL.waiting_totals.text,
            {
                "cycle_start": cycle_start or datetime.min.replace(tzinfo=dt.UTC),
                "interval_s": INTERVAL_S,
            },
        )

    def now(self) -> datetime:
        return _one(self.conn, SQL.db_now.text)["now"]

    def statements(self) -> list[dict[str, Any]]:
        if not self.server.stat_statements:
            return []
        with self.server.admin() as admin:
            admin.row_factory = dict_row  # type: ignore[assignment]
            return admin.execute(
                SQL.statements.text, {"db": self.dbname, "marker": MARKER}
            ).fetchall()

    def mark(self, runtime_pids: list[int]) -> Mark:
        growth = _growth(self.conn)
        statements = self.statements()
        pg = procs.cpu_by_pid([p for p in self.server.postgres_pids() if p not in self.ours])
        return Mark(
            db_now=self.now(),
            totals=self.totals(),
            statements=statements,
            next_xid=int(_one(self.conn, SQL.database_commits.text)["next_xid"]),
            runtime_cpu=procs.cpu_seconds(runtime_pids),
            postgres_cpu=pg,
            growth=growth,
            load=self.monitor.mark(),
        )

    def close(self) -> None:
        self.conn.close()


def fill(case: Case, start: Mark, end: Mark, sampler: Sampler) -> None:
    """The window's figures from its two marks and the sampled observations."""
    case.window_s = (end.db_now - start.db_now).total_seconds()
    case.lag = lag_summary_s(committed_between(sampler.observations, start.db_now, end.db_now))
    case.observations = int(end.totals["observations"]) - int(start.totals["observations"])
    case.overdue_end = int(end.totals["overdue"])
    case.oldest_due_end_s = max(0.0, float(end.totals["oldest_due_s"]))
    case.runtime_cpu_s = end.runtime_cpu - start.runtime_cpu
    case.postgres_cpu_s = sum(
        cpu - start.postgres_cpu.get(pid, 0.0) for pid, cpu in end.postgres_cpu.items()
    )
    case.statements = statement_deltas(start.statements, end.statements)
    # the probe's own statements carry the marker; commits: the server's next xid
    case.commits = end.next_xid - start.next_xid
    case.growth = {
        t: (end.growth[t][0] - start.growth[t][0], end.growth[t][1] - start.growth[t][1])
        for t in GROWTH_TABLES
    }
    case.others = load.LoadMonitor.others_share(start.load, end.load)
    case.busy = load.LoadMonitor.busy_share(start.load, end.load)


# ------------------------------------------------------------------ the run


class WaitingBench:
    def __init__(
        self,
        server: PrivateServer,
        monitor: load.LoadMonitor,
        results: Results,
        args: argparse.Namespace,
    ) -> None:
        self.server = server
        self.monitor = monitor
        self.r = results
        self.a = args
        self.t0 = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f} s] {text}", file=sys.stderr, flush=True)

    def checkpoint(self) -> None:
        """The table so far, written after every size: a long run that stops keeps them."""
        self.a.output.parent.mkdir(parents=True, exist_ok=True)
        self.a.output.write_text(build(self.r), encoding="utf-8")

    async def run(self) -> None:
        server = self.server
        base = await databases.prepare_base(server)
        base_dsn = server.dsn(base)
        async with Database(base_dsn, min_size=1, max_size=2) as db:
            await create_template(db, actor="bench-admin", **TEMPLATE)
        # statistics of the empty schema, and no autovacuum to refresh them
        await trio.to_thread.run_sync(_analyze, base_dsn)
        await trio.to_thread.run_sync(_set_autovacuum, base_dsn, False)
        self.r.server = server.settings()

        for runtimes in range(1, max(self.a.runtimes) + 1):
            if runtimes in self.a.runtimes:
                self.r.idle_pickup[runtimes] = await self.idle_pickup(base, runtimes)
                self.say(f"idle pickup, {runtimes} runtime(s): {_ms(self.r.idle_pickup[runtimes])}")

        previous, made = base, 0
        for size in sorted(self.a.sizes):
            created = f"qtg_bench_waiting_created_{size}"
            began = time.monotonic()
            dsn = await trio.to_thread.run_sync(server.create_database, created, previous)
            async with Database(dsn, min_size=1, max_size=CREATE_CONCURRENCY + 1) as db:
                await workload.create_movements(
                    db,
                    workload.settings_for(dsn),
                    WAITING,
                    size - made,
                    tag=f"w{size}",
                    approve=False,
                    concurrency=CREATE_CONCURRENCY,
                )
                await workload.settle_audit(db)
            self.r.created[size] = time.monotonic() - began
            self.say(
                f"{size} waiting movements created ({size - made} new) in "
                f"{self.r.created[size]:.0f} s"
            )
            if previous != base:
                await trio.to_thread.run_sync(server.drop_database, previous)
            previous, made = created, size
            try:
                await self.one_size(size, created)
            except Exception as exc:  # the sizes before keep their figures
                self.r.problems.append(f"{size}: the run stopped: {type(exc).__name__}: {exc}")
                self.say(self.r.problems[-1])
                break
            finally:
                self.checkpoint()
        if previous != base:
            await trio.to_thread.run_sync(server.drop_database, previous)

    async def idle_pickup(self, base: str, runtimes: int) -> Summary:
        name = f"qtg_bench_waiting_idle_{runtimes}"
        dsn = await trio.to_thread.run_sync(self.server.create_database, name, base)
        try:
            await trio.to_thread.run_sync(_set_autovacuum, dsn, True)
            async with Database(dsn, min_size=1, max_size=4) as db:
                ids = await self.pickup_movements(db, dsn, f"idle{runtimes}")
                await trio.to_thread.run_sync(_analyze, dsn)
                env = procs.runtime_env(dsn, reactive=True)
                names = [f"{name}_{i}" for i in range(runtimes)]
                async with procs.runtimes(names, env, procs.launcher_args()):
                    return await self.pickups(db, ids)
        finally:
            await trio.to_thread.run_sync(self.server.drop_database, name)

    async def pickup_movements(self, db: Database, dsn: str, tag: str) -> list[Any]:
        ids = await workload.create_movements(
            db,
            workload.settings_for(dsn),
            workload.ONE_ACTION,
            PICKUP_WARMUP + self.a.pickups,
            tag=f"pickup-{tag}",
            approve=False,
        )
        await workload.settle_audit(db)
        return ids

    async def pickups(self, db: Database, ids: list[Any]) -> Summary:
        """Approve one at a time, each once the one before was claimed (bench/latency.py's
        wait, on qtg_events); READY commit → SUBMITTING commit."""
        hub = ListenHub(db.dsn, channels=("qtg_events",))
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.run)
            events = hub.subscribe("qtg_events")
            for request_id in ids:
                events.clear()
                await workload.approve(db, request_id)
                await latency._wait(db, latency.PICKUP_POLLING, request_id, events)
            nursery.cancel_scope.cancel()
        rows = await db.fetch(latency.SQL.pickup_latencies, {"ids": ids[PICKUP_WARMUP:]})
        return Summary.of([float(r["ms"]) for r in rows])

    async def one_size(self, size: int, created: str) -> None:
        server, a = self.server, self.a
        name = f"qtg_bench_waiting_{size}"
        dsn = await trio.to_thread.run_sync(server.create_database, name, created)
        env = procs.runtime_env(dsn, reactive=True)
        args = procs.launcher_args()
        try:
            async with Database(dsn, min_size=1, max_size=APPROVE_CONCURRENCY + 1) as db:
                waiting = [r["id"] for r in await db.fetch(_WAITING_IDS)]
                pickup_ids = {
                    n: await self.pickup_movements(db, dsn, f"{size}-{n}")
                    for n in range(1, max(a.runtimes) + 1)
                    if n in a.runtimes
                }
                sampler = await trio.to_thread.run_sync(Sampler, dsn)
                probe = await trio.to_thread.run_sync(
                    Probe, server, dsn, name, self.monitor, [sampler.pid]
                )
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(sampler.run)
                        async with procs.runtime(f"{name}_0", env, args) as first:
                            await self.burst(size, db, waiting, [first], probe, sampler)
                            await trio.to_thread.run_sync(_analyze, dsn)
                            await trio.to_thread.run_sync(_set_autovacuum, dsn, True)
                            async with trio.open_nursery() as catching_up:
                                if a.profile and size >= a.profile_from:
                                    catching_up.start_soon(self.profile, size, first.pid)
                                await self.first_cycle(size, probe)
                            if 1 in a.runtimes:
                                await self.steady(
                                    size, [first], probe, sampler, db, pickup_ids.get(1)
                                )
                            if 2 in a.runtimes:
                                async with procs.runtime(f"{name}_1", env, args) as second:
                                    await trio.sleep(INTERVAL_S)  # one interval to share work
                                    await self.steady(
                                        size, [first, second], probe, sampler, db, pickup_ids.get(2)
                                    )
                        nursery.cancel_scope.cancel()
                finally:
                    await trio.to_thread.run_sync(probe.close)
                    await trio.to_thread.run_sync(sampler.close)
        finally:
            await trio.to_thread.run_sync(server.drop_database, name)

    async def burst(
        self,
        size: int,
        db: Database,
        waiting: list[Any],
        rts: list[procs.Runtime],
        probe: Probe,
        sampler: Sampler,
    ) -> None:
        """Two cases: while the N approvals run, and the --burst-tail seconds after them."""
        note = "statistics of the empty schema, autovacuum off for its tables"
        pids = [rt.pid for rt in rts]
        start = await trio.to_thread.run_sync(probe.mark, pids)
        began = time.monotonic()
        await workload.approve_all(db, waiting, concurrency=APPROVE_CONCURRENCY)
        self.r.approved[size] = time.monotonic() - began
        self.say(f"{size}: burst of approvals took {self.r.approved[size]:.1f} s")
        mid = await trio.to_thread.run_sync(probe.mark, pids)
        await trio.sleep(self.a.burst_tail)
        end = await trio.to_thread.run_sync(probe.mark, pids)
        for phase, first, last in (
            ("burst: the approvals", start, mid),
            (f"burst: the {self.a.burst_tail:g} s after", mid, end),
        ):
            case = Case(size, phase, len(rts), note=note)
            fill(case, first, last, sampler)
            case.rss_mb = [rt.rss_mb() for rt in rts]
            self.r.cases.append(case)
            self.say(f"{size} {phase}: {_case_line(case)}")
        for rt in rts:
            case.problems.extend(f"{rt.name}: {p}" for p in rt.problems())

    async def profile(self, size: int, pid: int) -> None:
        """py-spy on the first runtime while it catches up (outside every measured window)."""
        self.r.profiles[size] = await profile.record(pid, self.a.profile)

    async def first_cycle(self, size: int, probe: Probe) -> None:
        """Until every waiting node was observed since now (at most --cycle-limit s)."""
        cycle_start = await trio.to_thread.run_sync(probe.now)
        began = time.monotonic()
        with trio.move_on_after(self.a.cycle_limit):
            while True:
                totals = await trio.to_thread.run_sync(probe.totals, cycle_start)
                if int(totals["not_cycled"]) == 0:
                    self.say(f"{size}: first full cycle after {time.monotonic() - began:.0f} s")
                    return
                await trio.sleep(1.0)
        self.say(f"{size}: no full cycle within {self.a.cycle_limit:g} s; measuring anyway")

    async def steady(
        self,
        size: int,
        rts: list[procs.Runtime],
        probe: Probe,
        sampler: Sampler,
        db: Database,
        pickup_ids: list[Any] | None,
    ) -> None:
        case = Case(size, "steady", len(rts), note="fresh statistics, autovacuum on")
        pids = [rt.pid for rt in rts]
        start = await trio.to_thread.run_sync(probe.mark, pids)
        await trio.sleep(self.a.window)
        end = await trio.to_thread.run_sync(probe.mark, pids)
        fill(case, start, end, sampler)
        case.rss_mb = [rt.rss_mb() for rt in rts]
        if pickup_ids:
            case.pickup = await self.pickups(db, pickup_ids)
        for rt in rts:
            case.problems.extend(f"{rt.name}: {p}" for p in rt.problems())
        self.r.cases.append(case)
        self.say(f"{size} steady, {len(rts)} runtime(s): {_case_line(case)}")


_WAITING_IDS = bench_sql("waiting_pending_ids").waiting_pending_ids


# ------------------------------------------------------------------ report


def _f(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:,.{digits}f}"


def _ms(s: Summary | None) -> str:
    if s is None or not s.n:
        return "—"
    return f"p50 {_f(s.p50, 2)}, p99 {_f(s.p99, 2)} ms (n={s.n})"


def _case_line(c: Case) -> str:
    return (
        f"lag p50 {_f(c.lag.p50, 2)} / p99 {_f(c.lag.p99, 2)} / max {_f(c.lag.max, 1)} s "
        f"(n={c.lag.n}), {_f(c.per_s, 0)} obs/s, overdue at end {c.overdue_end} "
        f"(oldest {_f(c.oldest_due_end_s, 0)} s), pickup {_ms(c.pickup)}"
    )


def build(r: Results) -> str:
    out = [
        f"# qtg waiting-work benchmark — {r.started}\n",
        f"- command: `{r.command}`",
        f"- qtg: {r.code}",
        f"- machine: {r.machine}",
        "- PostgreSQL (private server, see bench/server.py): "
        + ", ".join(f"{k}={v}" for k, v in sorted(r.server.items())),
        "- options: " + ", ".join(f"{k}={v}" for k, v in r.options.items()),
        f"- waiting node: one `{ACTION_TYPE}` observe node per movement (sandbox, "
        f"observations_to_complete={OBSERVATIONS_TO_COMPLETE:,}), interval {INTERVAL_S:g} s",
        "- lag = due time → commit of the observer's write; burst = while the N movements "
        "are approved (8 at a time, one runtime running), and the seconds after, on "
        "statistics of the empty schema with autovacuum off for its tables; steady = after "
        "ANALYZE (autovacuum on) and one full cycle",
        "- growth/h = rows and bytes per hour of the history tables ("
        + ", ".join(HISTORY_TABLES)
        + "); every table's in the details",
        '- "others" = CPU share of the 2 cores used by processes that are not the '
        "benchmark's while the figure was measured; over the whole run "
        f"{100 * r.others_total:.0f}%\n",
    ]
    out.append(
        "| N | case | window s | lag p50 / p99 / max s (n) | obs/s (needed) "
        "| overdue >1 s at end (oldest s) | CPU ms/obs runtime / PG "
        "| statements / commits per obs | RSS MB | growth/h rows, MB "
        "| pickup p50 / p99 ms (idle) | others |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c in r.cases:
        idle = r.idle_pickup.get(c.runtimes)
        rows, size = c.growth_per_hour()
        pickup = (
            "—"
            if c.pickup is None
            else (
                f"{_f(c.pickup.p50, 2)} / {_f(c.pickup.p99, 2)} "
                f"({_f(idle.p50, 2) if idle else '—'} / {_f(idle.p99, 2) if idle else '—'})"
            )
        )
        steady = c.phase == "steady"  # a burst's CPU, statements and growth are the approvals'
        cpu = (
            (
                f"{_f(1000 * c.per_obs(c.runtime_cpu_s), 2)} / "
                f"{_f(1000 * c.per_obs(c.postgres_cpu_s), 2)}"
            )
            if steady
            else "—"
        )
        per_obs = f"{_f(c.per_obs(c.calls), 2)} / {_f(c.per_obs(c.commits), 2)}" if steady else "—"
        growth = f"{_f(rows, 0)}, {_f(size / 1e6, 1)}" if steady else "—"
        out.append(
            f"| {c.size:,} | {c.phase}, {c.runtimes} runtime{'s' if c.runtimes > 1 else ''} "
            f"| {_f(c.window_s, 0)} "
            f"| {_f(c.lag.p50, 2)} / {_f(c.lag.p99, 2)} / {_f(c.lag.max, 1)} ({c.lag.n:,}) "
            f"| {_f(c.per_s, 0)} ({_f(c.size / INTERVAL_S, 0)}) "
            f"| {c.overdue_end:,} ({_f(c.oldest_due_end_s, 0)}) "
            f"| {cpu} | {per_obs} "
            f"| {' + '.join(_f(m, 0) for m in c.rss_mb)} "
            f"| {growth} | {pickup} | {100 * c.others:.0f}% |"
        )
    out.append(
        "\nPer case: CPU share of a core (runtime / PostgreSQL), the busiest statements "
        "(pg_stat_statements, by execution time), growth per hour by table.\n"
    )
    for c in r.cases:
        head = (
            f"- **{c.size:,} {c.phase}, {c.runtimes} runtime(s)** ({c.note}): "
            f"runtime {_f(100 * c.runtime_cpu_s / c.window_s if c.window_s else math.nan, 0)}"
            f" % of a core, PostgreSQL "
            f"{_f(100 * c.postgres_cpu_s / c.window_s if c.window_s else math.nan, 0)} %; "
            f"machine busy {100 * c.busy:.0f} %"
        )
        claims, claim_ms = c.claim()
        head += f"; observe batch claim {claims:,} calls, {_f(claim_ms, 2)} ms each"
        out.append(head)
        for s in c.statements[:3]:
            query = " ".join(s["query"].split())[:110]
            out.append(
                f"  - {s['calls']:,} calls, {_f(s['exec_ms'] / s['calls'], 3)} ms each, "
                f"{_f(s['exec_ms'], 0)} ms in all: `{query}`"
            )
        grown = [
            f"{t} {_f(per_hour(rows, c.window_s), 0)} rows / "
            f"{_f(per_hour(size, c.window_s) / 1e6, 1)} MB"
            for t, (rows, size) in c.growth.items()
            if rows or size
        ]
        if grown:
            out.append("  - per hour: " + "; ".join(grown))
    if r.created:
        out.append(
            "\nCreating the movements (engine's create_movement, 8 at a time; each size "
            "a clone of the one before plus the difference): "
            + ", ".join(f"{n:,} in {s:.0f} s" for n, s in r.created.items())
            + "; burst of approvals (approve_movement, 8 at a time, one runtime "
            "running): " + ", ".join(f"{n:,} in {s:.0f} s" for n, s in r.approved.items())
        )
    for size, prof in r.profiles.items():
        if prof.error:
            out.append(f"\npy-spy, {size:,}: {prof.error}")
            continue
        top = ", ".join(f"{k} {prof.share(v):.0f} %" for k, v in prof.categories.most_common(5))
        passes = ", ".join(f"{k} {prof.share(v):.0f} %" for k, v in prof.passes.most_common(4))
        out.append(
            f"\npy-spy of the first runtime, {size:,}, {prof.seconds:g} s of the catch-up "
            f"after the burst ({prof.samples:,} samples with the GIL): {top}; by pass: "
            f"{passes}"
        )
    problems = r.problems + [p for c in r.cases for p in c.problems]
    if problems:
        out.append("\n## Problems seen\n")
        out.extend(f"- {p}" for p in problems[:40])
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.waiting", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--sizes",
        default="1000,10000,50000",
        help="movements in flight, comma-separated (default 1000,10000,50000)",
    )
    parser.add_argument("--runtimes", default="1,2", help="1, 2 or 1,2 (default both)")
    parser.add_argument("--window", type=float, default=60.0, help="steady window, s")
    parser.add_argument(
        "--burst-tail",
        type=float,
        default=60.0,
        help="seconds measured after the burst of approvals",
    )
    parser.add_argument(
        "--cycle-limit", type=float, default=90.0, help="longest wait for the first full cycle, s"
    )
    parser.add_argument("--pickups", type=int, default=50, help="pickup samples per case")
    parser.add_argument(
        "--profile",
        type=float,
        default=15.0,
        help="seconds of py-spy on the first runtime during the catch-up after the burst (0: none)",
    )
    parser.add_argument(
        "--profile-from",
        type=int,
        default=PROFILE_MIN_SIZE,
        help="smallest size profiled (default %(default)s)",
    )
    parser.add_argument("--keep-server", action="store_true")
    parser.add_argument("--output", type=Path, default=RESULTS / "waiting-latest.md")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in str(args.sizes).split(",") if s.strip()]
    args.runtimes = sorted({int(s) for s in str(args.runtimes).split(",") if s.strip()})
    if not set(args.runtimes) <= {1, 2} or not args.sizes:
        parser.error("--runtimes takes 1 and/or 2; --sizes at least one size")

    results = Results(
        started=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        command="python -m bench.waiting " + " ".join(argv if argv is not None else sys.argv[1:]),
        code=code_version(),
        machine=machine(),
        options={
            "sizes": args.sizes,
            "runtimes": args.runtimes,
            "window_s": args.window,
            "burst_tail_s": args.burst_tail,
            "cycle_limit_s": args.cycle_limit,
            "pickups": args.pickups,
            "sample_s": SAMPLE_SECONDS,
            "profile_s": args.profile,
        },
    )
    with PrivateServer.running(keep=args.keep_server) as server:
        monitor = load.LoadMonitor(server.postgres_pids)
        bench = WaitingBench(server, monitor, results, args)

        async def run() -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, monitor.run)
                first = monitor.mark()
                try:
                    await bench.run()
                finally:
                    results.others_total = load.LoadMonitor.others_share(first, monitor.mark())
                    monitor.stop()

        trio.run(run)
    text = build(results)
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"written to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
