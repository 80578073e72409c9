"""How far behind the observer is, as an operator reads it (issue 29):
`qtg_observe_overdue_nodes` and `qtg_observe_lag_seconds`, read from the
database by the metrics endpoint's refresh (sql/metrics/observe_lag.sql).

Nodes wait on the sandbox (they stay PENDING); their due times are set back
by hand to stand for an observer that fell behind, and an observer pass that
catches up brings both gauges back to 0."""

from __future__ import annotations

from typing import Any

import pytest

from qtg.db import Database, Query
from qtg.services import metrics as metrics_module
from qtg.services.context import ServiceContext
from qtg.services.metrics import RuntimeMetrics
from qtg.services.observe import observe_active_nodes

from .helpers import dispatched_movements

DUE_AGO = Query(
    "tests/observe-lag-due-ago",
    "UPDATE movement_request_nodes SET next_observe_at = now() - make_interval(secs => %(s)s)"
    " WHERE id = %(id)s",
)
NEVER_OBSERVED_SINCE = Query(
    "tests/observe-lag-never-observed",
    "UPDATE movement_request_nodes SET next_observe_at = NULL,"
    " state_entered_at = now() - make_interval(secs => %(s)s) WHERE id = %(id)s",
)
PLANNER_SETTINGS = Query(
    "tests/observe-lag-planner",
    "SELECT current_setting('enable_sort') AS sort,"
    " current_setting('enable_bitmapscan') AS bitmap,"
    " current_setting('enable_seqscan') AS seq",
)
#: Stays PENDING for the test's life, next observation in 10 minutes.
WAITING = {"observations_to_complete": 1000, "retry_after_seconds": 600}
#: A scrape's own time on a loaded machine: the lag read may exceed the set-back by this.
SLACK = 30.0


async def gauges(svc: ServiceContext, network_class: str | None = None) -> tuple[float, float]:
    metrics = RuntimeMetrics()  # a fresh one: no cached read
    await metrics.refresh_backlog(svc.db, network_class or svc.settings.network_class)
    overdue = metrics.registry.get_sample_value("qtg_observe_overdue_nodes")
    lag = metrics.registry.get_sample_value("qtg_observe_lag_seconds")
    assert overdue is not None and lag is not None
    return overdue, lag


async def caught_up(svc: ServiceContext) -> None:
    while await observe_active_nodes(svc):
        pass


async def waiting_nodes(svc: ServiceContext, n: int) -> list[Any]:
    ids = await dispatched_movements(svc, "lag", n, **WAITING)
    await caught_up(svc)
    return ids


async def test_gauges_show_overdue_observations_and_fall_to_zero_once_observed(
    svc: ServiceContext,
) -> None:
    ids = await waiting_nodes(svc, 4)
    assert await gauges(svc) == (0, 0), "every node observed, next due in 10 minutes"

    await svc.db.execute(DUE_AGO, {"id": ids[0], "s": 30})
    await svc.db.execute(DUE_AGO, {"id": ids[1], "s": 5})
    overdue, lag = await gauges(svc)
    assert overdue == 2
    assert 30 <= lag < 30 + SLACK
    assert await gauges(svc, "another-class") == (0, 0), "scoped to the network class"

    # a node never observed has been due since it entered its state
    await svc.db.execute(NEVER_OBSERVED_SINCE, {"id": ids[2], "s": 50})
    overdue, lag = await gauges(svc)
    assert overdue == 3
    assert 50 <= lag < 50 + SLACK

    await caught_up(svc)
    assert await gauges(svc) == (0, 0)


async def test_a_node_due_less_than_the_threshold_ago_is_lag_but_not_overdue(
    svc: ServiceContext,
) -> None:
    ids = await waiting_nodes(svc, 1)
    await svc.db.execute(DUE_AGO, {"id": ids[0], "s": 0})
    overdue, lag = await gauges(svc)
    assert overdue == 0
    assert 0 <= lag < metrics_module.OBSERVE_OVERDUE_SECONDS + SLACK


async def test_the_overdue_count_stops_at_its_cap(
    svc: ServiceContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = await waiting_nodes(svc, 3)
    for i, node_id in enumerate(ids):
        await svc.db.execute(DUE_AGO, {"id": node_id, "s": 10 + i})
    monkeypatch.setattr(metrics_module, "OBSERVE_OVERDUE_CAP", 2)
    overdue, lag = await gauges(svc)
    assert overdue == 2
    assert lag >= 12, "the longest-due node is read even when the count is capped"


async def test_the_reads_planner_settings_end_with_its_transaction(dsn: str) -> None:
    """walk_only's settings are transaction-local: the pool's one connection,
    given back by the read, plans the next statement as before (with the pool's
    own session settings, qtg.db.pool.PLANNER_SETTINGS: no seq or bitmap scans)."""
    db = Database(dsn, min_size=1, max_size=1)
    await db.open()
    try:
        before = await db.fetchrow(PLANNER_SETTINGS)
        assert before == {"sort": "on", "bitmap": "off", "seq": "off"}
        await RuntimeMetrics().refresh_backlog(db, "default")
        assert await db.fetchrow(PLANNER_SETTINGS) == before
    finally:
        await db.close()
