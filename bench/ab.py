"""`python -m bench.ab`: one lever measured against another, back to back.

Each `--env` is one variant (runtime settings, `MG_A=1,MG_B=2`; an empty
string is the defaults). For every variant, in turn and `--rounds` times over
(so a change in the machine's load falls on all of them alike): a pickup run
and a 1-process drain of the same backlog (and a 2-process drain with
`--two`). Prints one line per measurement and a summary per variant; the
figures mean what `python -m bench` says they mean (same code).

    .venv/bin/python -m bench.ab --env '' --env 'MG_NODE_OBSERVE_BATCH_SIZE=32'

`--tree NAME=PATH` measures commits instead (or as well): each is a checkout
with its own virtualenv whose `bin/qtg-runtime` runs the figures (every
variant is then an (env, tree) pair); the benchmark itself, the server and the
workload stay this checkout's, and each checkout runs on copies of the prepared
databases migrated by its own migrations — so run it from the checkout with the
fewest (the older commit). With `--peers`, PgQueuer's and DBOS's (1 ms
polling) pickups are measured (and, with drains, PgQueuer's drain of
PEER_DRAIN_JOBS no-op jobs, DBOS's of peers.DRAIN_CAP 3-step workflows) in each
round too, on the same server (python -m bench --peers's method). With `--floor`, the
floors' pickups too: the least a one-statement claim and a claim followed by
its write-ahead commit can do (bench/floor.py), and qtg's own statements
without its runtime (bench/floor_qtg.py).

    git worktree add --detach /tmp/qtg-main main && (cd /tmp/qtg-main && python3 -m venv .venv \
        && .venv/bin/pip install -q -e '.[test]')
    .venv/bin/python -m bench.ab --tree main=/tmp/qtg-main --tree branch=. --peers
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import trio

from bench import databases, floor, floor_qtg, latency, peers, procs, throughput
from bench.server import PrivateServer

#: No-op jobs in PgQueuer's drain (python -m bench --peers drains as many; DBOS's drain
#: is capped at peers.DRAIN_CAP workflows).
PEER_DRAIN_JOBS = 20000
#: The peers with issue 47's targets (bench/peers.py TARGETS), measured in each round with
#: --peers: PgQueuer (the floor) and DBOS at 1 ms polling (the same work).
AB_PEERS = ("pgqueuer", "dbos-1ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n")[0])
    parser.add_argument("--env", action="append", default=[], help="one variant's MG_* settings")
    parser.add_argument(
        "--tree", action="append", default=[], help="NAME=PATH: a checkout whose runtime to run"
    )
    parser.add_argument(
        "--peers", action="store_true", help="PgQueuer's and DBOS's pickup in each round"
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="the floors' pickups in each round (bench/floor.py, bench/floor_qtg.py)",
    )
    parser.add_argument("--no-drain", action="store_true", help="pickups only")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--movements", type=int, default=2000, help="3-node movements per drain")
    parser.add_argument("--pickups", type=int, default=200, help="pickup samples per run (0: none)")
    parser.add_argument("--two", action="store_true", help="also drain with 2 processes")
    parser.add_argument(
        "--statements", action="store_true", help="print each drain's statements per node"
    )
    args = parser.parse_args(argv)
    envs = args.env or [""]
    trees = [
        (name, Path(path).resolve() / "bin" / "qtg-runtime")
        for name, path in (t.split("=", 1) for t in args.tree)
    ] or [("", procs.BIN)]
    variants = [(env, tree) for tree in trees for env in envs]
    figures: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    t0 = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f} s] {text}", file=sys.stderr, flush=True)

    with PrivateServer.running() as server:

        async def run() -> None:
            base = await databases.prepare_base(server)
            backlog = ""
            if not args.no_drain:
                backlog, _ = await databases.prepare_backlog(server, args.movements)
            # each checkout's copies, with its own migrations (databases.migrated_for)
            bases = {tree: base for tree, _ in trees}
            backlogs = {tree: backlog for tree, _ in trees}
            for tree, launcher in trees if args.tree else ():
                checkout = launcher.parents[1]
                bases[tree] = await databases.migrated_for(server, base, tree, checkout)
                if backlog:
                    backlogs[tree] = await databases.migrated_for(server, backlog, tree, checkout)
            for round_no in range(args.rounds):
                for i, (env, (tree, launcher)) in enumerate(variants):
                    os.environ["QTG_BENCH_RUNTIME_ENV"] = env
                    procs.BIN = launcher
                    name = " ".join(x for x in (tree, env) if x) or "(defaults)"
                    if args.pickups:
                        res = await latency.measure(
                            server,
                            bases[tree],
                            latency.PICKUP,
                            reactive=True,
                            samples=args.pickups,
                            warmup=20,
                        )
                        figures[name]["pickup p50 ms"].append(res.summary.p50)
                        figures[name]["pickup p99 ms"].append(res.summary.p99)
                        for segment, values in res.breakdown.items():
                            if not values:  # no sample showed its marks (see pickup_breakdown)
                                continue
                            figures[name][f"pickup {segment} p50 ms"].append(
                                statistics.median(values)
                            )
                        say(f"{name}: pickup {res.summary.p50:.2f} / {res.summary.p99:.2f} ms")
                    for n in () if args.no_drain else (1, 2) if args.two else (1,):
                        d = await throughput.drain(
                            server,
                            backlogs[tree],
                            args.movements,
                            label=f"ab{round_no}_{i}_{n}",
                            processes=n,
                            window_s=60,
                        )
                        figures[name][f"drain {n}p nodes/s"].append(d.nodes_per_s)
                        figures[name][f"{n}p statements/node"].append(d.per_node(d.round_trips))
                        figures[name][f"{n}p commits/node"].append(d.per_node(d.commits))
                        figures[name][f"{n}p cpu ms/node rt+pg"].append(
                            1000 * (d.runtime_cpu_s + d.postgres_cpu_s) / max(1, d.nodes_completed)
                        )
                        figures[name][f"{n}p cpu ms/node postgres"].append(
                            1000 * d.postgres_cpu_s / max(1, d.nodes_completed)
                        )
                        say(
                            f"{name}: drain {n}p {d.nodes_per_s:.1f} nodes/s, "
                            f"{d.per_node(d.round_trips):.1f} statements/node, "
                            f"{d.per_node(d.commits):.2f} commits/node, "
                            f"subs {d.submissions}/{d.submission_nodes} dup {d.duplicate_submits}"
                            + (f" PROBLEMS {d.problems[:2]}" if d.problems else "")
                        )
                        if args.statements:
                            for st in sorted(d.statements, key=lambda st: -int(st["calls"]))[:16]:
                                query = " ".join(str(st["query"]).split())[:100]
                                print(
                                    f"    {d.per_node(int(st['calls'])):5.2f}/node "
                                    f"{float(st['exec_ms']):8.0f} ms  {query}",
                                    file=sys.stderr,
                                )

                for peer in AB_PEERS if args.peers else ():
                    result = await peers.measure_pickup(
                        server, peer, samples=args.pickups or 200, warmup=20
                    )
                    figures[peer]["pickup p50 ms"].append(result.pickup.p50)
                    figures[peer]["pickup p99 ms"].append(result.pickup.p99)
                    say(f"{peer}: pickup {result.pickup.p50:.2f} / {result.pickup.p99:.2f} ms")
                    if not args.no_drain:
                        jobs = min(PEER_DRAIN_JOBS, peers.DRAIN_CAP.get(peer, PEER_DRAIN_JOBS))
                        drained = await peers.measure_drain(server, peer, jobs=jobs)
                        unit = peers.UNITS.get(peer, "jobs")
                        figures[peer][f"drain {unit}/s"].append(drained.rate)
                        cpu = drained.cpu_ms_per_unit
                        if cpu is not None:
                            figures[peer][f"cpu ms/{unit[:-1]} worker+pg"].append(cpu)
                        say(
                            f"{peer}: drain {drained.rate:.0f} {unit}/s"
                            + (f", {cpu:.2f} cpu ms/{unit[:-1]}" if cpu is not None else "")
                        )
                for shape in (*floor.SHAPES, floor_qtg.NAME) if args.floor else ():
                    result = await peers.measure_pickup(
                        server, shape, samples=args.pickups or 200, warmup=20
                    )
                    figures[shape]["pickup p50 ms"].append(result.pickup.p50)
                    figures[shape]["pickup p99 ms"].append(result.pickup.p99)
                    for segment, values in result.breakdown.items():
                        figures[shape][f"pickup {segment} p50 ms"].append(statistics.median(values))
                    say(f"{shape}: pickup {result.pickup.p50:.2f} / {result.pickup.p99:.2f} ms")

        trio.run(run)
    for name, figs in figures.items():
        print(f"\n{name}")
        for key, values in figs.items():
            print(
                f"  {key:28} median {statistics.median(values):8.2f}   "
                + " ".join(f"{v:.2f}" for v in values)
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
