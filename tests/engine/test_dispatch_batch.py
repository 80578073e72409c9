"""The batch dispatcher (issue 15): several passes on separate connections race
over one READY set and each node is claimed and submitted exactly once; a
batch's nonce lanes keep claim order; MG_NODE_DISPATCH_BATCH_SIZE=1 is the
reference's one node per pass."""

from __future__ import annotations

from dataclasses import dataclass

import trio

from qtg.db import ListenHub, Query
from qtg.services.context import ServiceContext
from qtg.services.dispatch import Submission, dispatch_ready_nodes, lanes
from qtg.services.movements import get_movement

from .helpers import Q, movement, node, race_passes, template

READY = Query(
    "tests/ready", "SELECT count(*) FROM movement_request_nodes WHERE node_state = 'READY'"
)


async def test_racing_batch_passes_claim_and_submit_each_node_exactly_once(
    svc: ServiceContext, dsn: str
) -> None:
    await template(svc, "burst", [node("withdraw", "cex_withdrawal")], [])
    total = 90
    for i in range(total):
        await movement(svc, "burst", key=f"burst-{i}")
    settings = svc.settings.replace(node_dispatch_batch_size=16)
    claimed, overlapping = await race_passes(svc, dsn, settings, dispatch_ready_nodes, more=READY)

    assert overlapping > 1  # the passes really raced
    assert max(claimed) > 1  # and a pass really claimed a batch
    assert sum(claimed) == total  # a node claimed twice would count twice
    subs = await svc.db.fetch(Q["submissions"])
    assert len(subs) == len({s["request_node_id"] for s in subs}) == total
    assert sum(s["duplicate_submits"] for s in subs) == 0


async def test_batch_size_one_dispatches_one_node_per_pass(svc: ServiceContext) -> None:
    serial = ServiceContext(svc.db, svc.settings.replace(node_dispatch_batch_size=1), svc.providers)
    await template(serial, "one", [node("withdraw", "cex_withdrawal")], [])
    for i in range(3):
        await movement(serial, "one", key=f"one-{i}")
    passes = []
    while dispatched := await dispatch_ready_nodes(serial):
        passes.append(dispatched)
    assert passes == [1, 1, 1]


@dataclass
class _LaneExecutor:
    """An executor stand-in that names a lane from the prepared payload."""

    def lane_key(self, prepared: str) -> str | None:
        return prepared.split(":")[0] or None


def _sub(node_id: str, lane: str) -> Submission:
    return Submission(  # type: ignore[arg-type]
        request_id="r", node_id=node_id, attempt_no=1, idempotency_key="k",
        context=None, prepared=f"{lane}:{node_id}", signature=None, executor=_LaneExecutor(),
    )  # fmt: skip


def test_lanes_keep_claim_order_within_a_lane_and_split_lane_less_work() -> None:
    subs = [_sub("a1", "A"), _sub("x", ""), _sub("b1", "B"), _sub("a2", "A"), _sub("a3", "A")]
    groups = [[s.node_id for s in lane] for lane in lanes(subs)]
    assert groups == [["a1", "a2", "a3"], ["x"], ["b1"]]


SUBMITTED_EVENTS = Query(
    "tests/submitted-events",
    "SELECT node_key, xact_id FROM movement_events"
    " WHERE event_type = 'node_state_changed' AND to_state = 'SUBMITTED'",
)


async def test_a_batch_commits_its_outcomes_together_and_a_rejection_fails_only_its_request(
    svc: ServiceContext,
) -> None:
    await template(svc, "ok", [node("ok", "cex_withdrawal")], [])
    await template(
        svc, "rej", [node("rej", "cex_withdrawal", sandbox={"fail": "submit_rejected"})], []
    )
    ok = [await movement(svc, "ok", key=f"ok-{i}") for i in range(3)]
    rejected = await movement(svc, "rej", key="rej")
    woken: list[str] = []
    ctx = ServiceContext(svc.db, svc.settings, svc.providers, wake=woken.append)
    assert await dispatch_ready_nodes(ctx) == 4  # one batch
    events = await svc.db.fetch(SUBMITTED_EVENTS)
    assert sorted(e["node_key"] for e in events) == ["ok"] * 3
    assert len({e["xact_id"] for e in events}) == 1  # one commit for the batch's outcomes
    assert woken == ["qtg_observe"]  # this process's observer, without the NOTIFY
    assert (await get_movement(svc.db, rejected["id"]))["request_state"] == "FAILED"
    for m in ok:
        assert (await get_movement(svc.db, m["id"]))["request_state"] == "EXECUTING"
    subs = await svc.db.fetch(Q["submissions"])
    assert len(subs) == 3 and sum(s["duplicate_submits"] for s in subs) == 0


async def test_an_unknown_submit_outcome_wakes_recovery_again_once_its_request_is_free(
    svc: ServiceContext, hub: ListenHub
) -> None:
    """The UNKNOWN row commits first and notifies qtg_recover, then the request is
    settled in a transaction of its own; a recovery pass woken by the first
    notify finds the request held by the second, skips the node and finds no due
    time. So the settle's commit notifies qtg_recover again."""
    crash = {"fail": "submit_crash_after", "recover": "undecided"}
    await template(svc, "crash", [node("a", "cex_withdrawal", sandbox=crash)], [])
    await movement(svc, "crash")
    seen: list[str] = []
    twice = trio.Event()

    def listener(channel: str, _payload: str) -> None:
        if channel == "qtg_recover":
            seen.append(channel)
            if len(seen) == 2:
                twice.set()

    hub.add_listener(listener)
    assert await dispatch_ready_nodes(svc) == 1
    with trio.fail_after(10):
        await twice.wait()
    subs = await svc.db.fetch(Q["submissions"])
    assert len(subs) == 1  # the side effect happened once; recovery decides the rest
