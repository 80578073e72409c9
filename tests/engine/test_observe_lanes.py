"""Issue 29 item 3: several observer batches in flight, a bound per provider,
and "still pending" written for a whole batch at once.

A counting executor (the sandbox's, whose observe() counts the calls in
progress and waits at a gate the test opens) shows what is in flight at once,
with no sleep: the gate opens when the expected number of calls are inside it
(and the test fails at its deadline if they never are).

- MG_NODE_OBSERVE_CONCURRENCY batches of MG_NODE_OBSERVE_BATCH_SIZE are asked
  at once (one batch at a time, as on main, never gets there);
- MG_NODE_OBSERVE_PROVIDER_CONCURRENCY bounds one provider's calls in flight
  across those batches (without the bound every claimed node's call is inside);
- a batch of pending outcomes is one UPDATE that is its own lease check: a node
  whose request left EXECUTING while it was being observed is not written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from qtg.config import Settings
from qtg.db import Database, Query
from qtg.domain.context import ExecutionContext
from qtg.providers.registry import build_registry
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.observe import observe_active_nodes

from .helpers import WrappedExecutor, movement, node, template

NODES = Query(
    "tests/lanes-nodes",
    "SELECT n.node_state, n.observe_count, n.observe_lease, n.next_observe_at > now() AS later"
    " FROM movement_request_nodes n JOIN movement_requests r ON r.id = n.request_id"
    " WHERE r.id = ANY(%(rids)s::uuid[]) ORDER BY n.id",
)
HOLD = Query(
    "tests/lanes-hold",
    "UPDATE movement_requests SET request_state = 'MANUAL_INTERVENTION' WHERE id = %(rid)s",
)


class CountingExecutor(WrappedExecutor):
    """The sandbox executor, except that observe() counts the calls inside it
    (`inside`, and the most at once in `most`) and waits at `gate`. Once
    `open_at` calls are inside, `full` is set and, if `auto`, the gate opens."""

    key = "counting"

    def __init__(self, inner: Any, open_at: int, *, auto: bool = True) -> None:
        super().__init__(inner)
        self.open_at = open_at
        self.auto = auto
        self.full = trio.Event()
        self.gate = trio.Event()
        self.inside = 0
        self.most = 0
        self.calls = 0

    async def observe(self, ctx: ExecutionContext) -> Any:
        self.calls += 1
        self.inside += 1
        self.most = max(self.most, self.inside)
        if self.inside >= self.open_at:
            self.full.set()
            if self.auto:
                self.gate.set()
        try:
            await self.gate.wait()
            return await self._inner.observe(ctx)
        finally:
            self.inside -= 1


@pytest.fixture
async def counted(svc: ServiceContext) -> AsyncIterator[Any]:
    """A factory: (settings, open_at) → a context whose observer goes through a
    CountingExecutor; every context made is closed at the end."""
    made: list[ServiceContext] = []

    def make(
        settings: Settings, open_at: int, *, auto: bool = True
    ) -> tuple[ServiceContext, CountingExecutor]:
        registry = build_registry(settings, svc.db)
        counting = CountingExecutor(registry.executor_for("cex_withdrawal"), open_at, auto=auto)
        registry.add_executor(counting)
        ctx = ServiceContext(svc.db, settings, registry)
        made.append(ctx)
        return ctx, counting

    yield make
    for ctx in made:
        await ctx.providers.aclose()


async def submitted(svc: ServiceContext, ctx: ServiceContext, count: int) -> list[Any]:
    """`count` movements whose single node observes through the counting
    executor (never finishing), all SUBMITTED and due."""
    watch = node("watch", "cex_withdrawal", sandbox={"observations_to_complete": 1_000_000})
    watch["executor_key"] = "counting"
    await template(svc, "counted", [watch], [])
    ids = [(await movement(svc, "counted", key=f"counted-{i}"))["id"] for i in range(count)]
    dispatched = 0
    while dispatched < count:
        done = await dispatch_ready_nodes(ctx)
        assert done, "the dispatcher stopped short"
        dispatched += done
    return ids


async def test_several_batches_are_observed_at_once(svc: ServiceContext, counted: Any) -> None:
    settings = svc.settings.replace(
        node_observe_batch_size=2,
        node_observe_concurrency=3,
        node_observe_provider_concurrency=50,
    )
    ctx, counting = counted(settings, open_at=6)  # three batches of two, inside at once
    rids = await submitted(svc, ctx, 6)
    with trio.fail_after(15):  # one batch at a time: 2 inside, the gate never opens
        assert await observe_active_nodes(ctx) == 6
    assert (counting.calls, counting.most) == (6, 6)
    rows = await svc.db.fetch(NODES, {"rids": rids})
    # every outcome written: pending, leases ended, next look at the interval
    assert [(r["node_state"], r["observe_count"], r["observe_lease"]) for r in rows] == [
        ("OBSERVING", 1, None)
    ] * 6
    assert all(r["later"] for r in rows)


async def test_one_provider_has_at_most_its_bound_in_flight(
    svc: ServiceContext, counted: Any
) -> None:
    settings = svc.settings.replace(
        node_observe_batch_size=4,
        node_observe_concurrency=3,
        node_observe_provider_concurrency=5,
    )
    ctx, counting = counted(settings, open_at=5)
    await submitted(svc, ctx, 12)
    with trio.fail_after(15):
        assert await observe_active_nodes(ctx) == 12
    # 12 claimed at once by three lanes; without the bound all 12 enter the gate
    assert (counting.calls, counting.most) == (12, 5)


async def test_a_pending_batch_skips_a_node_whose_request_left_executing(
    svc: ServiceContext, dsn: str, counted: Any
) -> None:
    settings = svc.settings.replace(
        node_observe_batch_size=4, node_observe_concurrency=1, node_observe_provider_concurrency=4
    )
    ctx, counting = counted(settings, open_at=4, auto=False)  # the test opens the gate
    rids = await submitted(svc, ctx, 4)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(observe_active_nodes, ctx)
        with trio.fail_after(10):
            await counting.full.wait()
        # while the provider is asked (no lock held), an operator holds one request
        async with Database(dsn, max_size=1) as other:
            await other.execute(HOLD, {"rid": rids[0]})
        counting.gate.set()
    rows = {r: await svc.db.fetch(NODES, {"rids": [r]}) for r in rids}
    held = rows[rids[0]][0]
    # its node keeps the claim's lease and state: nothing the observer saw is written
    assert (held["node_state"], held["observe_count"]) == ("SUBMITTED", 0)
    assert held["observe_lease"] is not None
    assert [rows[r][0]["observe_count"] for r in rids[1:]] == [1, 1, 1]


async def test_a_pass_with_less_than_a_batch_claims_once(
    svc: ServiceContext, dsn: str, counted: Any
) -> None:
    """More lanes start only when a claim comes back full: a pass with a few due
    nodes costs one claim, not one per lane (every qtg_observe wake-up of a
    drain of instant nodes runs such a pass)."""
    settings = svc.settings.replace(
        node_observe_batch_size=4, node_observe_concurrency=4, node_observe_provider_concurrency=4
    )
    ctx, _ = counted(settings, open_at=1)
    await submitted(svc, ctx, 3)
    claims = 0

    class CountingDatabase(Database):
        def transaction(self) -> Any:  # the observer's claims are its only transactions
            nonlocal claims
            claims += 1
            return super().transaction()

    async with CountingDatabase(dsn, max_size=4) as db:
        counting_ctx = ServiceContext(db, settings, ctx.providers)
        assert await observe_active_nodes(counting_ctx) == 3
    assert claims == 1


LEASED = Query(
    "tests/lanes-leased",
    "SELECT count(*) FROM movement_request_nodes n"
    " WHERE n.request_id = ANY(%(rids)s::uuid[]) AND n.observe_lease IS NOT NULL",
)
STATES = Query(
    "tests/lanes-states",
    "SELECT n.node_state FROM movement_request_nodes n"
    " WHERE n.request_id = ANY(%(rids)s::uuid[]) ORDER BY n.request_id",
)


def _one_lane(svc: ServiceContext, *, batch_size: int, provider_concurrency: int) -> Settings:
    """One claiming lane, three batches in flight."""
    return svc.settings.replace(
        node_observe_batch_size=batch_size,
        node_observe_concurrency=1,
        node_observe_batches_in_flight=3,
        node_observe_provider_concurrency=provider_concurrency,
    )


async def _until(what: str, condition: Any, seconds: float = 15.0) -> None:
    """Wait for `condition()` (async or not) to hold, failing at the deadline."""
    with trio.move_on_after(seconds):
        while True:
            held = condition()
            if not isinstance(held, bool):
                held = await held
            if held:
                return
            await trio.sleep(0.02)  # polling the condition itself, under the deadline
    raise AssertionError(f"not within {seconds:g} s: {what}")


async def test_a_slow_providers_batch_does_not_hold_another_providers_nodes(
    svc: ServiceContext, counted: Any
) -> None:
    """Issue 47 item 3, with one claiming lane: the first batch is a slow
    provider's node (its call held at the gate) beside another provider's node,
    the second batch two more of the other's. The other provider's three nodes
    are asked and written COMPLETED while the slow call is still out: its part
    of the first batch is written alone, and the lane claimed the second batch
    without waiting for the first. Before, the lane waited for the whole first
    batch: nothing was written until the gate opened."""
    settings = _one_lane(svc, batch_size=2, provider_concurrency=4)
    ctx, slow = counted(settings, open_at=1, auto=False)
    [slow_rid] = await submitted(svc, ctx, 1)  # claimed first: the oldest request
    quick = node("quick", "cex_withdrawal", sandbox={"observations_to_complete": 1})
    quick["executor_key"] = "sandbox"  # another provider than the counting one
    await template(svc, "quick", [quick], [])
    fast = [(await movement(svc, "quick", key=f"quick-{i}"))["id"] for i in range(3)]
    while await dispatch_ready_nodes(ctx):
        pass

    async def all_fast_completed() -> bool:
        rows = await svc.db.fetch(STATES, {"rids": fast})
        return [r["node_state"] for r in rows] == ["COMPLETED"] * 3

    async with trio.open_nursery() as nursery:
        nursery.start_soon(observe_active_nodes, ctx)
        with trio.fail_after(10):
            await slow.full.wait()
        await _until("the other provider's nodes are written", all_fast_completed)
        assert slow.inside == 1 and not slow.gate.is_set()  # the slow call is still out
        [slow_row] = await svc.db.fetch(NODES, {"rids": [slow_rid]})
        assert (slow_row["node_state"], slow_row["observe_count"]) == ("SUBMITTED", 0)
        slow.gate.set()
    [slow_row] = await svc.db.fetch(NODES, {"rids": [slow_rid]})
    assert (slow_row["node_state"], slow_row["observe_count"]) == ("OBSERVING", 1)
    assert slow_row["observe_lease"] is None


async def test_the_batches_in_flight_are_bounded(svc: ServiceContext, counted: Any) -> None:
    """MG_NODE_OBSERVE_BATCHES_IN_FLIGHT batches out at once and no more: with
    batches of one node held at the gate, the lane waits for a slot with three
    calls out and three nodes leased (it takes the slot before it claims), then
    goes on as the batches come back."""
    settings = _one_lane(svc, batch_size=1, provider_concurrency=50)
    ctx, counting = counted(settings, open_at=3, auto=False)
    rids = await submitted(svc, ctx, 5)
    slots = ctx.observe_batch_limit(settings.node_observe_batches_in_flight)
    seen: list[int] = []
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            seen.append(await observe_active_nodes(ctx))

        nursery.start_soon(run)
        with trio.fail_after(10):
            await counting.full.wait()
        await _until("the lane waits for a slot", lambda: slots.statistics().tasks_waiting == 1)
        assert (counting.inside, slots.borrowed_tokens) == (3, 3)
        assert await svc.db.fetchval(LEASED, {"rids": rids}) == 3  # no fourth claim
        counting.gate.set()
    assert seen == [5]
    assert (counting.calls, counting.most) == (5, 3)
