"""bench/waiting.py's pure helpers on known inputs: how samples of the waiting
nodes' rows become observations (due time → commit), and the window sums.
No database and no timing: the benchmark itself is `python -m bench.waiting`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bench.waiting import (
    INTERVAL_S,
    Observation,
    ObservationTracker,
    committed_between,
    lag_summary_s,
    per_hour,
    statement_deltas,
)

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def row(
    node: str, count: int, written_at: float, *, started: float = 0.0, commit_after: float = 0.004
) -> dict[str, object]:
    """The row the observer writes for its count-th observation at `written_at`."""
    return {
        "id": node,
        "observe_count": count,
        "next_observe_at": at(written_at + INTERVAL_S),
        "started_at": at(started),
        "committed": at(written_at + commit_after),
    }


def test_the_interval_is_the_references_ten_seconds() -> None:
    assert INTERVAL_S == 10


def test_first_observation_is_due_when_the_node_started_observing() -> None:
    tracker = ObservationTracker()
    [first] = tracker.feed([row("a", 1, 0.5, started=0.0)])
    assert first.due == at(0) and first.committed == at(0.504)
    assert first.lag_s == pytest.approx(0.504)


def test_next_observation_is_due_at_what_the_previous_one_wrote() -> None:
    tracker = ObservationTracker()
    tracker.feed([row("a", 1, 0.5)])
    # observed 2.25 s late: written at 12.75 for a due time of 10.5
    [second] = tracker.feed([row("a", 2, 12.75)])
    assert second.count == 2
    assert second.due == at(10.5)
    assert second.lag_s == pytest.approx(2.254)


def test_a_row_seen_twice_counts_once() -> None:
    tracker = ObservationTracker()
    assert len(tracker.feed([row("a", 1, 0.5)])) == 1
    assert tracker.feed([row("a", 1, 0.5)]) == []


def test_an_observation_whose_predecessor_was_not_seen_has_no_due_time() -> None:
    tracker = ObservationTracker()
    assert tracker.feed([row("a", 3, 30.0)]) == []  # first sight of the node, count 3
    tracker.feed([row("b", 1, 0.2)])
    assert tracker.feed([row("b", 3, 21.0)]) == []  # observation 2 fell between samples
    # the one after is measured again, against what observation 3 wrote
    [fourth] = tracker.feed([row("b", 4, 31.5)])
    assert fourth.due == at(31.0) and fourth.lag_s == pytest.approx(0.504)


def test_nodes_are_tracked_apart() -> None:
    tracker = ObservationTracker()
    found = tracker.feed([row("a", 1, 0.1), row("b", 1, 0.3, started=0.2)])
    assert {o.node_id: round(o.lag_s, 3) for o in found} == {"a": 0.104, "b": 0.104}


def test_window_takes_observations_by_commit_time_half_open() -> None:
    obs = [Observation("a", 1, at(0), at(t)) for t in (0.9, 1.0, 5.0, 10.0)]
    assert [o.committed for o in committed_between(obs, at(1), at(10))] == [at(1), at(5)]


def test_lag_summary_in_seconds() -> None:
    obs = [Observation("a", i, at(0), at(lag)) for i, lag in enumerate((0.1, 0.2, 0.3, 4.0))]
    summary = lag_summary_s(obs)
    assert summary.n == 4
    assert summary.p50 == pytest.approx(0.25)
    assert summary.max == pytest.approx(4.0)


def test_growth_per_hour_extrapolates_the_window() -> None:
    assert per_hour(120, 60) == 7200
    assert per_hour(0, 60) == 0


def test_statement_deltas_subtract_and_sort_by_time() -> None:
    before = [
        {"query": "claim", "calls": 10, "exec_ms": 5.0},
        {"query": "idle", "calls": 3, "exec_ms": 1.0},
    ]
    after = [
        {"query": "claim", "calls": 30, "exec_ms": 45.0},
        {"query": "idle", "calls": 3, "exec_ms": 1.0},
        {"query": "write", "calls": 20, "exec_ms": 2.0},
    ]
    assert statement_deltas(before, after) == [
        {"query": "claim", "calls": 20, "exec_ms": 40.0},
        {"query": "write", "calls": 20, "exec_ms": 2.0},
    ]


def test_growth_per_hour_counts_history_tables_only() -> None:
    from bench.waiting import Case

    case = Case(1000, "steady", 1, window_s=60.0)
    case.growth = {
        "movement_events": (10, 8192),
        "audit_events": (5, 0),
        "movement_request_nodes": (0, 1_000_000),  # updated in place: bloat
        "audit_outbox": (-40, -65536),
    }  # a queue emptied by the promoter
    assert case.growth_per_hour() == (900, 8192 * 60)
