"""A dispatch pass releases due transient waits only when one may be due
(qtg.services.known_waits; issue 29 item 5): it goes by the dispatcher's last
reading of the earliest wait, which its loop takes after every empty pass —
and a wait that reading missed (another runtime's, deferred after it) is
released no later than the reading's age bound, twice the dispatch interval.
The reading is kept on the process's monotonic clock, so the host's wall clock
(which may run behind the database's) plays no part (the rule's test)."""

from __future__ import annotations

import trio

from qtg.db import Query
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes, next_dispatch_due
from qtg.services.known_waits import KnownWaits

from .helpers import eventually, movement, node, template, with_settings
from .test_transient_waits import MAKE_DUE, NODE, FlakyExecutor

#: Another runtime's wait on the node, already due (the node is out of the claim's walk).
OTHERS_WAIT = Query(
    "tests/known-waits-others",
    "UPDATE movement_request_nodes SET dispatch_not_before = now() - interval '1 s'"
    " WHERE request_id = %(rid)s",
)
#: The first test's dispatch interval: its reading ages out after twice this.
INTERVAL = 0.5
MAX_AGE = 2 * INTERVAL
#: A loaded machine's delay between the reading's age bound and the pass after it.
SLACK = 2.0
#: An interval under which no reading ages out during a test: a release there is
#: the rule's doing, not the age bound's.
LONG_INTERVAL = 600.0


def test_the_rule() -> None:
    waits = KnownWaits()
    assert waits.release_needed(at=0.0, max_age=1.0), "nothing read yet"
    waits.read(None, at=10.0)
    assert not waits.release_needed(at=10.5, max_age=1.0), "none waits, fresh"
    assert waits.release_needed(at=11.5, max_age=1.0), "older than its bound"
    waits.read(0.3, at=10.0)  # due in 0.3 s by the database's clock
    assert not waits.release_needed(at=10.2, max_age=1.0), "not due yet"
    assert waits.release_needed(at=10.3, max_age=1.0), "due, on this process's clock"
    waits.read(-5.0, at=10.0)
    assert waits.release_needed(at=10.0, max_age=1.0), "read already due"
    waits.forget()
    assert waits.release_needed(at=10.0, max_age=1.0), "this process made one wait"


async def test_a_wait_the_reading_missed_is_released_within_its_age_bound(
    svc: ServiceContext,
) -> None:
    svc = with_settings(svc, node_dispatch_interval_seconds=INTERVAL)
    await template(svc, "kw", [node("x", "evm_transfer")], [])
    m = await movement(svc, "kw")
    read_at = trio.current_time()
    assert await next_dispatch_due(svc) is None  # the loop's reading: nothing waits
    await svc.db.execute(OTHERS_WAIT, {"rid": m["id"]})

    # the reading says nothing waits: the pass does not release, the node stays out
    assert await dispatch_ready_nodes(svc) == 0
    # once the reading is older than its bound a pass releases and claims it
    assert await eventually(lambda: dispatch_ready_nodes(svc), deadline=10) == 1
    assert MAX_AGE <= trio.current_time() - read_at < MAX_AGE + SLACK
    row = await svc.db.fetchrow(NODE, {"rid": m["id"]})
    assert row["node_state"] != "READY" and row["dispatch_not_before"] is None


async def test_a_fresh_reading_of_a_due_wait_releases_it_at_once(svc: ServiceContext) -> None:
    svc = with_settings(svc, node_dispatch_interval_seconds=LONG_INTERVAL)
    await template(svc, "kw", [node("x", "evm_transfer")], [])
    m = await movement(svc, "kw")
    await svc.db.execute(OTHERS_WAIT, {"rid": m["id"]})
    assert await next_dispatch_due(svc) is not None  # the reading sees it, due
    assert await dispatch_ready_nodes(svc) == 1


async def test_this_process_own_wait_is_released_without_another_reading(
    svc: ServiceContext,
) -> None:
    flaky = FlakyExecutor(svc.providers.executor_for("cex_withdrawal"))
    svc.providers.add_executor(flaky)
    svc = with_settings(svc, node_dispatch_interval_seconds=LONG_INTERVAL)
    await template(svc, "kwf", [{**node("x", "cex_withdrawal"), "executor_key": "flaky"}], [])
    m = await movement(svc, "kwf")
    assert await next_dispatch_due(svc) is None
    assert await dispatch_ready_nodes(svc) == 1  # claimed, deferred: the reading is forgotten
    flaky.down = False
    await svc.db.execute(MAKE_DUE, {"rid": m["id"]})
    assert await dispatch_ready_nodes(svc) == 1  # released and claimed, no reading between
    assert flaky.preflights == 2
