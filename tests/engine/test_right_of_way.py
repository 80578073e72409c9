"""Issue 29: the money path's right of way over waiting work
(qtg/services/right_of_way.py).

A dispatch stretch (claim → prepare → write-ahead commit) holds the observer's next
claim and its next provider calls until the stretch ends — for at most
MG_NODE_OBSERVE_GIVE_WAY_MS from the stretch's start, so a stretch that runs long (a prepare
asking a slow chain) never stops observation. The rules run on trio's autojump clock
(virtual time, exact); the wiring runs the real dispatcher and observer on real
PostgreSQL, a prepare held at a gate the test opens.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from qtg.domain.context import ExecutionContext
from qtg.providers.registry import build_registry
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.observe import observe_active_nodes
from qtg.services.right_of_way import RightOfWay

from .helpers import WrappedExecutor, movement, node, template
from .test_observe_lanes import NODES, CountingExecutor, submitted

BOUND = 0.05  # seconds: MG_NODE_OBSERVE_GIVE_WAY_MS=50, its default until 2026-12-06


async def test_without_a_dispatch_nothing_waits(autojump_clock: Any) -> None:
    way = RightOfWay()
    await way.give_way(BOUND)
    assert trio.current_time() == 0
    with way.dispatching():
        pass
    await way.give_way(BOUND)
    assert trio.current_time() == 0 and not way.busy


async def test_the_observer_waits_for_the_stretch_to_end(autojump_clock: Any) -> None:
    way = RightOfWay()
    resumed: list[float] = []

    async def observer() -> None:
        await way.give_way(BOUND)
        resumed.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        with way.dispatching():
            nursery.start_soon(observer)
            nursery.start_soon(observer)
            await trio.sleep(BOUND / 5)  # virtual: the stretch's length
    assert resumed == [BOUND / 5] * 2


async def test_a_long_stretch_holds_the_observer_back_once_by_the_bound(
    autojump_clock: Any,
) -> None:
    way = RightOfWay()
    with way.dispatching():
        await trio.sleep(BOUND / 2)
        with way.dispatching():  # a second stretch side by side: the bound is the first's
            await way.give_way(BOUND)
            assert trio.current_time() == pytest.approx(BOUND)
            await way.give_way(BOUND)  # older than the bound: no wait at all
            assert trio.current_time() == pytest.approx(BOUND)
        assert way.busy
    assert not way.busy


class GatedPrepare(WrappedExecutor):
    """The sandbox executor whose prepare() waits at `gate`, `entered` set inside."""

    key = "gated_prepare"

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.entered = trio.Event()
        self.gate = trio.Event()

    async def prepare(self, ctx: ExecutionContext) -> Any:
        self.entered.set()
        await self.gate.wait()
        return await self._inner.prepare(ctx)


async def _world(
    svc: ServiceContext, observed: int, give_way_ms: int = 50
) -> tuple[ServiceContext, Any, Any, list]:
    """A context with `observed` movements waiting (observed through a counting
    executor) and one fresh approved movement whose prepare is gated."""
    settings = svc.settings.replace(node_observe_give_way_ms=give_way_ms)
    registry = build_registry(settings, svc.db)
    counting = CountingExecutor(registry.executor_for("cex_withdrawal"), open_at=1)
    gated = GatedPrepare(registry.executor_for("cex_withdrawal"))
    registry.add_executor(counting)
    registry.add_executor(gated)
    ctx = ServiceContext(svc.db, settings, registry)
    rids = await submitted(svc, ctx, observed)
    fresh = node("pay", "cex_withdrawal")
    fresh["executor_key"] = "gated_prepare"
    await template(svc, "gated", [fresh], [])
    await movement(svc, "gated", key="gated-0")
    return ctx, counting, gated, rids


async def test_a_dispatch_stretch_holds_the_observers_claim_and_calls(svc: ServiceContext) -> None:
    ctx, counting, gated, rids = await _world(svc, 3, give_way_ms=60_000)  # only its end frees
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dispatch_ready_nodes, ctx)
            with trio.fail_after(10):
                await gated.entered.wait()  # inside the stretch: claimed, preparing
            observing = trio.Event()

            async def observe() -> None:
                # the 3 waiting nodes; and the gated one when its submit, which
                # follows the stretch's end, commits before the observer's claim
                # reads (a race of two round trips, not the rule under test)
                assert await observe_active_nodes(ctx) in (3, 4)
                observing.set()

            nursery.start_soon(observe)
            await trio.testing.wait_all_tasks_blocked(cushion=0.3)
            # the observer gave way before its claim: nothing claimed, nothing asked
            assert counting.calls == 0
            rows = await svc.db.fetch(NODES, {"rids": rids})
            assert [r["observe_lease"] for r in rows] == [None] * 3
            gated.gate.set()  # the stretch ends at the write-ahead commit
            with trio.fail_after(10):
                await observing.wait()
        assert counting.calls == 3
    finally:
        await ctx.providers.aclose()


@pytest.mark.parametrize("give_way_ms", [50, 0])  # on (the old default), and off (the default)
async def test_a_stretch_that_runs_long_never_stops_observation(
    svc: ServiceContext, give_way_ms: int
) -> None:
    ctx, counting, gated, _ = await _world(svc, 3, give_way_ms)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dispatch_ready_nodes, ctx)
            with trio.fail_after(10):
                await gated.entered.wait()
            assert ctx.right_of_way.busy
            with trio.fail_after(10):  # the prepare is still held: the bound lets it pass
                assert await observe_active_nodes(ctx) == 3
            assert counting.calls == 3 and ctx.right_of_way.busy
            gated.gate.set()
        assert not ctx.right_of_way.busy
    finally:
        await ctx.providers.aclose()
