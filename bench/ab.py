"""`python -m bench.ab`: one lever measured against another, back to back.

Each `--env` is one variant (runtime settings, `MG_A=1,MG_B=2`; an empty
string is the defaults). For every variant, in turn and `--rounds` times over
(so a change in the machine's load falls on all of them alike): a pickup run
and a 1-process drain of the same backlog (and a 2-process drain with
`--two`). Prints one line per measurement and a summary per variant; the
figures mean what `python -m bench` says they mean (same code).

    .venv/bin/python -m bench.ab --env '' --env 'MG_NODE_OBSERVE_BATCH_SIZE=32'
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict

import trio

from bench import databases, latency, throughput
from bench.server import PrivateServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n")[0])
    parser.add_argument("--env", action="append", default=[], help="one variant's MG_* settings")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--movements", type=int, default=2000, help="3-node movements per drain")
    parser.add_argument("--pickups", type=int, default=200, help="pickup samples per run (0: none)")
    parser.add_argument("--two", action="store_true", help="also drain with 2 processes")
    parser.add_argument(
        "--statements", action="store_true", help="print each drain's statements per node"
    )
    args = parser.parse_args(argv)
    variants = args.env or [""]
    figures: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    t0 = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f} s] {text}", file=sys.stderr, flush=True)

    with PrivateServer.running() as server:

        async def run() -> None:
            base = await databases.prepare_base(server)
            backlog, _ = await databases.prepare_backlog(server, args.movements)
            for round_no in range(args.rounds):
                for i, env in enumerate(variants):
                    os.environ["QTG_BENCH_RUNTIME_ENV"] = env
                    name = env or "(defaults)"
                    if args.pickups:
                        res = await latency.measure(
                            server,
                            base,
                            latency.PICKUP,
                            reactive=True,
                            samples=args.pickups,
                            warmup=20,
                        )
                        figures[name]["pickup p50 ms"].append(res.summary.p50)
                        figures[name]["pickup p99 ms"].append(res.summary.p99)
                        for segment, values in res.breakdown.items():
                            figures[name][f"pickup {segment} p50 ms"].append(
                                statistics.median(values)
                            )
                        say(f"{name}: pickup {res.summary.p50:.2f} / {res.summary.p99:.2f} ms")
                    for procs in (1, 2) if args.two else (1,):
                        d = await throughput.drain(
                            server,
                            backlog,
                            args.movements,
                            label=f"ab{round_no}_{i}_{procs}",
                            processes=procs,
                            window_s=60,
                        )
                        figures[name][f"drain {procs}p nodes/s"].append(d.nodes_per_s)
                        figures[name][f"{procs}p statements/node"].append(d.per_node(d.round_trips))
                        figures[name][f"{procs}p commits/node"].append(d.per_node(d.commits))
                        figures[name][f"{procs}p cpu ms/node rt+pg"].append(
                            1000 * (d.runtime_cpu_s + d.postgres_cpu_s) / max(1, d.nodes_completed)
                        )
                        say(
                            f"{name}: drain {procs}p {d.nodes_per_s:.1f} nodes/s, "
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
