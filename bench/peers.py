"""Peers in the same run: PgQueuer and Procrastinate (queues: the floor), and DBOS Transact (a
durable-execution engine: qtg's kind of work, bench/peer_dbos.py), on the same private server
as qtg.

`python -m bench --peers` measures, for each peer, the two figures qtg is compared on:
- pickup: enqueue commit → claim commit, one job at a time on an idle worker, from
  PostgreSQL's commit timestamps (the same method as qtg's pickup, bench/latency.py);
- drain: the rate at which one worker process empties a backlog of no-op jobs (DBOS: of 3-step
  no-op workflows, counted in steps, as qtg's drain counts nodes of 3-node movements).

Each peer runs in its own process (bench/peer_run.py, asyncio) on its own database, one figure
at a time with nothing else of the benchmark running, exactly as qtg's figures are taken.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import trio

from bench import procs
from bench.server import PrivateServer
from bench.stats import Summary

PEERS = ("pgqueuer", "procrastinate", "dbos-1ms", "dbos")
#: What a peer's drain counts (a DBOS workflow is three steps, checkpointed each).
UNITS = {"dbos-1ms": "steps", "dbos": "steps"}
#: Issue 47's targets per peer: (qtg's pickup p50 / the peer's at most, qtg's drain / the
#: peer's at least). DBOS's are against its 1 ms polling (the same work); PgQueuer's the floor.
TARGETS = {"dbos-1ms": (1 / 3, 2.0), "pgqueuer": (1.5, 0.25)}
#: Issue 47's CPU target per peer: qtg's CPU per unit (node) / the peer's (per job or step)
#: at most (worker + PostgreSQL, both drains counted alike: procs.CpuWindow).
CPU_TARGETS = {"dbos-1ms": 0.5}
#: Fewer samples where a figure costs its polling interval each (DBOS at its default 1 s:
#: 500 pickups would take ten minutes), fewer workflows where a drain runs at a few hundred
#: steps per second: what a peer's run takes stays inside PEER_DEADLINE_SECONDS.
PICKUP_CAP = {"dbos": 100}
DRAIN_CAP = {"dbos-1ms": 5000, "dbos": 5000}
#: A peer's figure that takes longer than this is reported as a problem, not waited for.
PEER_DEADLINE_SECONDS = 300.0


@dataclass
class PeerResult:
    name: str
    pickup_ms: list[float] = field(default_factory=list)
    #: segment → ms per sample, where a peer reports qtg's segments (floor-qtg-statements)
    breakdown: dict[str, list[float]] = field(default_factory=dict)
    jobs_per_s: float | None = None
    drain_jobs: int = 0
    #: what jobs_per_s counts: "jobs", or "steps" for DBOS (three a workflow)
    unit: str = "jobs"
    #: CPU ms per unit of the drain, the peer's worker and PostgreSQL (None: not measured)
    cpu_ms_per_unit: float | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def pickup(self) -> Summary:
        return Summary.of(self.pickup_ms)


async def _run_peer(
    server: PrivateServer, peer: str, figure: str, count: int, warmup: int
) -> dict[str, Any]:
    name = f"qtg_bench_peer_{peer}_{figure}"
    dsn = await trio.to_thread.run_sync(server.create_database, name)
    try:
        # the peer's drain counts PostgreSQL's CPU as qtg's does (procs.CpuWindow)
        env = {**os.environ, procs.POSTMASTER_ENV: str(server.postmaster_pid or "")}
        with trio.fail_after(PEER_DEADLINE_SECONDS):
            done = await trio.run_process(
                [
                    sys.executable,
                    "-m",
                    "bench.peer_run",
                    peer,
                    figure,
                    dsn,
                    str(count),
                    str(warmup),
                ],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env=env,
            )
    finally:
        await trio.to_thread.run_sync(server.drop_database, name)
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"{peer} {figure} exited {done.returncode}: {' | '.join(tail)}")
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


async def measure_pickup(
    server: PrivateServer, peer: str, *, samples: int, warmup: int
) -> PeerResult:
    """One peer's pickup alone (bench.ab --peers: beside qtg's, in each round)."""
    result = PeerResult(peer)
    pickup: dict[str, Any] = await _run_peer(server, peer, "pickup", samples, warmup)
    result.pickup_ms = [float(v) for v in pickup["pickup_ms"]]
    breakdown: dict[str, list[Any]] = pickup.get("breakdown") or {}
    result.breakdown = {k: [float(v) for v in vs] for k, vs in breakdown.items()}
    return result


@dataclass(frozen=True)
class Drain:
    #: jobs (or steps) per second
    rate: float
    #: CPU ms per job (or step): the peer's worker and PostgreSQL; None if not measured
    cpu_ms_per_unit: float | None


async def measure_drain(server: PrivateServer, peer: str, *, jobs: int) -> Drain:
    """One peer's drain of `jobs` no-op jobs (DBOS: workflows) alone."""
    drain = await _run_peer(server, peer, "drain", jobs, 0)
    cpu_s, units = drain.get("cpu_s"), drain.get("units", jobs)
    return Drain(
        float(drain["jobs_per_s"]),
        1000 * float(cpu_s) / max(1, int(units)) if cpu_s is not None else None,
    )


async def measure(
    server: PrivateServer, *, pickup_samples: int, pickup_warmup: int, drain_jobs: int
) -> list[PeerResult]:
    """Every peer's pickup and drain, one after another."""
    results = []
    for peer in PEERS:
        result = PeerResult(peer)
        samples = min(pickup_samples, PICKUP_CAP.get(peer, pickup_samples))
        jobs = min(drain_jobs, DRAIN_CAP.get(peer, drain_jobs))
        try:
            result = await measure_pickup(server, peer, samples=samples, warmup=pickup_warmup)
            drained = await measure_drain(server, peer, jobs=jobs)
            result.jobs_per_s, result.cpu_ms_per_unit = drained.rate, drained.cpu_ms_per_unit
            result.drain_jobs = jobs
            result.unit = UNITS.get(peer, "jobs")
        except (RuntimeError, trio.TooSlowError, ValueError, KeyError) as exc:
            result.problems.append(f"peer {peer}: {exc or type(exc).__name__}")
        results.append(result)
    return results
