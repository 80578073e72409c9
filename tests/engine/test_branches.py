"""Parallel branches: a failure in one branch never stops the workers from
watching money that is moving in another (derive.py's guard), and an
observation timeout pages a human even with no completed side effect."""

from __future__ import annotations

import trio

from qtg.db import Query
from qtg.services.context import ServiceContext
from qtg.services.dispatch import _submit, dispatch_ready_nodes
from qtg.services.movements import get_movement, resume_movement
from qtg.services.observe import observe_active_nodes

from .helpers import Q, drive, eventually, movement, node, states, template, write_ahead_one

SLOW = {"observations_to_complete": 3, "retry_after_seconds": 0.05}


async def test_a_failed_branch_waits_for_the_money_moving_beside_it(svc: ServiceContext) -> None:
    await template(
        svc,
        "par",
        [
            node("a", "cex_withdrawal", sandbox={"fail": "observe_failed"}),
            node("b", "cex_withdrawal", sandbox=SLOW),
        ],
        [],
    )
    m = await movement(svc, "par")
    while await dispatch_ready_nodes(svc):
        pass

    async def a_failed() -> dict | None:
        # a fails on its first observation (the two nodes share a request, so one
        # pass may claim only one of them); b needs three observations
        await observe_active_nodes(svc)
        current = await get_movement(svc.db, m["id"])
        return current if states(current)["a"] == "FAILED" else None

    now = await eventually(a_failed)
    assert states(now)["b"] in ("SUBMITTED", "OBSERVING")
    assert now["request_state"] == "EXECUTING"  # not FAILED: b must still be watched

    done = await drive(svc, m["id"])
    assert states(done) == {"a": "FAILED", "b": "COMPLETED"}
    # b moved money and a failed: a human decides
    assert done["request_state"] == "MANUAL_INTERVENTION"
    assert len(await svc.db.fetch(Q["submissions"])) == 2


async def test_a_manual_gate_does_not_stall_a_parallel_action_branch(svc: ServiceContext) -> None:
    await template(
        svc,
        "gate",
        [node("gate", "manual_confirm", "manual"), node("send", "cex_withdrawal")],
        [],
    )
    m = await movement(svc, "gate")
    assert m["request_state"] == "APPROVED"  # not WAITING: `send` is ready to run
    waiting = await drive(svc, m["id"])
    assert states(waiting) == {"gate": "READY", "send": "COMPLETED"}
    assert waiting["request_state"] == "WAITING_MANUAL_ACTION"


async def test_observation_timeout_pages_even_without_a_side_effect(svc: ServiceContext) -> None:
    enforcing = ServiceContext(
        svc.db, svc.settings.replace(observe_timeout_enforcement_enabled=True), svc.providers
    )
    watch = node("watch", "destination_chain_receive_observe", "observe", sandbox=SLOW)
    watch["timeout_policy"] = {"observe_seconds": 3600}
    await template(enforcing, "watch", [watch], [])
    m = await movement(enforcing, "watch", callback_url="http://127.0.0.1:9/cb")
    await dispatch_ready_nodes(enforcing)
    await enforcing.db.execute(
        Query("tests/age", "UPDATE movement_request_nodes SET started_at = now() - interval '2 h'")
    )
    paged = await drive(enforcing, m["id"])
    assert paged["request_state"] == "MANUAL_INTERVENTION"
    assert paged["nodes"][0]["error_code"] == "OBSERVATION_TIMEOUT"
    events = await enforcing.db.fetch(Q["events"], {"rid": m["id"]})
    assert [e["event_type"] for e in events].count("request_attention") == 1

    # the operator has looked and resumes: recovery re-checks the node, the
    # observation window starts again, and the transfer is seen to complete
    resumed = await resume_movement(enforcing.db, m["id"], actor="ops")
    assert resumed["request_state"] == "EXECUTING"
    assert resumed["nodes"][0]["error_code"] == "OBSERVATION_TIMEOUT_ACKNOWLEDGED"
    with trio.fail_after(20):
        done = await drive(enforcing, m["id"], stop=frozenset({"COMPLETED"}))
    assert done["request_state"] == "COMPLETED"
    audit = await enforcing.db.fetch(Q["audit"], {"oid": str(m["id"])})
    assert audit[-1]["action"] == "movement.resumed"
    assert audit[-1]["detail"] == {"rearmed": ["watch"]}


LOCK_REQUEST = Query("tests/hold-request", "SELECT id FROM movement_requests FOR UPDATE")
COMPLETE_B = Query(
    "tests/complete-b",
    "UPDATE movement_request_nodes SET node_state = 'COMPLETED' WHERE node_key = 'b'",
)
LOCK_WAITERS = Query(
    "tests/lock-waiters",
    "SELECT count(*) AS n FROM pg_stat_activity "
    "WHERE datname = current_database() AND wait_event_type = 'Lock'",
)


async def test_a_failed_submit_decides_from_the_nodes_as_they_are_when_it_commits(
    svc: ServiceContext,
) -> None:
    """While a rejected submit is being recorded, another worker completes the
    sibling branch (it holds the request). The failure must wait for it and see
    b COMPLETED — money moved — so the request needs a human. A stale read
    would see b still in flight and leave the request EXECUTING forever."""
    await template(
        svc,
        "race",
        [
            node("a", "cex_withdrawal", sandbox={"fail": "submit_rejected"}),
            node("b", "evm_transfer"),
        ],
        [],
    )
    m = await movement(svc, "race")
    held_a = None
    for _ in range(2):  # write-ahead both roots; submit b now, keep a for later
        sub = await write_ahead_one(svc)
        assert sub is not None
        if sub.context.node_key == "a":
            held_a = sub
        else:
            await _submit(svc, sub)
    assert held_a is not None
    assert states(await get_movement(svc.db, m["id"])) == {"a": "SUBMITTING", "b": "SUBMITTED"}

    async with trio.open_nursery() as nursery, svc.db.transaction() as observer:
        await observer.fetch(LOCK_REQUEST)  # the observer holds the request...
        nursery.start_soon(_submit, svc, held_a)  # ...while a's submit is rejected
        await eventually(lambda: _lock_waiters(svc))
        await observer.execute(COMPLETE_B)  # ...and completes b before it commits
    done = await get_movement(svc.db, m["id"])
    assert states(done) == {"a": "FAILED", "b": "COMPLETED"}
    assert done["request_state"] == "MANUAL_INTERVENTION"


async def _lock_waiters(svc: ServiceContext) -> int:
    return await svc.db.fetchval(LOCK_WAITERS)
