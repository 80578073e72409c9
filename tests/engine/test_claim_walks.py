"""The batch claims as index walks (issue 15, migrations/0017): FIFO by the
request's created_at, through the node's copy of it; one node per request per
dispatch batch (the others wait, READY, for the next pass); the observer's walk
skips nodes that are not due."""

from __future__ import annotations

from typing import Any

from qtg.db import Query
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_batch
from qtg.services.observe import observe_batch

from .helpers import Q, movement, node, template

SUBMITTED_REQUESTS = Query(
    "tests/submitted-requests",
    "SELECT n.request_id, n.node_key FROM sandbox_submissions s"
    " JOIN movement_request_nodes n ON n.id::text = s.request_node_id",
)
OBSERVED_REQUESTS = Query(
    "tests/observed-requests",
    "SELECT n.request_id FROM sandbox_submissions s"
    " JOIN movement_request_nodes n ON n.id::text = s.request_node_id"
    " WHERE s.observe_count > 0",
)
NODE_STATES = Query(
    "tests/node-states",
    "SELECT node_key, node_state FROM movement_request_nodes WHERE request_id = %(rid)s",
)
NOT_DUE = Query(
    "tests/not-due",
    "UPDATE movement_request_nodes SET next_observe_at = now() + interval '1 hour'"
    " WHERE request_id = %(rid)s",
)


class _Recorder:
    """Stands in for the runtime's metrics: records the nodes that left READY."""

    def __init__(self) -> None:
        self.left: list[str] = []

    def node_left_state(self, state: str, seconds: float) -> None:
        if state == "READY":  # the pickups (SUBMITTING is recorded after the submit)
            self.left.append(state)


def _batched(svc: ServiceContext, size: int, metrics: Any = None) -> ServiceContext:
    settings = svc.settings.replace(node_dispatch_batch_size=size, node_observe_batch_size=size)
    return ServiceContext(svc.db, settings, svc.providers, metrics=metrics)


async def test_a_batch_takes_one_node_per_request_and_the_next_pass_the_other(
    svc: ServiceContext,
) -> None:
    # two roots, no edge: both READY at approval (a fan-out plan)
    await template(svc, "fan", [node("a", "cex_withdrawal"), node("b", "cex_withdrawal")], [])
    m = await movement(svc, "fan")
    assert sorted(r["node_state"] for r in await svc.db.fetch(NODE_STATES, {"rid": m["id"]})) == [
        "READY",
        "READY",
    ]
    recorder = _Recorder()
    ctx = _batched(svc, 16, recorder)

    assert await dispatch_batch(ctx) == 1  # the claim locked both; the batch kept one
    first = await svc.db.fetch(SUBMITTED_REQUESTS)
    assert len(first) == 1
    assert recorder.left == ["READY"]  # the left-out node did not leave READY
    states = {
        r["node_key"]: r["node_state"] for r in await svc.db.fetch(NODE_STATES, {"rid": m["id"]})
    }
    other = "b" if first[0]["node_key"] == "a" else "a"
    assert states[other] == "READY"  # released by the commit, still READY

    assert await dispatch_batch(ctx) == 1  # the next pass takes it
    assert recorder.left == ["READY", "READY"]
    assert await dispatch_batch(ctx) == 0
    subs = await svc.db.fetch(Q["submissions"])
    assert len(subs) == len({s["request_node_id"] for s in subs}) == 2
    assert sum(s["duplicate_submits"] for s in subs) == 0
    assert sorted(r["node_key"] for r in await svc.db.fetch(SUBMITTED_REQUESTS)) == ["a", "b"]


async def test_the_dispatch_claim_is_fifo_by_request_age(svc: ServiceContext) -> None:
    await template(svc, "fifo", [node("w", "cex_withdrawal")], [])
    # created (and approved) in this order; ids are random, so only the
    # request's created_at can put them in it
    made = [(await movement(svc, "fifo", key=f"fifo-{i}"))["id"] for i in range(5)]
    ctx = _batched(svc, 2)

    assert await dispatch_batch(ctx) == 2
    assert {r["request_id"] for r in await svc.db.fetch(SUBMITTED_REQUESTS)} == set(made[:2])
    assert await dispatch_batch(ctx) == 2
    assert {r["request_id"] for r in await svc.db.fetch(SUBMITTED_REQUESTS)} == set(made[:4])
    assert await dispatch_batch(ctx) == 1
    assert await dispatch_batch(ctx) == 0


async def test_the_observe_claim_skips_nodes_not_due_and_takes_the_oldest_request_first(
    svc: ServiceContext,
) -> None:
    await template(svc, "obs", [node("w", "cex_withdrawal")], [])
    made = [(await movement(svc, "obs", key=f"obs-{i}"))["id"] for i in range(6)]
    ctx = _batched(svc, 16)
    assert await dispatch_batch(ctx) == 6  # all SUBMITTED, due at once
    await svc.db.execute(NOT_DUE, {"rid": made[0]})  # the oldest is not due
    ctx = _batched(svc, 2)

    assert await observe_batch(ctx) == 2
    assert {r["request_id"] for r in await svc.db.fetch(OBSERVED_REQUESTS)} == set(made[1:3])
    assert await observe_batch(ctx) == 2
    observed = {r["request_id"] for r in await svc.db.fetch(OBSERVED_REQUESTS)}
    assert observed == set(made[1:5])
    assert made[0] not in observed
