"""Dead owners are noticed in seconds (issue 43 item 7), at the service level.

A node written ahead by a runtime process that stopped beating its liveness
row is a recovery candidate at once; one whose owner beats is left for the
SUBMITTING grace; one whose submit is in flight (its row held) is never taken,
whatever its owner looks like; and recovery's next due time is the moment the
owner will count as gone. The real kill -9 is tests/runtime/test_runtime_dead_owner.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import trio

from qtg.db import Query
from qtg.services import liveness
from qtg.services.context import ServiceContext
from qtg.services.heartbeats import ProcessId
from qtg.services.recover import next_recovery_due, recover_unknown_nodes

from .helpers import Q, movement, node, template, with_settings, write_ahead_only

NODE = Query(
    "tests/dead-owner-node",
    "SELECT node_state, submitting_owner FROM movement_request_nodes WHERE request_id = %(rid)s",
)
AGE_BEAT = Query(
    "tests/dead-owner-age",
    "UPDATE runtime_processes SET alive_at = now() - make_interval(secs => %(s)s)"
    " WHERE instance_id = %(id)s",
)
HOLD = Query(
    "tests/dead-owner-hold",
    "SELECT id FROM movement_request_nodes WHERE request_id = %(rid)s FOR NO KEY UPDATE",
)


async def _owned_submitting(svc: ServiceContext, process: ProcessId) -> Any:
    await template(svc, "owned", [node("x", "evm_transfer")], [])
    rid = (await movement(svc, "owned"))["id"]
    owned = ServiceContext(svc.db, svc.settings, svc.providers, instance_id=process.instance_id)
    await liveness.beat(svc.db, process, svc.settings.network_class)
    await write_ahead_only(owned)  # "crash": SUBMITTING, no submit, no record of one
    row = await svc.db.fetchrow(NODE, {"rid": rid})
    assert row is not None
    assert (row["node_state"], row["submitting_owner"]) == ("SUBMITTING", process.instance_id)
    return rid


async def test_a_node_whose_owner_stopped_beating_is_recovered_at_once(
    svc: ServiceContext,
) -> None:
    process = ProcessId.current()
    rid = await _owned_submitting(svc, process)
    # the owner beats: the 120 s grace applies, nothing is taken
    assert await recover_unknown_nodes(svc) == 0
    assert (await svc.db.fetchrow(NODE, {"rid": rid}))["node_state"] == "SUBMITTING"
    due = await next_recovery_due(svc)
    assert due is not None
    wait = (due - datetime.now(UTC)).total_seconds()
    assert 0 < wait <= svc.settings.node_recovery_dead_owner_seconds + 1

    # it stops beating for longer than MG_NODE_RECOVERY_DEAD_OWNER_SECONDS
    await svc.db.execute(AGE_BEAT, {"s": 6.0, "id": process.instance_id})
    due = await next_recovery_due(svc)
    assert due is not None and (due - datetime.now(UTC)).total_seconds() <= 1.5
    # a submit in flight (its row held) is never taken, whatever its owner looks like
    async with svc.db.transaction() as holder:
        await holder.fetch(HOLD, {"rid": rid})
        with trio.fail_after(10):
            assert await recover_unknown_nodes(svc) == 0
    # released: recover() finds no submission -> a new attempt, READY
    assert await recover_unknown_nodes(svc) == 1
    row = await svc.db.fetchrow(Q["node"], {"rid": rid, "key": "x"})
    assert row["node_state"] == "READY"


async def test_a_longer_bound_waits_for_it(svc: ServiceContext) -> None:
    process = ProcessId.current()
    rid = await _owned_submitting(svc, process)
    await svc.db.execute(AGE_BEAT, {"s": 6.0, "id": process.instance_id})
    patient = with_settings(svc, node_recovery_dead_owner_seconds=30.0)
    assert await recover_unknown_nodes(patient) == 0
    assert (await svc.db.fetchrow(NODE, {"rid": rid}))["node_state"] == "SUBMITTING"
