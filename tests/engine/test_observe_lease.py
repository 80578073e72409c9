"""Issue 25 item 5: the observer holds no lock across a provider call.

A test executor (the sandbox's, whose observe() waits at a gate the test opens)
keeps an observation in progress for as long as a test needs it, with no sleep:
- while it is in progress, another connection locks the node's request and the
  node (as the dispatcher's settle or an API operation would), and another
  observer pass finds nothing to observe (the lease: once per due time);
- an observer whose lease ran out and was claimed again cannot write over the
  newer claim's outcome;
- an observer that dies mid-call leaves its node due again when its lease runs out;
- one observation is cut off at half the lease.
Each for the batch claim and for MG_NODE_OBSERVE_BATCH_CLAIM=false. On main the
first three fail: the claim's locks are held through the provider call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import trio

from qtg.config import Settings
from qtg.db import Database, Query
from qtg.domain.context import ExecutionContext
from qtg.providers.registry import build_registry
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.movements import get_movement
from qtg.services.observe import observe_active_nodes

from .helpers import WrappedExecutor, eventually, movement, node, template

LOCK_NOWAIT = Query(
    "tests/lease-lock-nowait",
    "SELECT r.id FROM movement_requests r JOIN movement_request_nodes n ON n.request_id = r.id"
    " WHERE r.id = %(rid)s FOR NO KEY UPDATE OF r, n NOWAIT",
)
NODE = Query(
    "tests/lease-node",
    "SELECT node_state, observe_count, observe_lease, error_detail, next_observe_at"
    " FROM movement_request_nodes WHERE request_id = %(rid)s",
)
EXPIRE_LEASE = Query(
    "tests/lease-expire",
    "UPDATE movement_request_nodes SET next_observe_at = now() WHERE request_id = %(rid)s",
)
WAITING_ON_A_LOCK = Query(
    "tests/lease-lock-waiters",
    "SELECT count(*) FROM pg_stat_activity"
    " WHERE datname = current_database() AND wait_event_type = 'Lock'",
)


class GatedExecutor(WrappedExecutor):
    """The sandbox executor, except that observe() waits at `gate` (and says it
    has started by setting `entered`): a provider call in progress for as long
    as the test likes."""

    key = "gated"

    def __init__(self, inner: Any, *, open_gate: bool = False) -> None:
        super().__init__(inner)
        self.entered = trio.Event()
        self.gate = trio.Event()
        self.calls = 0
        if open_gate:
            self.gate.set()

    async def observe(self, ctx: ExecutionContext) -> Any:
        self.calls += 1
        self.entered.set()
        await self.gate.wait()
        return await self._inner.observe(ctx)


@pytest.fixture(params=[True, False], ids=["batch", "per-node"])
def batch_claim(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


async def gated_context(
    db: Database, settings: Settings, *, open_gate: bool = False
) -> tuple[ServiceContext, GatedExecutor]:
    registry = build_registry(settings, db)
    gated = GatedExecutor(registry.executor_for("cex_withdrawal"), open_gate=open_gate)
    registry.add_executor(gated)
    return ServiceContext(db, settings, registry), gated


@pytest.fixture
async def observer(
    svc: ServiceContext, batch_claim: bool
) -> AsyncIterator[tuple[ServiceContext, GatedExecutor]]:
    # One lane: these are one observer pass against another (a second lane of
    # the same pass would claim the node whose lease a test expires itself).
    settings = svc.settings.replace(
        node_observe_batch_claim=batch_claim, node_observe_concurrency=1
    )
    ctx, gated = await gated_context(svc.db, settings)
    try:
        yield ctx, gated
    finally:
        await ctx.providers.aclose()


async def submitted(svc: ServiceContext, ctx: ServiceContext, **sandbox: Any) -> Any:
    """One movement whose single node goes through the gated executor, SUBMITTED."""
    withdraw = node("withdraw", "cex_withdrawal", **({"sandbox": sandbox} if sandbox else {}))
    withdraw["executor_key"] = "gated"
    await template(svc, "gated", [withdraw], [])
    m = await movement(svc, "gated")
    assert await dispatch_ready_nodes(ctx) == 1
    return m["id"]


async def test_the_request_and_node_are_free_while_the_provider_is_asked(
    svc: ServiceContext, dsn: str, observer: tuple[ServiceContext, GatedExecutor]
) -> None:
    ctx, gated = observer
    rid = await submitted(svc, ctx)
    passes: list[int] = []
    async with Database(dsn, max_size=2) as other, trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _append(passes, observe_active_nodes(ctx)))
        with trio.fail_after(10):
            await gated.entered.wait()
        # another runtime's observer: the node is leased, not due — and not locked
        racer = ServiceContext(other, ctx.settings, ctx.providers)
        assert await observe_active_nodes(racer) == 0
        assert gated.calls == 1
        async with other.transaction() as tx:
            # the dispatcher's settle (or an API operation) can take the rows now
            # (on main: LockNotAvailable, the observer held them)
            assert await tx.fetch(LOCK_NOWAIT, {"rid": rid})
            gated.gate.set()
            # the observation is back: its re-lock waits for this transaction
            await eventually(lambda: svc.db.fetchval(WAITING_ON_A_LOCK), deadline=10)
            assert passes == []
        # committed: the outcome is written
    assert passes == [1]
    assert (await get_movement(svc.db, rid))["request_state"] == "COMPLETED"


async def _append(into: list[int], pending: Any) -> None:
    into.append(await pending)


async def test_an_observer_whose_lease_was_taken_over_cannot_write(
    svc: ServiceContext, dsn: str, observer: tuple[ServiceContext, GatedExecutor]
) -> None:
    ctx, slow = observer
    rid = await submitted(svc, ctx, observations_to_complete=3)
    async with Database(dsn, max_size=2) as other:
        fast_ctx, fast = await gated_context(other, ctx.settings, open_gate=True)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(observe_active_nodes, ctx)
                with trio.fail_after(10):
                    await slow.entered.wait()
                stale = await svc.db.fetchrow(NODE, {"rid": rid})
                await svc.db.execute(EXPIRE_LEASE, {"rid": rid})  # as if its lease ran out
                # another observer claims the node again and writes its outcome
                # (on main it could not: the slow one held the node)
                assert await observe_active_nodes(fast_ctx) == 1
                newer = await svc.db.fetchrow(NODE, {"rid": rid})
                assert newer["observe_lease"] != stale["observe_lease"]
                assert (newer["node_state"], newer["observe_count"]) == ("OBSERVING", 1)
                slow.gate.set()  # the stale observation comes back, and is discarded
        finally:
            await fast_ctx.providers.aclose()
    assert fast.calls == slow.calls == 1
    assert await svc.db.fetchrow(NODE, {"rid": rid}) == newer  # not one column written


async def test_a_dead_observers_node_is_due_again_when_its_lease_runs_out(
    svc: ServiceContext, dsn: str, observer: tuple[ServiceContext, GatedExecutor]
) -> None:
    ctx, slow = observer
    ctx = ServiceContext(
        ctx.db, ctx.settings.replace(node_observe_lease_seconds=3.0), ctx.providers
    )
    rid = await submitted(svc, ctx)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(observe_active_nodes, ctx)
        with trio.fail_after(10):
            await slow.entered.wait()
        nursery.cancel_scope.cancel()  # the observer dies mid-call
    async with Database(dsn, max_size=2) as other:
        later, _ = await gated_context(other, ctx.settings, open_gate=True)
        try:
            assert await observe_active_nodes(later) == 0  # leased: not yet
            await eventually(lambda: observe_active_nodes(later), deadline=10)
        finally:
            await later.providers.aclose()
    assert (await get_movement(svc.db, rid))["request_state"] == "COMPLETED"


async def test_an_observation_is_cut_off_at_half_the_lease(
    svc: ServiceContext, observer: tuple[ServiceContext, GatedExecutor]
) -> None:
    ctx, _ = observer
    ctx = ServiceContext(
        ctx.db, ctx.settings.replace(node_observe_lease_seconds=0.4), ctx.providers
    )
    rid = await submitted(svc, ctx)
    with trio.fail_after(10):
        assert await observe_active_nodes(ctx) == 1  # the gate never opens
    row = await svc.db.fetchrow(NODE, {"rid": rid})
    assert (row["node_state"], row["observe_count"]) == ("OBSERVING", 1)
    assert row["error_detail"] == "observe took longer than 0.2 s"


def notifies_before_marker(listener: psycopg.Connection) -> list[str]:
    """The qtg_observe payloads delivered before a marker sent now (delivery is
    in commit order, so every notify of an earlier commit comes first)."""
    listener.execute("NOTIFY qtg_observe, 'marker'")
    seen: list[str] = []
    for n in listener.notifies(timeout=10):
        if n.payload == "marker":
            return seen
        seen.append(n.payload)
    raise AssertionError("the marker never came back")


async def test_a_pending_outcome_wakes_no_observer_but_an_earlier_due_time_does(
    svc: ServiceContext, dsn: str, batch_claim: bool
) -> None:
    """The lease holder's own "still pending" moves next_observe_at from the
    lease's end back to the poll time; that must not wake every observer of
    every process once per observation (its own pass goes round and sleeps
    until its next_due). Any other move earlier still wakes them."""
    ctx = ServiceContext(
        svc.db, svc.settings.replace(node_observe_batch_claim=batch_claim), svc.providers
    )
    slow = {"observations_to_complete": 3, "retry_after_seconds": 30}
    await template(svc, "slowpoke", [node("withdraw", "cex_withdrawal", sandbox=slow)], [])
    m = await movement(svc, "slowpoke")
    assert await dispatch_ready_nodes(ctx) == 1
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN qtg_observe")
        assert await observe_active_nodes(ctx) == 1
        row = await svc.db.fetchrow(NODE, {"rid": m["id"]})
        assert (row["node_state"], row["observe_lease"]) == ("OBSERVING", None)
        assert notifies_before_marker(listener) == []
        await svc.db.execute(EXPIRE_LEASE, {"rid": m["id"]})  # as cex_transfer_ingest wakes it
        assert notifies_before_marker(listener) == [""]
