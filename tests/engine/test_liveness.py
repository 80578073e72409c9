"""No spin, no crash (issue 25 item 4): with rows held by another transaction,
recovery and both observer paths reach the due row behind them and then sleep
until their interval, instead of failing on '-infinity' or going round at
10 Hz on the held rows; next_due queries return loadable values."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
import pytest
import trio

from qtg.db import Query
from qtg.runtime.loop import run_loop
from qtg.services.context import ServiceContext
from qtg.services.observe import next_observe_due, observe_active_nodes
from qtg.services.recover import next_recovery_due, recover_unknown_nodes

from .helpers import dispatched_movements, eventually, with_settings

STATE_OF = Query(
    "tests/liveness-state", "SELECT node_state FROM movement_request_nodes WHERE id = %(id)s"
)
HOLD = "SELECT id FROM movement_request_nodes WHERE id = ANY(%s) FOR NO KEY UPDATE"
#: The loop's interval: far longer than the test, so any pass after the due
#: row was reached is one the loop should not have run.
INTERVAL = 60.0
#: How long the loop keeps running after the due row was reached.
WINDOW = 2.0


async def _run_held(
    dsn: str,
    held: list[Any],
    due_node: Any,
    moved: tuple[str, ...],
    svc: ServiceContext,
    pass_fn: Any,
    next_due_fn: Any,
) -> int:
    """Hold `held` in another connection, run the worker loop until `due_node`
    leaves its state, then WINDOW seconds more; the number of passes."""
    passes = 0

    async def one_pass() -> int:
        nonlocal passes
        passes += 1
        return await pass_fn(svc)

    async def next_due() -> datetime | None:
        return await next_due_fn(svc)

    async def moved_on() -> bool:
        return await svc.db.fetchval(STATE_OF, {"id": due_node}) in moved

    with psycopg.connect(dsn) as holder:
        assert len(holder.execute(HOLD, (held,)).fetchall()) == len(held)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: run_loop("liveness", one_pass, INTERVAL, 0.0, next_due=next_due)
            )
            await eventually(moved_on, deadline=15)
            reached_after = passes
            await trio.sleep(WINDOW)  # a measurement window, not a wait for a condition
            nursery.cancel_scope.cancel()
        holder.rollback()
    assert reached_after <= 3, f"{reached_after} passes before the due row was reached"
    return passes


async def test_recovery_reaches_the_due_node_behind_held_ones_and_does_not_spin(
    svc: ServiceContext, dsn: str
) -> None:
    ids = await dispatched_movements(svc, "rec", 4, fail="submit_crash_after")
    states = [await svc.db.fetchval(STATE_OF, {"id": i}) for i in ids]
    assert states == ["UNKNOWN"] * 4
    # batch 4: each arm takes one; the three longest-idle are held elsewhere
    ctx = with_settings(svc, node_recovery_batch_size=4)
    passes = await _run_held(
        dsn, ids[:3], ids[3], ("SUBMITTED", "OBSERVING", "COMPLETED"), ctx,
        recover_unknown_nodes, next_recovery_due,
    )  # fmt: skip
    # the pass that recovered it, the one that found nothing takeable; then
    # the loop sleeps until its interval (the old listing went round the held
    # rows at 10 Hz, or failed loading '-infinity')
    assert passes <= 3, passes


@pytest.mark.parametrize("batch_claim", [True, False])
async def test_observer_reaches_the_due_node_behind_held_ones_and_does_not_spin(
    svc: ServiceContext, dsn: str, batch_claim: bool
) -> None:
    ids = await dispatched_movements(svc, "obs", 4)
    states = [await svc.db.fetchval(STATE_OF, {"id": i}) for i in ids]
    assert set(states) <= {"SUBMITTED", "OBSERVING"}
    ctx = with_settings(svc, node_observe_batch_size=2, node_observe_batch_claim=batch_claim)
    passes = await _run_held(
        dsn, ids[:3], ids[3], ("COMPLETED",), ctx, observe_active_nodes, next_observe_due
    )
    assert passes <= 3, passes


async def test_next_due_values_load_when_a_node_has_no_due_time(
    svc: ServiceContext,
) -> None:
    """A node without next_observe_at / next_recover_at is due now: a value
    psycopg loads (the old queries returned '-infinity': DataError)."""
    ids = await dispatched_movements(svc, "nul", 1, fail="submit_crash_after")
    await svc.db.execute(
        Query(
            "tests/liveness-null-due",
            "UPDATE movement_request_nodes SET next_recover_at = NULL WHERE id = %(id)s",
        ),
        {"id": ids[0]},
    )
    now = await svc.db.fetchval(Query("tests/now", "SELECT now()"))
    due = await next_recovery_due(svc)
    assert due is not None and abs((due - now).total_seconds()) < 5
    await svc.db.execute(
        Query(
            "tests/liveness-observe-null",
            "UPDATE movement_request_nodes SET node_state = 'SUBMITTED', next_observe_at = NULL"
            " WHERE id = %(id)s",
        ),
        {"id": ids[0]},
    )
    due = await next_observe_due(svc)
    assert due is not None and abs((due - now).total_seconds()) < 5
