"""Fair to every movement (issue 25 item 6): the dispatch claim takes one
READY node per request per batch, so a 1-node movement is picked up in the
first pass after it becomes READY, beside a 200-node fan-out that is older and
still has most of its nodes READY — as fast (in passes) as when the engine is
idle. Before, the claim filled its batch with the wide movement's nodes
(oldest request first), kept one of them, and the small movement waited for
all 200."""

from __future__ import annotations

from typing import Any

from qtg.db import Query
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_batch

from .helpers import movement, node, template

STATES = Query(
    "tests/fair-states",
    "SELECT node_state, count(*) AS n FROM movement_request_nodes"
    " WHERE request_id = %(rid)s GROUP BY node_state",
)
WIDE = 200


def _batched(svc: ServiceContext, size: int = 16) -> ServiceContext:
    return ServiceContext(
        svc.db, svc.settings.replace(node_dispatch_batch_size=size), svc.providers
    )


async def _ready(svc: ServiceContext, rid: Any) -> int:
    counts = {r["node_state"]: r["n"] for r in await svc.db.fetch(STATES, {"rid": rid})}
    return counts.get("READY", 0)


async def _passes_until_picked(ctx: ServiceContext, rid: Any, limit: int = 300) -> int:
    for passes in range(1, limit + 1):
        await dispatch_batch(ctx)
        if await _ready(ctx, rid) == 0:
            return passes
    raise AssertionError(f"not picked up in {limit} passes")


async def test_a_one_node_movement_is_picked_up_beside_a_200_node_fan_out_as_when_idle(
    svc: ServiceContext,
) -> None:
    await template(svc, "one", [node("x", "cex_withdrawal")], [])
    await template(svc, "wide", [node(f"w{i}", "cex_withdrawal") for i in range(WIDE)], [])
    ctx = _batched(svc)

    idle = await _passes_until_picked(ctx, (await movement(svc, "one", key="idle"))["id"])
    assert idle == 1

    wide = (await movement(svc, "wide", key="wide"))["id"]
    assert await _ready(svc, wide) == WIDE
    picked = []
    for i in range(5):
        # a new small movement, younger than the wide one, while it is busy
        small = (await movement(svc, "one", key=f"small-{i}"))["id"]
        picked.append(await _passes_until_picked(ctx, small))
    left = await _ready(svc, wide)
    assert left > WIDE - 16, left  # the wide movement was busy the whole time
    assert max(picked) <= 2 * idle, picked
    assert picked == [1] * 5, picked  # and in fact at its first pass, as when idle


async def test_each_ready_request_gets_one_node_per_batch(svc: ServiceContext) -> None:
    await template(svc, "wide3", [node(f"w{i}", "cex_withdrawal") for i in range(3)], [])
    made = [(await movement(svc, "wide3", key=f"w3-{i}"))["id"] for i in range(4)]
    # one pass with room for 8: one node of each of the 4 requests, not 3 of
    # the oldest (which the batch would then have cut to 1)
    assert await dispatch_batch(_batched(svc, 8)) == 4
    assert [await _ready(svc, rid) for rid in made] == [2, 2, 2, 2]
    # room for 2: the two oldest requests take their turn first
    assert await dispatch_batch(_batched(svc, 2)) == 2
    assert [await _ready(svc, rid) for rid in made] == [1, 1, 2, 2]
