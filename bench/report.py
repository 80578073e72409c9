"""The results table (markdown), printed and written to bench/results/latest.md."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from bench import peers
from bench.latency import LatencyResult
from bench.memory import IdleMemory
from bench.peers import PeerResult
from bench.profile import ProfileSummary
from bench.stats import Summary
from bench.throughput import DrainResult


@dataclass
class Results:
    started: str = ""
    command: str = ""
    machine: str = ""
    code: str = ""
    server: dict[str, str] = field(default_factory=dict)
    scale: dict[str, Any] = field(default_factory=dict)
    pgbench_tps: dict[str, float] = field(default_factory=dict)  # run → TPS
    round_trips: dict[str, Summary] = field(default_factory=dict)  # layer → one statement
    latency: dict[tuple[str, bool], LatencyResult] = field(default_factory=dict)
    drains: dict[str, DrainResult] = field(default_factory=dict)
    idle: dict[bool, IdleMemory] = field(default_factory=dict)
    others: dict[str, float] = field(default_factory=dict)  # phase → others' CPU share
    busy: dict[str, float] = field(default_factory=dict)  # phase → whole machine busy share
    durations: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    peers: list[PeerResult] = field(default_factory=list)


def _f(value: float, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:,.{digits}f}"


def _pct(share: float | None) -> str:
    return "—" if share is None else f"{100 * share:.0f}%"


def _ok(passed: bool | None) -> str:
    return "" if passed is None else (" ✅" if passed else " ❌")


def build(r: Results) -> str:
    out: list[str] = []
    out.append(f"# qtg benchmark — {r.started}\n")
    out.append(f"- command: `{r.command}`")
    out.append(f"- qtg: {r.code}")
    out.append(f"- machine: {r.machine}")
    settings = ", ".join(f"{k}={v}" for k, v in sorted(r.server.items()))
    out.append(f"- PostgreSQL (private server, see bench/server.py): {settings}")
    out.append(f"- scale: {', '.join(f'{k}={v}' for k, v in r.scale.items())}")
    out.append(
        '- "others" = CPU share of the 2 cores used by processes that are not the '
        "benchmark's (other people's tests) while the figure was measured\n"
    )
    out.append(_table(r))
    out.extend(_peers(r))
    out.extend(_details(r))
    if r.problems:
        out.append("\n## Problems seen\n")
        out.extend(f"- {p}" for p in r.problems[:40])
    return "\n".join(out) + "\n"


def _table(r: Results) -> str:
    rows: list[tuple[str, str, str, str, str]] = []
    tps1, tps8 = r.pgbench_tps.get("1"), r.pgbench_tps.get("8")
    tps8n = r.pgbench_tps.get("8+notify")
    db = f"pgbench simple-update: {_f(tps1, 0)} TPS (1 client), {_f(tps8, 0)} TPS (8 clients)"

    def latency_row(label: str, figure: str, target: str, p50_max: float, p99_max: float) -> None:
        cells = []
        others = []
        for reactive in (True, False):
            res = r.latency.get((figure, reactive))
            if res is None:
                cells.append("—")
                others.append("—")
                continue
            s = res.summary
            ok = (s.p50 <= p50_max and s.p99 <= p99_max) if reactive else None
            extra = f", max {_f(s.max)}" if figure == "pickup" else ""
            cells.append(f"p50 {_f(s.p50)}, p99 {_f(s.p99)}{extra} ms (n={s.n}){_ok(ok)}")
            others.append(_pct(r.others.get(f"{figure}-{'reactive' if reactive else 'polling'}")))
        rows.append((label, target, cells[0], cells[1], " / ".join(others)))

    latency_row(
        "1. Pickup latency (READY commit → SUBMITTING commit, idle runtime)",
        "pickup",
        "p50 ≤ 2 ms, p99 ≤ 5 ms",
        2,
        5,
    )
    latency_row(
        "2. DAG latency (5-node chain, approve commit → COMPLETED commit)",
        "dag",
        "p50 ≤ 40 ms, p99 ≤ 100 ms",
        40,
        100,
    )

    def drain_cell(d: DrainResult | None, target: float | None = None) -> str:
        if d is None:
            return "—"
        ok = (d.nodes_per_s >= target) if (target and d.reactive) else None
        cut = f", cut at {_f(d.wall_s, 0)} s" if d.window_bounded else ""
        share = f" = {_pct(d.commits_per_s / tps8)} of pgbench" if tps8 else ""
        return (
            f"{_f(d.nodes_per_s)} nodes/s ({d.nodes_completed:,} nodes{cut}); "
            f"{_f(d.commits_per_s, 0)} commits/s{share}{_ok(ok)}"
        )

    def drain_row(label: str, target: str, key: str, goal: float | None = None) -> None:
        react, poll = r.drains.get(f"{key}-reactive"), r.drains.get(f"{key}-polling")
        others = " / ".join(_pct(r.others.get(f"drain-{key}-{m}")) for m in ("reactive", "polling"))
        rows.append((label, target, drain_cell(react, goal), drain_cell(poll), others))

    drain_row(
        "3. Throughput, 1 runtime process (2,000 x 3-node movements)",
        "≥ 1,000 nodes/s",
        "1proc",
        1000,
    )
    one, two = r.drains.get("1proc-reactive"), r.drains.get("2proc-reactive")
    drain_row("3. Throughput, 2 runtime processes", "report ratio to 1", "2proc")
    if one and two and one.nodes_per_s:
        p_one, p_two = r.drains.get("1proc-polling"), r.drains.get("2proc-polling")
        poll_ratio = (
            f"{p_two.nodes_per_s / p_one.nodes_per_s:.2f}x"
            if p_one and p_two and p_one.nodes_per_s
            else "—"
        )
        rows.append(
            (
                "3. … ratio 2 processes / 1",
                "(report)",
                f"{two.nodes_per_s / one.nodes_per_s:.2f}x",
                poll_ratio,
                "",
            )
        )
    subs = []
    for mode in ("reactive", "polling"):
        runs = [d for k, d in r.drains.items() if k.endswith(mode) and "profile" not in k]
        if not runs:
            subs.append("—")
            continue
        exact = all(d.submissions == d.submission_nodes and d.duplicate_submits == 0 for d in runs)
        total = sum(d.submissions for d in runs)
        nodes = sum(d.submission_nodes for d in runs)
        subs.append(
            f"{total / nodes if nodes else math.nan:.3f} "
            f"({total:,} submissions, {nodes:,} nodes, "
            f"{sum(d.duplicate_submits for d in runs)} repeats){_ok(exact)}"
        )
    rows.append(("3. Sandbox submissions per node (all drains)", "exactly 1", subs[0], subs[1], ""))
    if one and one.statements:
        rows.append(
            (
                "3. Statements / commits per node (1 process)",
                "(bound analysis)",
                f"{_f(one.per_node(one.round_trips))} / {_f(one.per_node(one.commits))}",
                "",
                "",
            )
        )
    if one and one.wall_s:
        rows.append(
            (
                "3. CPU during the drain (1 process), share of one core",
                "(bound analysis)",
                f"runtime {_pct(one.runtime_cpu_s / one.wall_s)} (trio thread "
                f"{_pct(one.loop_thread_cpu_s / one.wall_s)}, other threads "
                f"{_pct(one.other_threads_cpu_s / one.wall_s)}), PostgreSQL "
                f"{_pct(one.postgres_cpu_s / one.wall_s)}; machine "
                f"{_pct(r.busy.get('drain-1proc-reactive'))} of 2 cores busy",
                "",
                "",
            )
        )
    if two and two.wall_s:
        rows.append(
            (
                "3. CPU during the drain (2 processes), share of one core",
                "(bound analysis)",
                f"runtimes {_pct(two.runtime_cpu_s / two.wall_s)}, PostgreSQL "
                f"{_pct(two.postgres_cpu_s / two.wall_s)}; machine "
                f"{_pct(r.busy.get('drain-2proc-reactive'))} of 2 cores busy; "
                f"{_f(two.per_node(two.round_trips))} statements/node",
                "",
                "",
            )
        )
    drain_row(
        "4. Notify triggers off (qtg.notify=off), 1 process",
        "price of reactivity",
        "notifyoff",
        None,
    )
    off = r.drains.get("notifyoff-reactive")
    if one and off and off.nodes_per_s:
        rows.append(
            (
                "4. … notify on vs off (same drain)",
                "(report)",
                f"on {_f(one.nodes_per_s)} vs off {_f(off.nodes_per_s)} nodes/s "
                f"({_f(100 * (one.nodes_per_s / off.nodes_per_s - 1), 0)}%)",
                "",
                "",
            )
        )
    if tps8 and tps8n:
        rows.append(
            (
                "4. … NOTIFY at the database's limit (pgbench, 8 clients)",
                "(report)",
                f"simple-update {_f(tps8, 0)} TPS, + one NOTIFY per transaction "
                f"{_f(tps8n, 0)} TPS ({_f(100 * (tps8n / tps8 - 1), 0)}%)",
                "",
                "",
            )
        )
    idle = [r.idle.get(True), r.idle.get(False)]
    rows.append(
        (
            "5. Memory: idle runtime, every worker (RSS)",
            "≤ 80 MB",
            *(
                f"{_f(i.rss_mb)} MB ({len(i.workers)} workers){_ok(i.rss_mb <= 80)}" if i else "—"
                for i in idle
            ),
            "",
        )
    )
    after = [r.drains.get(f"1proc-{m}") for m in ("reactive", "polling")]
    rows.append(
        (
            "5. Memory after the throughput run (RSS)",
            "≤ 80 MB",
            *(
                f"{_f(max(d.rss_after_mb))} MB{_ok(max(d.rss_after_mb) <= 80)}"
                if d and d.rss_after_mb
                else "—"
                for d in after
            ),
            "",
        )
    )
    if one and len(one.rss_trace_mb) >= 4:
        trace = one.rss_trace_mb
        quarters = [trace[max(0, len(trace) * q // 4 - 1)] for q in (1, 2, 3, 4)]
        growth = quarters[-1] - quarters[0]
        rows.append(
            (
                "5. Memory while draining (same process, at ¼ ½ ¾ end of the drain)",
                "no growth",
                f"{' → '.join(_f(v) for v in quarters)} MB (growth {_f(growth)} MB over "
                f"{one.nodes_completed * 3 // 4:,} nodes){_ok(growth < 2)}",
                "",
                "",
            )
        )
    rows.append(
        (
            "6. Database limit (same server, same settings)",
            "(reference)",
            db,
            "",
            _pct(r.others.get("pgbench")),
        )
    )
    if r.round_trips:
        cells = "; ".join(f"{layer} p50 {s.p50:.3f} ms" for layer, s in r.round_trips.items())
        rows.append(
            (
                "6. One `SELECT 1` round trip, by layer",
                "(reference)",
                cells,
                "",
                _pct(r.others.get("round trips")),
            )
        )

    header = (
        "| figure | target | reactive | polling (MG_REACTIVE=false) | "
        "others (reactive / polling) |\n|---|---|---|---|---|"
    )
    return header + "\n" + "\n".join(f"| {' | '.join(row)} |" for row in rows)


def _peers(r: Results) -> list[str]:
    """PgQueuer, Procrastinate and DBOS beside qtg, as ratios against issue 47's targets
    (`--peers`)."""
    if not r.peers:
        return []
    pickup = r.latency.get(("pickup", True))
    ours = pickup.summary if pickup is not None else None
    one = r.drains.get("1proc-reactive")
    out = [
        "\n## Peers in the same run (same private server, bench/peers.py)\n",
        "Pickup: enqueue commit → claim commit on an idle worker, from commit timestamps "
        "(qtg: READY commit → SUBMITTING commit; DBOS: enqueue commit → its first step's "
        "checkpoint commit, queue polled at 1 ms (dbos-1ms) or at its default 1 s (dbos)). "
        "Drain: one worker process emptying a backlog of no-op jobs (qtg: nodes of 3-node "
        "sandbox movements, each with a write-ahead commit before its submit; DBOS: steps of "
        "3-step no-op workflows, each checkpointed). Ratio = qtg's figure / the peer's "
        "(pickup: below 1 is faster; drain: above 1 is faster). Target: issue 47's, for "
        "the peer that does qtg's work (DBOS at 1 ms) and for the floor (PgQueuer).\n",
        "CPU per unit: the drain's worker (qtg: runtime) and PostgreSQL, over the drain, per "
        "job, step or node.\n",
        "| runtime | pickup p50 / p99 ms | qtg pickup ratio p50 / p99 | drain | "
        "qtg drain ratio | CPU ms per unit | qtg CPU ratio | target (pickup / drain / CPU "
        "ratio) |\n|---|---|---|---|---|---|---|---|",
    ]
    our_cpu = (
        1000 * (one.runtime_cpu_s + one.postgres_cpu_s) / one.nodes_completed
        if one and one.nodes_completed
        else None
    )
    if ours is not None:
        out.append(
            f"| qtg | {_f(ours.p50)} / {_f(ours.p99)} (n={ours.n}) | 1 / 1 | "
            f"{_f(one.nodes_per_s) if one else '—'} nodes/s | 1 | "
            f"{_f(our_cpu, 2) if our_cpu is not None else '—'} | 1 | |"
        )
    for peer in r.peers:
        s = peer.pickup
        p50 = ours.p50 / s.p50 if ours is not None and s.n else None
        ratio = f"{p50:.2f} / {ours.p99 / s.p99:.2f}" if ours is not None and s.n else "—"
        drain = f"{_f(peer.jobs_per_s)} {peer.unit}/s" if peer.jobs_per_s else "—"
        rate = one.nodes_per_s / peer.jobs_per_s if one and peer.jobs_per_s else None
        drain_ratio = f"{rate:.2f}" if rate is not None else "—"
        theirs = peer.cpu_ms_per_unit
        cpu = our_cpu / theirs if our_cpu is not None and theirs else None
        out.append(
            f"| {peer.name} | {_f(s.p50)} / {_f(s.p99)} (n={s.n}) | {ratio} | "
            f"{drain} | {drain_ratio} | {_f(theirs, 2) if theirs is not None else '—'} | "
            f"{f'{cpu:.2f}' if cpu is not None else '—'} | "
            f"{_peer_target(peer.name, p50, rate, cpu)} |"
        )
    return out


def _peer_target(
    name: str, pickup_ratio: float | None, drain_ratio: float | None, cpu_ratio: float | None
) -> str:
    """Issue 47's targets for this peer (bench/peers.py TARGETS, CPU_TARGETS), and whether
    this run met them."""
    if name not in peers.TARGETS:
        return ""
    most, least = peers.TARGETS[name]

    def mark(ok: bool | None) -> str:
        return "?" if ok is None else ("✅" if ok else "❌")

    pickup_ok = None if pickup_ratio is None else pickup_ratio <= most
    drain_ok = None if drain_ratio is None else drain_ratio >= least
    out = f"≤ {most:.2f} {mark(pickup_ok)} / ≥ {least:.2f} {mark(drain_ok)}"
    cpu_most = peers.CPU_TARGETS.get(name)
    if cpu_most is not None:
        cpu_ok = None if cpu_ratio is None else cpu_ratio <= cpu_most
        out += f" / ≤ {cpu_most:.2f} {mark(cpu_ok)}"
    return out


def _details(r: Results) -> list[str]:
    out: list[str] = []
    for mode in (True, False):
        for figure in ("pickup", "dag"):
            res = r.latency.get((figure, mode))
            if res is not None and res.runs > 1:
                out.append(
                    f"\n{figure} ({'reactive' if mode else 'polling'}): "
                    f"{res.runs} runtimes side by side on their own databases."
                )
    pickup = r.latency.get(("pickup", True))
    if pickup is not None and pickup.breakdown:
        out.append("\n## Where a pickup's time goes (reactive, idle runtime)\n")
        out.append(
            "From rows the claim transaction writes while it runs (see "
            "bench/sql/pickup_breakdown.sql):\n"
        )
        out.append("| segment | what | p50 ms | p99 ms |\n|---|---|---|---|")
        what = {
            "wake": "READY commit → the claim's EXECUTING row: NOTIFY, hub, wake-up, "
            "pooled connection, the release of due waits, the batch claim (with its "
            "request and plan edges) and the node load",
            "claim": "EXECUTING row → the claim's commit: drift check, context, risk "
            "controls and policy, the dispatch lease, COMMIT",
            "prepare": "the claim's commit → the write-ahead's BEGIN: preflight, prepare, "
            "sign with no transaction open",
            "commit": "the write-ahead's BEGIN → its commit: request and node locked again, "
            "the checks, the SUBMITTING UPDATE, COMMIT (+ WAL flush)",
        }
        for segment, values in pickup.breakdown.items():
            summary = Summary.of(values)
            out.append(
                f"| {segment} | {what.get(segment, '')} | {_f(summary.p50, 2)} | "
                f"{_f(summary.p99, 2)} |"
            )
    polling = [d for k, d in r.drains.items() if k.endswith("polling")]
    if polling:
        out.append(
            "\nPolling drains are cut after a fixed window: with MG_REACTIVE=false the "
            "dispatcher takes one node per 2 s pass, so 6,000 nodes would take hours."
        )
    one = r.drains.get("1proc-reactive")
    if one is not None:
        out.append("\n## What bounds the drain (1 process, reactive)\n")
        out.append(
            f"Backlog while draining (mean of {len(one.queue.get('ready', []))} samples): "
            f"READY {_f(one.queue_mean('ready'), 0)}, SUBMITTING "
            f"{_f(one.queue_mean('submitting'), 1)}, SUBMITTED/OBSERVING "
            f"{_f(one.queue_mean('observing'), 1)} nodes."
        )
        out.append(
            f"\nCPU over {_f(one.wall_s)} s: runtime {_f(one.runtime_cpu_s)} s, PostgreSQL "
            f"{_f(one.postgres_cpu_s)} s (per 1,000 nodes: runtime "
            f"{_f(1000 * one.runtime_cpu_s / max(one.nodes_completed, 1), 2)} s, PostgreSQL "
            f"{_f(1000 * one.postgres_cpu_s / max(one.nodes_completed, 1), 2)} s).\n"
        )
        out.append("Statements per completed node (pg_stat_statements, top 20):\n")
        out.append("| per node | calls | exec ms | statement |\n|---|---|---|---|")
        for s in one.statements[:20]:
            text = _cell(" ".join(str(s["query"]).split())[:110])
            out.append(
                f"| {_f(one.per_node(int(s['calls'])), 2)} | {int(s['calls']):,} | "
                f"{_f(float(s['exec_ms']), 0)} | `{text}` |"
            )
    prof = r.drains.get("profile-reactive")
    if prof is not None:
        out.append("\n## Profile of one runtime during a drain\n")
        out.append(
            f"Drain with py-spy attached: {_f(prof.nodes_per_s)} nodes/s, runtime CPU "
            f"{_pct(prof.runtime_cpu_s / prof.wall_s if prof.wall_s else 0)} of one core."
        )
        if prof.wait_events:
            total = sum(prof.wait_events.values())
            out.append(
                "\nWhat the runtime's PostgreSQL backends were doing (pg_stat_activity "
                f"samples, {total:,}):\n"
            )
            out.append("| share | state \\| wait |\n|---|---|")
            for key, n in prof.wait_events.most_common(10):
                out.append(f"| {_pct(n / total)} | {_cell(key)} |")
        if prof.profile is not None:
            out.extend(_profile(prof.profile))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _profile(p: ProfileSummary) -> list[str]:
    if p.error:
        return [f"\nProfile: {p.error}"]
    out = [f"\npy-spy: {p.samples:,} samples of running threads over {p.seconds:g} s.\n"]
    for title, counter, n in (
        ("by thread", p.threads, 8),
        ("by innermost frame's package", p.categories, 12),
        ("by worker pass on the stack", p.passes, 8),
        ("top innermost frames", p.leaves, 15),
    ):
        out.append(f"\n{title}:\n")
        out.append("| share | |\n|---|---|")
        for key, count in counter.most_common(n):
            out.append(f"| {_pct(count / p.samples)} | `{key}` |")
    return out
