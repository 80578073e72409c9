"""Issue 44 item 3: node_dispatcher holds no lock across prepare and sign.

The claim leases its READY nodes (sql/dispatch/take_lease.sql) and commits;
prepare and sign run with no transaction open; the write-ahead locks request and
node again and goes ahead only while the lease holds (sql/dispatch/relock.sql).
Real dispatchers on real PostgreSQL; a provider's slowness is a prepare held at a
gate the test opens (or never opens).
"""

from __future__ import annotations

from typing import Any

import trio
import trio.lowlevel

from qtg.db import Database, Jsonb, Query
from qtg.domain.context import ExecutionContext
from qtg.domain.execution import plan_from_rows
from qtg.domain.plan import compiled_plan_hash
from qtg.providers.registry import build_registry
from qtg.services import progress
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.movements import cancel_movement, get_movement

from .helpers import (
    Q,
    WrappedExecutor,
    eventually,
    movement,
    node,
    states,
    template,
    with_settings,
)

NODE = Query(
    "tests/lease-node",
    "SELECT n.node_state, n.dispatch_lease, n.dispatch_not_before, n.error_code"
    " FROM movement_request_nodes n WHERE n.request_id = %(rid)s",
)
SUBMITS = Query(
    "tests/lease-submits",
    "SELECT s.request_node_id::text AS node_id, s.duplicate_submits FROM sandbox_submissions s",
)


class GatedPrepare(WrappedExecutor):
    """The sandbox's cex executor whose prepare() waits at `gate` (a provider that
    does not answer), `entered` set inside; `prepares` counts the calls."""

    key = "gated_prepare"

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.entered = trio.Event()
        self.gate = trio.Event()
        self.prepares = 0
        self.released: list[str] = []  # the attempts given back, by node id

    async def release_unsubmitted(self, ctx: ExecutionContext) -> None:
        self.released.append(ctx.request_node_id)

    async def prepare(self, ctx: ExecutionContext) -> Any:
        self.prepares += 1
        self.entered.set()
        await self.gate.wait()
        return await self._inner.prepare(ctx)


async def _world(svc: ServiceContext, **settings: Any) -> tuple[ServiceContext, GatedPrepare]:
    """A context whose registry has the gated executor, and a template "gated"
    of one node prepared through it; template "free" prepares through the plain
    sandbox executor."""
    changed = svc.settings.replace(**settings)
    registry = build_registry(changed, svc.db)
    plain = registry.executor_for("cex_withdrawal")
    gated = GatedPrepare(plain)
    registry.add_executor(gated)
    slow = node("pay", "cex_withdrawal")
    slow["executor_key"] = "gated_prepare"
    await template(svc, "gated", [slow], [])
    free = node("pay", "cex_withdrawal")
    free["executor_key"] = plain.key
    await template(svc, "free", [free], [])
    return ServiceContext(svc.db, changed, registry), gated


async def _node(svc: ServiceContext, rid: Any) -> dict[str, Any]:
    row = await svc.db.fetchrow(NODE, {"rid": rid})
    assert row is not None
    return row


async def test_a_slow_prepare_stalls_neither_the_api_nor_the_other_nodes_of_its_batch(
    svc: ServiceContext,
) -> None:
    """The gated movement is the older: on main its prepare ran first inside the
    batch's claim transaction, holding its request (the cancel waited) and the
    free movement's node (never prepared until the gate opened)."""
    ctx, gated = await _world(svc)
    try:
        slow = await movement(svc, "gated", key="slow")
        free = await movement(svc, "free", key="free")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dispatch_ready_nodes, ctx)
            with trio.fail_after(10):
                await gated.entered.wait()

            async def free_submitted() -> bool:
                return states(await get_movement(svc.db, free["id"])) == {"pay": "SUBMITTED"}

            await eventually(free_submitted, deadline=10)  # the other lane went on
            leased = await _node(svc, slow["id"])
            assert leased["node_state"] == "READY" and leased["dispatch_lease"] is not None
            with trio.fail_after(5):  # the request is not held: the cancel answers
                cancelled = await cancel_movement(svc.db, slow["id"], actor="bob")
            assert cancelled["request_state"] == "CANCELLED"
            gated.gate.set()  # the prepare answers: its write-ahead finds the node moved on
        rows = await svc.db.fetch(SUBMITS)
        free_node = (await get_movement(svc.db, free["id"]))["nodes"][0]["id"]
        assert [(r["node_id"], r["duplicate_submits"]) for r in rows] == [(str(free_node), 0)]
        after = await _node(svc, slow["id"])
        assert after["node_state"] != "SUBMITTING" and after["node_state"] != "READY"
        assert (await get_movement(svc.db, slow["id"]))["request_state"] == "CANCELLED"
        # its attempt can never be written ahead now: what its prepare reserved is given back
        slow_node = (await get_movement(svc.db, slow["id"]))["nodes"][0]["id"]
        assert gated.released == [str(slow_node)]
    finally:
        await ctx.providers.aclose()


async def test_a_prepare_past_half_the_lease_waits_and_sends_nothing(svc: ServiceContext) -> None:
    ctx, _ = await _world(svc, node_observe_lease_seconds=0.4)
    try:
        m = await movement(svc, "gated", key="cut")
        with trio.fail_after(10):
            assert await dispatch_ready_nodes(ctx) == 1  # cut off at 0.2 s, the gate shut
        row = await _node(svc, m["id"])
        assert row["node_state"] == "READY" and row["error_code"] == "PREPARE_TIMEOUT"
        assert row["dispatch_lease"] is None and row["dispatch_not_before"] is not None
        assert await svc.db.fetch(SUBMITS) == []
    finally:
        await ctx.providers.aclose()


async def test_a_killed_dispatchers_lease_expires_and_the_node_is_submitted_once(
    svc: ServiceContext, dsn: str
) -> None:
    ctx, gated = await _world(svc, node_observe_lease_seconds=2.0)
    try:
        m = await movement(svc, "gated", key="killed")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dispatch_ready_nodes, ctx)
            with trio.fail_after(10):
                await gated.entered.wait()
            nursery.cancel_scope.cancel()  # the runtime dies mid-prepare
        assert (await _node(svc, m["id"]))["dispatch_lease"] is not None
        gated.gate.set()
        async with Database(dsn, max_size=2) as other_db:  # another runtime
            other = ServiceContext(other_db, ctx.settings, ctx.providers)
            assert await dispatch_ready_nodes(other) == 0  # the lease holds: not claimed

            async def dispatched() -> int:
                return await dispatch_ready_nodes(other)

            assert await eventually(dispatched, deadline=10) == 1  # once it expired
        assert states(await get_movement(svc.db, m["id"])) == {"pay": "SUBMITTED"}
        assert [r["duplicate_submits"] for r in await svc.db.fetch(SUBMITS)] == [0]
        assert gated.prepares == 2
    finally:
        await ctx.providers.aclose()


STEAL = Query(
    "tests/lease-steal",
    "UPDATE movement_request_nodes SET dispatch_lease = gen_random_uuid()"
    " WHERE request_id = %(rid)s",
)


async def test_a_lost_lease_discards_the_prepared_action_and_releases_nothing(
    svc: ServiceContext,
) -> None:
    """Another claim took the lease (after an expiry) while this pass prepared: the
    write-ahead finds the token changed and writes nothing. It releases nothing
    either: the new holder prepares the same attempt and gets the same nonce
    reservation back, which a release would hand to another node."""
    ctx, gated = await _world(svc)
    try:
        m = await movement(svc, "gated", key="stolen")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dispatch_ready_nodes, ctx)
            with trio.fail_after(10):
                await gated.entered.wait()
            assert await svc.db.execute(STEAL, {"rid": m["id"]}) == 1
            gated.gate.set()
        row = await _node(svc, m["id"])
        assert row["node_state"] == "READY" and row["dispatch_lease"] is not None
        assert await svc.db.fetch(SUBMITS) == [] and gated.released == []
    finally:
        await ctx.providers.aclose()


class SlowPrepare(WrappedExecutor):
    """The sandbox's cex executor with a prepare that takes a while (a slow RPC),
    so racing dispatchers overlap in it."""

    key = "slow_prepare"

    async def prepare(self, ctx: ExecutionContext) -> Any:
        await trio.sleep(0.02)  # the provider's latency, not a wait on a condition
        return await self._inner.prepare(ctx)


async def test_racing_dispatchers_submit_each_node_exactly_once(
    svc: ServiceContext, dsn: str
) -> None:
    registry = build_registry(svc.settings, svc.db)
    registry.add_executor(SlowPrepare(registry.executor_for("cex_withdrawal")))
    slow = node("pay", "cex_withdrawal")
    slow["executor_key"] = "slow_prepare"
    await template(svc, "raced", [slow], [])
    count = 24
    for i in range(count):
        await movement(svc, "raced", key=f"raced-{i}")
    overlapping = running = 0

    async def dispatcher(batch_size: int) -> None:
        nonlocal overlapping, running
        settings = svc.settings.replace(node_dispatch_batch_size=batch_size)
        async with Database(dsn, max_size=4) as db:  # its own connections, as a process
            ctx = ServiceContext(db, settings, registry)
            with trio.fail_after(60):
                while len(await svc.db.fetch(Q["submissions"])) < count:
                    running += 1
                    overlapping = max(overlapping, running)
                    try:
                        await dispatch_ready_nodes(ctx)
                    finally:
                        running -= 1
                    await trio.lowlevel.checkpoint()

    try:
        async with trio.open_nursery() as nursery:
            for batch_size in (1, 4, 4, 16):  # both claim paths
                nursery.start_soon(dispatcher, batch_size)
    finally:
        await registry.aclose()
    assert overlapping > 1  # they raced
    rows = await svc.db.fetch(Q["submissions"])
    assert len(rows) == count and len({r["request_node_id"] for r in rows}) == count
    assert all(r["attempt_no"] == 1 and r["duplicate_submits"] == 0 for r in rows)


FORGE = Query(
    "tests/lease-forge",
    "UPDATE movement_requests SET intent = %(intent)s, compiled_plan_hash = %(hash)s"
    " WHERE id = %(rid)s",
)


async def test_rows_edited_while_signing_are_caught_by_the_seal_at_the_write_ahead(
    svc: ServiceContext,
) -> None:
    """The signature is made with no lock held, on the claim's snapshot: an edit
    between the claim and the write-ahead (the plan hash re-forged, so only the
    approval seal can tell, as in tests/evm/test_custody.py) is caught under the
    write-ahead's locks. The node waits, refused and paged; nothing is submitted."""
    registry = build_registry(svc.settings, svc.db)
    gated = GatedPrepare(registry.executor_for("evm_transfer"))
    registry.add_executor(gated)
    pay = node("pay", "evm_transfer")
    pay["executor_key"] = "gated_prepare"
    await template(svc, "sealed", [pay], [])
    ctx = ServiceContext(svc.db, svc.settings, registry)
    try:
        m = await movement(svc, "sealed", key="sealed")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dispatch_ready_nodes, ctx)
            with trio.fail_after(10):
                await gated.entered.wait()  # claimed and leased, preparing
            async with svc.db.transaction() as tx:
                snap = await progress.load_snapshot(tx, m["id"], plan_edges=True)
            intent = {**snap.request["intent"], "amount": "9000.00"}
            plan = plan_from_rows(snap.nodes, snap.plan_edges)
            forged = compiled_plan_hash(plan, intent, snap.request["input_params"])
            with trio.fail_after(5):  # nothing holds the request
                await svc.db.execute(
                    FORGE, {"intent": Jsonb(intent), "hash": forged, "rid": m["id"]}
                )
            gated.gate.set()
        row = await _node(svc, m["id"])
        assert (row["node_state"], row["error_code"]) == ("READY", "CUSTODY_SEAL_MISMATCH")
        assert row["dispatch_not_before"] is not None  # it waits, paged
        assert await svc.db.fetch(SUBMITS) == []
    finally:
        await registry.aclose()


async def test_a_policy_charge_is_held_while_its_movement_prepares_with_no_lock(
    svc: ServiceContext, dsn: str
) -> None:
    """Cap 250, two movements of 200. The first is claimed and prepares (held at
    the gate) with no lock held: its charge is held with its lease, so a second
    runtime's dispatcher finds the room taken and the second movement waits,
    unsigned, instead of both being signed and one discarded at its write-ahead.
    Then the first goes out, charged once, and the hold is gone."""
    from .test_policy_dispatch import CAP, CHARGED, WAITING, activate

    ctx, gated = await _world(svc)
    try:
        await activate(svc, CAP)
        first = await movement(svc, "gated", amount="200", key="first")
        second = await movement(svc, "free", amount="200", key="second")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dispatch_ready_nodes, with_settings(ctx, node_dispatch_batch_size=1))
            with trio.fail_after(10):
                await gated.entered.wait()  # the first is leased, its charge held
            async with Database(dsn, max_size=2) as other_db:  # another runtime
                other = ServiceContext(other_db, ctx.settings, ctx.providers)
                assert await dispatch_ready_nodes(other) == 1  # decided: it waits
            [waiting] = await svc.db.fetch(WAITING)
            assert waiting == {"node_state": "READY", "error_code": "POLICY_LIMIT", "waits": True}
            gated.gate.set()
        assert states(await get_movement(svc.db, first["id"])) == {"pay": "SUBMITTED"}
        assert states(await get_movement(svc.db, second["id"])) == {"pay": "READY"}
        charged = await svc.db.fetchrow(CHARGED)
        assert charged is not None and (charged["s"], charged["n"]) == (200, 1)
        assert await svc.db.fetchval(HOLDS) == 0
    finally:
        await ctx.providers.aclose()


HOLDS = Query("tests/lease-holds", "SELECT count(*) FROM policy_holds")


XACTS = Query(
    "tests/lease-xacts",
    "SELECT e.node_key, e.to_state, e.xact_id::text AS xact FROM movement_events e"
    " WHERE e.request_id = %(rid)s AND e.to_state IN ('EXECUTING', 'SUBMITTING')",
)


async def test_a_claim_that_only_leased_changes_no_state_the_write_ahead_does(
    svc: ServiceContext,
) -> None:
    """The lease is no state (it commits asynchronously: dispatch.commit_lease_
    asynchronously): while the prepare hangs the request is still APPROVED and its
    node READY; the request goes EXECUTING in the very transaction that writes its
    node SUBMITTING, so nothing a crash could take back was ever shown."""
    ctx, gated = await _world(svc)
    slow = await movement(svc, "gated", key="slow")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dispatch_ready_nodes, ctx)
        with trio.fail_after(10):
            await gated.entered.wait()
        leased = await _node(svc, slow["id"])
        assert leased["node_state"] == "READY" and leased["dispatch_lease"] is not None
        assert (await get_movement(svc.db, slow["id"]))["request_state"] == "APPROVED"
        gated.gate.set()

    async def submitted() -> bool:
        return states(await get_movement(svc.db, slow["id"])) == {"pay": "SUBMITTED"}

    await eventually(submitted, deadline=10)
    rows = await svc.db.fetch(XACTS, {"rid": slow["id"]})
    by_state = {row["to_state"]: row["xact"] for row in rows}
    assert set(by_state) == {"EXECUTING", "SUBMITTING"}, rows
    assert by_state["EXECUTING"] == by_state["SUBMITTING"]


class TimedPrepare(WrappedExecutor):
    """A prepare that answers after `PREPARE_SECONDS` (a slow provider, not a wait
    standing in for a condition: the latency is what is under test)."""

    key = "timed_prepare"
    prepares = 0

    async def prepare(self, ctx: ExecutionContext) -> Any:
        self.prepares += 1
        await trio.sleep(PREPARE_SECONDS)
        return await self._inner.prepare(ctx)


PREPARE_SECONDS = 0.15


async def test_a_groups_cut_off_is_one_deadline_for_all_its_nodes(svc: ServiceContext) -> None:
    """Two nodes of one executor are prepared one after the other in one group; the
    cut-off (half of a 0.4 s lease) is counted from the claim, not per node: the
    second, done 0.3 s after the claim, would outlive what is left of the lease."""
    settings = svc.settings.replace(node_observe_lease_seconds=0.4)
    registry = build_registry(settings, svc.db)
    timed = TimedPrepare(registry.executor_for("cex_withdrawal"))
    registry.add_executor(timed)
    pay = node("pay", "cex_withdrawal")
    pay["executor_key"] = "timed_prepare"
    await template(svc, "timed", [pay], [])
    ctx = ServiceContext(svc.db, settings, registry)
    try:
        first = await movement(svc, "timed", key="first")
        second = await movement(svc, "timed", key="second")
        with trio.fail_after(10):
            assert await dispatch_ready_nodes(ctx) == 2
        assert timed.prepares == 2
        states_by_key = {
            key: (await _node(svc, m["id"]))["node_state"]
            for key, m in (("first", first), ("second", second))
        }
        assert states_by_key == {"first": "SUBMITTED", "second": "READY"}, states_by_key
        assert (await _node(svc, second["id"]))["error_code"] == "PREPARE_TIMEOUT"
        assert len(await svc.db.fetch(SUBMITS)) == 1
    finally:
        await ctx.providers.aclose()
