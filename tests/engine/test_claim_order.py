"""Claims in time order (issue 44 item 5): of a request's READY nodes, the
dispatch claims take the one that became READY first. They took the first by
id — a random UUID — so the order was chance; here the nodes' ids run against
their READY order, so a claim by id takes them newest first and fails."""

from __future__ import annotations

from typing import Any

import pytest

from qtg.db import Query
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_batch, dispatch_one_node

from .helpers import movement, node, template, with_settings

NODES = 5
READY_IDS = Query(
    "tests/ready-ids",
    "SELECT id FROM movement_request_nodes WHERE request_id = %(rid)s AND node_state = 'READY'",
)
#: Each node's READY time, the largest id first (seconds apart, in the past).
ENTERED_AGAINST_IDS = Query(
    "tests/entered-against-ids",
    "UPDATE movement_request_nodes n SET state_entered_at = now() - o.rank * interval '1 s'"
    " FROM (SELECT id, row_number() OVER (ORDER BY id) AS rank FROM movement_request_nodes"
    "       WHERE request_id = %(rid)s) o"
    " WHERE n.id = o.id RETURNING n.id, n.state_entered_at",
)


async def _ready(svc: ServiceContext, rid: Any) -> set[Any]:
    return {r["id"] for r in await svc.db.fetch(READY_IDS, {"rid": rid})}


@pytest.mark.parametrize("claim", ["batch", "walk"])
async def test_a_requests_ready_nodes_are_claimed_in_the_order_they_became_ready(
    svc: ServiceContext, claim: str
) -> None:
    await template(svc, "five", [node(f"n{i}", "cex_withdrawal") for i in range(NODES)], [])
    rid = (await movement(svc, "five", key="five"))["id"]
    entered = await svc.db.fetch(ENTERED_AGAINST_IDS, {"rid": rid})
    oldest_first = [r["id"] for r in sorted(entered, key=lambda r: r["state_entered_at"])]
    assert oldest_first == sorted(oldest_first, reverse=True)  # against id order
    ctx = with_settings(svc, node_dispatch_batch_size=1)
    taken = []
    for _ in range(NODES):
        before = await _ready(svc, rid)
        if claim == "batch":
            assert await dispatch_batch(ctx) == 1
        else:
            assert await dispatch_one_node(ctx) == 1
        [gone] = before - await _ready(svc, rid)
        taken.append(gone)
    assert taken == oldest_first
