"""`python -m bench`: every benchmark of issue 7, one table, in a few minutes.

    .venv/bin/pip install -e '.[bench]'     # once: py-spy for the profile
    .venv/bin/python -m bench               # the full run (writes bench/results/latest.md)
    .venv/bin/python -m bench --quick       # smaller counts, to try the machinery
    .venv/bin/python -m bench --peers       # + PgQueuer, Procrastinate and DBOS in the same run
    .venv/bin/python -m bench --waiting     # only the waiting-work figures (bench/waiting.py)

Everything runs against a private PostgreSQL started for the run (bench/server.py)
with the sandbox provider and real `bin/qtg-runtime` processes; every
database and the server are removed at the end. Order: pgbench first (the
database's own limit), then the reactive figures one at a time (nothing else
of the benchmark running), then every polling figure side by side (idle
polling runtimes do not compete for CPU, and their figures are set by their
intervals).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import os
import platform
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from bench import databases, latency, load, memory, peers, report, roundtrip, throughput
from bench.server import PrivateServer

RESULTS = Path(__file__).resolve().parent / "results"
NOTIFY_SCRIPT = Path(__file__).resolve().parent / "pgbench" / "simple_update_notify.pgbench"


def scale(quick: bool) -> dict[str, Any]:
    full = {
        "backlog_movements": 2000,
        "pickup_samples": 500,
        "pickup_warmup": 20,
        "pickup_polling_samples": 30,
        "dag_samples": 200,
        "dag_warmup": 10,
        "dag_polling_samples": 8,
        "dag_polling_runtimes": 4,
        "drain_limit_s": 60,
        "polling_window_s": 40,
        "profile_s": 15,
        "pgbench_s": 10,
        "peer_drain_jobs": 20000,
    }
    if not quick:
        return full
    return {
        **full,
        "backlog_movements": 300,
        "pickup_samples": 100,
        "pickup_warmup": 10,
        "pickup_polling_samples": 5,
        "dag_samples": 40,
        "dag_warmup": 5,
        "dag_polling_samples": 2,
        "dag_polling_runtimes": 2,
        "drain_limit_s": 30,
        "polling_window_s": 12,
        "profile_s": 5,
        "pgbench_s": 4,
        "peer_drain_jobs": 3000,
    }


def code_version() -> str:
    """Which qtg was measured: the commit, and whether the engine had uncommitted edits."""
    if os.environ.get("QTG_BENCH_COMMIT"):
        return os.environ["QTG_BENCH_COMMIT"]
    repo = Path(__file__).resolve().parents[1]
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    dirty = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--", "qtg", "sql", "migrations"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return head.stdout.strip() + (" + uncommitted changes to qtg/sql" if dirty else "")


def machine() -> str:
    model = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    loads = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    return (
        f"{os.cpu_count()} cores ({model}), {mem_kb / 1024 / 1024:.0f} GiB RAM, "
        f"Linux {platform.release()}, Python {platform.python_version()}; "
        f"load average at start {loads}"
    )


class Bench:
    def __init__(
        self,
        server: PrivateServer,
        sizes: dict[str, Any],
        monitor: load.LoadMonitor,
        results: report.Results,
        polling: bool,
        with_peers: bool = False,
    ) -> None:
        self.server = server
        self.s = sizes
        self.monitor = monitor
        self.r = results
        self.polling = polling
        self.with_peers = with_peers
        self.t0 = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f} s] {text}", file=sys.stderr, flush=True)

    async def phase(self, name: str, fn: Callable[[], Awaitable[Any]]) -> Any:
        start = self.monitor.mark()
        began = time.monotonic()
        value = await fn()
        end = self.monitor.mark()
        self.r.others[name] = load.LoadMonitor.others_share(start, end)
        self.r.busy[name] = load.LoadMonitor.busy_share(start, end)
        self.r.durations[name] = time.monotonic() - began
        return value

    async def run(self) -> None:
        s, server = self.s, self.server
        base = await databases.prepare_base(server)
        self.r.server = server.settings()

        async def pgbench() -> None:
            await trio.to_thread.run_sync(server.create_database, "qtg_bench_pgbench")
            try:
                for key, clients, script in (
                    ("1", 1, None),
                    ("8", 8, None),
                    ("8+notify", 8, NOTIFY_SCRIPT),
                ):
                    self.r.pgbench_tps[key] = await trio.to_thread.run_sync(
                        lambda c=clients, f=script, k=key: server.pgbench(
                            "qtg_bench_pgbench",
                            clients=c,
                            seconds=s["pgbench_s"],
                            initialise=k == "1",
                            script=f,
                        )
                    )
            finally:
                await trio.to_thread.run_sync(server.drop_database, "qtg_bench_pgbench")

        await self.phase("pgbench", pgbench)
        self.say(f"pgbench: {self.r.pgbench_tps} TPS")
        self.r.round_trips = await self.phase(
            "round trips", lambda: roundtrip.measure(server, base)
        )
        self.say(
            "round trips: "
            + ", ".join(f"{k} {v.p50:.3f} ms" for k, v in self.r.round_trips.items())
        )

        for reactive in (True, False) if self.polling else (True,):
            self.r.idle[reactive] = await memory.idle_rss(server, base, reactive=reactive)
            self.say(
                f"idle RSS ({'reactive' if reactive else 'polling'}): "
                f"{self.r.idle[reactive].rss_mb:.1f} MB"
            )

        for spec, samples, warmup in (
            (latency.PICKUP, s["pickup_samples"], s["pickup_warmup"]),
            (latency.DAG, s["dag_samples"], s["dag_warmup"]),
        ):
            res = await self.phase(
                f"{spec.figure}-reactive",
                lambda spec=spec, n=samples, w=warmup: latency.measure(
                    server, base, spec, reactive=True, samples=n, warmup=w
                ),
            )
            self.r.latency[(spec.figure, True)] = res
            self.say(f"{spec.figure} reactive: {res.summary}")

        backlog, took = await databases.prepare_backlog(server, s["backlog_movements"])
        self.say(f"backlog of {s['backlog_movements']} approved movements made in {took:.0f} s")
        n = s["backlog_movements"]
        for label, kwargs in (
            ("1proc", {}),
            ("2proc", {"processes": 2}),
            ("notifyoff", {"notify": False}),
            ("profile", {"profile_s": s["profile_s"]}),
        ):
            key = f"{label}-reactive"
            limit = None if label == "profile" else s["drain_limit_s"]
            d = await self.phase(
                f"drain-{key}",
                lambda label=label, kwargs=kwargs, limit=limit: throughput.drain(
                    server, backlog, n, label=f"{label}_reactive", window_s=limit, **kwargs
                ),
            )
            self.r.drains[key] = d
            self.say(
                f"drain {key}: {d.nodes_per_s:.1f} nodes/s, {d.nodes_completed} nodes, "
                f"{d.per_node(d.round_trips):.1f} statements/node, "
                f"{d.per_node(d.commits):.2f} commits/node"
            )

        if self.with_peers:
            self.r.peers = await self.phase(
                "peers",
                lambda: peers.measure(
                    server,
                    pickup_samples=s["pickup_samples"],
                    pickup_warmup=s["pickup_warmup"],
                    drain_jobs=s["peer_drain_jobs"],
                ),
            )
            for p in self.r.peers:
                self.say(
                    f"peer {p.name}: pickup {p.pickup}, drain {p.jobs_per_s} {p.unit}/s, "
                    f"{p.cpu_ms_per_unit} cpu ms/unit"
                )

        if self.polling:
            await self.phase("polling", lambda: self.polling_phase(base, backlog))

    async def polling_phase(self, base: str, backlog: str) -> None:
        s, server = self.s, self.server
        n = s["backlog_movements"]

        async def lat(spec: latency.Spec, samples: int, runs: int) -> None:
            res = await latency.measure(
                server, base, spec, reactive=False, samples=samples, warmup=0, runs=runs
            )
            self.r.latency[(spec.figure, False)] = res
            self.say(f"{spec.figure} polling: {res.summary}")

        async def drain(label: str, **kwargs: Any) -> None:
            d = await throughput.drain(
                server,
                backlog,
                n,
                label=f"{label}_polling",
                reactive=False,
                window_s=s["polling_window_s"],
                **kwargs,
            )
            self.r.drains[f"{label}-polling"] = d
            self.say(f"drain {label}-polling: {d.nodes_per_s:.2f} nodes/s")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(lat, latency.PICKUP_POLLING, s["pickup_polling_samples"], 1)
            nursery.start_soon(
                lat, latency.DAG, s["dag_polling_samples"], s["dag_polling_runtimes"]
            )
            nursery.start_soon(drain, "1proc")
            nursery.start_soon(functools.partial(drain, "2proc", processes=2))
            nursery.start_soon(functools.partial(drain, "notifyoff", notify=False))


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--waiting"]:  # its own run and options: python -m bench.waiting --help
        from bench import waiting

        return waiting.main(args_in[1:])
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts (a minute or two)")
    parser.add_argument(
        "--no-polling", action="store_true", help="skip the MG_REACTIVE=false figures"
    )
    parser.add_argument(
        "--keep-server",
        action="store_true",
        help="keep the private server's folder (its log) after the run",
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help="also measure PgQueuer, Procrastinate and DBOS (bench extra) side by side",
    )
    parser.add_argument("--output", type=Path, default=RESULTS / "latest.md")
    args = parser.parse_args(argv)

    sizes = scale(args.quick)
    results = report.Results(
        started=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        command="python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        machine=machine(),
        code=code_version(),
        scale=sizes,
    )
    with PrivateServer.running(keep=args.keep_server) as server:
        monitor = load.LoadMonitor(server.postgres_pids)
        bench = Bench(
            server, sizes, monitor, results, polling=not args.no_polling, with_peers=args.peers
        )

        async def run() -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, monitor.run)
                try:
                    await bench.run()
                finally:
                    monitor.stop()

        trio.run(run)
    for d in results.drains.values():
        results.problems.extend(d.problems)
    for res in results.latency.values():
        results.problems.extend(res.problems)
    for peer in results.peers:
        results.problems.extend(peer.problems)
    text = report.build(results)
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"written to {args.output}", file=sys.stderr)
    bad = [
        d
        for d in results.drains.values()
        if d.submissions != d.submission_nodes or d.duplicate_submits
    ]
    if bad:
        print(
            "a node was submitted more than once: " + ", ".join(d.label for d in bad),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
