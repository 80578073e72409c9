"""bench/report.py's peer table on known figures: the ratios qtg is judged by against
each peer, and the target column (issue 47's targets, bench/peers.py TARGETS) marked met
or missed from them. No database and no timing: the benchmark is `python -m bench --peers`."""

from __future__ import annotations

from types import SimpleNamespace

from bench import peers, report
from bench.peers import PeerResult


def _table(qtg_pickup_ms: float, qtg_nodes_per_s: float, *results: PeerResult) -> list[str]:
    """The table, qtg's drain of 1,000 nodes having taken 2 s of CPU (2 ms a node)."""
    pickup = SimpleNamespace(summary=PeerResult("qtg", pickup_ms=[qtg_pickup_ms]).pickup)
    drain = SimpleNamespace(
        nodes_per_s=qtg_nodes_per_s, runtime_cpu_s=0.8, postgres_cpu_s=1.2, nodes_completed=1000
    )
    figures = SimpleNamespace(
        peers=list(results), latency={("pickup", True): pickup}, drains={"1proc-reactive": drain}
    )
    return [line for line in report._peers(figures) if line.startswith("| ")]  # type: ignore[arg-type]


def _row(lines: list[str], name: str) -> list[str]:
    [line] = [line for line in lines if line.startswith(f"| {name} |")]
    return [cell.strip() for cell in line.strip().strip("|").split(" | ")]


def test_each_peer_with_a_target_is_marked_met_or_missed_from_its_ratios() -> None:
    dbos = PeerResult(
        "dbos-1ms", pickup_ms=[15.0], jobs_per_s=300.0, unit="steps", cpu_ms_per_unit=5.0
    )
    pgq = PeerResult("pgqueuer", pickup_ms=[2.0], jobs_per_s=4000.0, cpu_ms_per_unit=0.5)
    slow = PeerResult("dbos", pickup_ms=[500.0], jobs_per_s=300.0, unit="steps")
    lines = _table(4.5, 700.0, dbos, pgq, slow)
    # qtg 4.5 ms against 15 (0.30 ≤ 1/3 met), 700 nodes/s against 300 steps/s (2.33 ≥ 2
    # met), 2 CPU ms a node against 5 a step (0.40 ≤ 1/2 met)
    assert _row(lines, "dbos-1ms")[2:] == [
        "0.30 / 0.30",
        "300.0 steps/s",
        "2.33",
        "5.00",
        "0.40",
        "≤ 0.33 ✅ / ≥ 2.00 ✅ / ≤ 0.50 ✅",
    ]
    # against the floor: 2.25 times its pickup (missed), 0.17 of its drain (missed)
    assert _row(lines, "pgqueuer")[2:] == [
        "2.25 / 2.25",
        "4,000.0 jobs/s",
        "0.17",
        "0.50",
        "4.00",
        "≤ 1.50 ❌ / ≥ 0.25 ❌",  # its CPU target is qtg's own 1.5 ms a node, not a ratio
    ]
    assert _row(lines, "dbos")[5:] == ["—", "—", ""]  # its default polling: no target


def test_a_peer_without_figures_is_not_judged() -> None:
    lines = _table(4.5, 700.0, PeerResult("dbos-1ms", problems=["peer dbos-1ms: exited 1"]))
    assert _row(lines, "dbos-1ms")[7] == "≤ 0.33 ? / ≥ 2.00 ? / ≤ 0.50 ?"


def test_every_peer_is_measured_and_every_target_names_one() -> None:
    assert set(peers.TARGETS) <= set(peers.PEERS)
    assert {"pgqueuer", "dbos-1ms", "dbos"} <= set(peers.PEERS)
    # the DBOS runs stay inside the peer deadline: 1 s polling costs about a second a sample
    assert peers.PICKUP_CAP["dbos"] * 1.5 < peers.PEER_DEADLINE_SECONDS
