"""The batch observer (issue 15): several observer passes on separate pools race
over the same due nodes; each observation is made once, each node completed
once, and a completion's successor is released READY in the same commit."""

from __future__ import annotations

import pytest

from qtg.db import Query
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.observe import observe_active_nodes

from .helpers import Q, movement, node, race_passes, template

UNFINISHED = Query(
    "tests/unfinished",
    "SELECT count(*) FROM movement_requests WHERE request_state <> 'COMPLETED'",
)
COMPLETIONS = Query(
    "tests/completions",
    "SELECT node_id, count(*) AS times FROM movement_events"
    " WHERE event_type = 'node_state_changed' AND to_state = 'COMPLETED' GROUP BY node_id",
)
OBSERVATIONS = Query(
    "tests/observations", "SELECT request_node_id, observe_count FROM sandbox_submissions"
)
# A released successor's READY event and its predecessor's COMPLETED event
# come from one transaction.
SPLIT_RELEASES = Query(
    "tests/split-releases",
    "SELECT count(*) FROM movement_events done JOIN movement_events ready"
    " ON ready.request_id = done.request_id AND ready.node_key = 'b'"
    " AND ready.to_state = 'READY'"
    " WHERE done.node_key = 'a' AND done.to_state = 'COMPLETED'"
    " AND done.xact_id IS DISTINCT FROM ready.xact_id",
)


@pytest.mark.parametrize("batch_claim", [True, False], ids=["batch", "per-node"])
async def test_racing_observer_passes_observe_and_complete_each_node_once(
    svc: ServiceContext, dsn: str, batch_claim: bool
) -> None:
    twice = {"observations_to_complete": 2, "retry_after_seconds": 0.01, "latency_ms": 2}
    await template(
        svc,
        "pair",
        [node("a", "cex_withdrawal", sandbox=twice), node("b", "cex_withdrawal", sandbox=twice)],
        [["a", "b"]],
    )
    total = 40
    for i in range(total):
        await movement(svc, "pair", key=f"pair-{i}")
    settings = svc.settings.replace(
        node_observe_batch_size=16, node_observe_batch_claim=batch_claim
    )
    observed, overlapping = await race_passes(
        svc, dsn, settings, observe_active_nodes,
        more=UNFINISHED, before=dispatch_ready_nodes, pool_size=6,
    )  # fmt: skip

    assert overlapping > 1  # the passes really raced
    assert max(observed) > 1  # and a pass really observed several nodes
    completions = await svc.db.fetch(COMPLETIONS)
    assert len(completions) == 2 * total
    assert {c["times"] for c in completions} == {1}  # no node completed twice
    observations = await svc.db.fetch(OBSERVATIONS)
    assert len(observations) == 2 * total
    # the second observation completes: a third would be an observation made twice
    assert {o["observe_count"] for o in observations} == {2}
    assert sum(observed) == 4 * total  # every pass counted only what it observed
    subs = await svc.db.fetch(Q["submissions"])
    assert sum(s["duplicate_submits"] for s in subs) == 0
    assert await svc.db.fetchval(SPLIT_RELEASES) == 0


async def test_a_completion_that_releases_a_successor_wakes_this_processs_dispatcher(
    svc: ServiceContext,
) -> None:
    await template(
        svc, "chain", [node("a", "cex_withdrawal"), node("b", "cex_withdrawal")], [["a", "b"]]
    )
    await movement(svc, "chain")
    woken: list[str] = []
    ctx = ServiceContext(svc.db, svc.settings, svc.providers, wake=woken.append)
    assert await dispatch_ready_nodes(ctx) == 1
    woken.clear()
    assert await observe_active_nodes(ctx) == 1  # a completes, b is released
    assert woken == ["qtg_dispatch"]
    assert await dispatch_ready_nodes(ctx) == 1
    woken.clear()
    assert await observe_active_nodes(ctx) == 1  # b completes: nothing to release
    assert woken == []
