"""node_recovery: the four arms, the grace cutoff, and crashes between the
write-ahead commit and submit's return — resolved without a second submit."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import trio

from qtg.db import Query
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.movements import get_movement
from qtg.services.recover import recover_unknown_nodes

from .helpers import (
    Q,
    drive,
    eventually,
    movement,
    node,
    states,
    template,
    with_settings,
    write_ahead_only,
)

UNKNOWN_BY_LANE = Query(
    "tests/unknown-by-lane",
    "SELECT action_type, count(*) AS n FROM movement_request_nodes "
    "WHERE node_state = 'UNKNOWN' GROUP BY action_type",
)
NODE_STATES = Query(
    "tests/node-states",
    "SELECT n.node_state, n.error_code, r.created_at FROM movement_request_nodes n "
    "JOIN movement_requests r ON r.id = n.request_id ORDER BY r.created_at",
)
LANES = ("ccip_send", "stargate_send", "cex_withdrawal", "evm_transfer")


async def _unknown_nodes(svc: ServiceContext, per_lane: int) -> None:
    """Make `per_lane` UNKNOWN nodes in every lane (the side effect happened, then
    submit crashed), leaving them for recovery."""
    for action_type in LANES:
        await template(
            svc, action_type.replace("_", "-"),
            [node("x", action_type, sandbox={"fail": "submit_crash_after"})], [],
        )  # fmt: skip
        for _ in range(per_lane):
            await movement(svc, action_type.replace("_", "-"))
    while await dispatch_ready_nodes(svc):
        pass
    counts = {r["action_type"]: r["n"] for r in await svc.db.fetch(UNKNOWN_BY_LANE)}
    assert counts == dict.fromkeys(LANES, per_lane)


async def test_each_arm_takes_a_quarter_of_the_batch_in_priority_order(svc: ServiceContext) -> None:
    await _unknown_nodes(svc, per_lane=3)
    recovered = await recover_unknown_nodes(with_settings(svc, node_recovery_batch_size=8))
    assert recovered == 8
    left = {r["action_type"]: r["n"] for r in await svc.db.fetch(UNKNOWN_BY_LANE)}
    assert left == dict.fromkeys(LANES, 1)  # two of each lane: no arm starved


async def test_a_small_batch_still_gives_every_arm_one(svc: ServiceContext) -> None:
    await _unknown_nodes(svc, per_lane=2)
    assert await recover_unknown_nodes(with_settings(svc, node_recovery_batch_size=1)) == 4
    left = {r["action_type"]: r["n"] for r in await svc.db.fetch(UNKNOWN_BY_LANE)}
    assert left == dict.fromkeys(LANES, 1)


async def test_longest_idle_unknown_node_goes_first(svc: ServiceContext) -> None:
    await template(
        svc, "cex", [node("x", "cex_withdrawal", sandbox={"fail": "submit_crash_after"})], []
    )
    for _ in range(3):
        await movement(svc, "cex")
    serial = with_settings(svc, node_dispatch_batch_size=1)  # so they go UNKNOWN in FIFO order
    while await dispatch_ready_nodes(serial):
        pass
    await recover_unknown_nodes(with_settings(svc, node_recovery_batch_size=4))
    rows = await svc.db.fetch(NODE_STATES)
    # the oldest one (it went UNKNOWN first) was recovered; the others wait
    assert [r["node_state"] for r in rows] == ["SUBMITTED", "UNKNOWN", "UNKNOWN"]


async def test_stranded_submitting_node_that_never_submitted_is_attempted_again(
    svc: ServiceContext,
) -> None:
    """Issue 10 item 2 (beyond the reference, which ends it FAILED): recover()
    proves attempt 1 never happened, so the node goes back to READY and attempt
    2 — a new idempotency key — completes the movement, one submission in all."""
    await template(svc, "one", [node("withdraw", "cex_withdrawal")], [])
    m = await movement(svc, "one")
    await write_ahead_only(svc)
    # within the grace cutoff recovery leaves it alone: submit may still be running
    assert await recover_unknown_nodes(svc) == 0
    impatient = with_settings(svc, node_recovery_submitting_grace_seconds=0.001)
    assert await recover_unknown_nodes(impatient) == 1
    again = await svc.db.fetchrow(Q["node"], {"rid": m["id"], "key": "withdraw"})
    assert (again["node_state"], again["attempt_no"], again["error_code"]) == (
        "READY",
        1,
        "NOT_SUBMITTED",
    )
    done = await drive(impatient, m["id"])
    assert done["request_state"] == "COMPLETED"
    subs = await svc.db.fetch(Q["submissions"])
    assert [(s["attempt_no"], s["duplicate_submits"]) for s in subs] == [(2, 0)]


async def test_a_never_submitted_node_fails_once_its_attempts_are_used_up(
    svc: ServiceContext,
) -> None:
    await template(svc, "one", [node("withdraw", "cex_withdrawal")], [])
    m = await movement(svc, "one")
    await write_ahead_only(svc)
    impatient = with_settings(
        svc, node_recovery_submitting_grace_seconds=0.001, node_max_attempts=1
    )
    assert await recover_unknown_nodes(impatient) == 1
    done = await get_movement(svc.db, m["id"])
    assert done["request_state"] == "FAILED"
    withdraw = done["nodes"][0]
    assert (withdraw["node_state"], withdraw["error_code"]) == ("FAILED", "NOT_SUBMITTED")
    assert await svc.db.fetch(Q["submissions"]) == []


async def test_attempts_given_back_untouched_do_not_use_up_the_budget(
    svc: ServiceContext,
) -> None:
    """Issue 24 item 5: two attempts sent back to READY unsubmitted (a lane stop, the
    dispatcher's own back_to_ready) and a third stranded by a crash: recovery proves
    the third never happened, and with MG_NODE_MAX_ATTEMPTS=2 the node goes on — only
    one attempt ever could have reached the provider. It was FAILED (3 >= 2) before."""
    from qtg.services.dispatch import LANE_STOPPED, _back_to_ready

    await template(svc, "one", [node("withdraw", "cex_withdrawal")], [])
    m = await movement(svc, "one")
    for _ in range(2):
        sub = await write_ahead_only(svc)
        async with svc.db.transaction() as tx:
            await _back_to_ready(svc, tx, [sub], LANE_STOPPED, "lane stopped (test)", 0.0)
    await write_ahead_only(svc)  # attempt 3, then the process "dies"
    row = await svc.db.fetchrow(Q["node"], {"rid": m["id"], "key": "withdraw"})
    assert (row["node_state"], row["attempt_no"]) == ("SUBMITTING", 3)
    impatient = with_settings(
        svc, node_recovery_submitting_grace_seconds=0.001, node_max_attempts=2
    )
    assert await recover_unknown_nodes(impatient) == 1
    again = await svc.db.fetchrow(Q["node"], {"rid": m["id"], "key": "withdraw"})
    assert (again["node_state"], again["error_code"]) == ("READY", "NOT_SUBMITTED")
    done = await drive(impatient, m["id"])
    assert done["request_state"] == "COMPLETED"
    subs = await svc.db.fetch(Q["submissions"])
    assert [(s["attempt_no"], s["duplicate_submits"]) for s in subs] == [(4, 0)]


async def test_stranded_submitting_node_whose_submit_happened_completes_once(
    svc: ServiceContext,
) -> None:
    await template(svc, "one", [node("withdraw", "cex_withdrawal")], [])
    m = await movement(svc, "one")
    sub = await write_ahead_only(svc)
    # the side effect happens, and the process dies before recording it
    await sub.executor.submit(sub.context, sub.prepared, sub.signature, sub.idempotency_key)
    impatient = with_settings(svc, node_recovery_submitting_grace_seconds=0.001)
    done = await drive(impatient, m["id"])
    assert done["request_state"] == "COMPLETED"
    subs = await svc.db.fetch(Q["submissions"])
    assert [(s["attempt_no"], s["duplicate_submits"]) for s in subs] == [(1, 0)]


async def test_recovery_skips_a_submitting_node_whose_submit_is_in_flight(
    svc: ServiceContext, dsn: str
) -> None:
    await template(svc, "one", [node("withdraw", "cex_withdrawal")], [])
    await movement(svc, "one")
    await write_ahead_only(svc)
    impatient = with_settings(svc, node_recovery_submitting_grace_seconds=0.001)
    lock = Query("tests/hold", "SELECT id FROM movement_request_nodes FOR UPDATE")
    async with svc.db.transaction() as live_submit:  # what _submit holds during submit()
        await live_submit.fetch(lock)
        assert await recover_unknown_nodes(impatient) == 0
    assert await recover_unknown_nodes(impatient) == 1


WORKER = """
import sys, trio
from qtg.config import Settings
from qtg.db import Database
from qtg.providers.registry import build_registry
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes

async def main():
    # the provider answers slowly in this process only: time to kill it mid-submit
    settings = Settings.from_env({"MG_DATABASE_URL": sys.argv[1], "MG_SANDBOX_LATENCY_MS": "60000"})
    async with Database(sys.argv[1]) as db:
        await dispatch_ready_nodes(ServiceContext(db, settings, build_registry(settings, db)))

trio.run(main)
"""


async def test_dispatcher_killed_during_submit_is_recovered_without_resubmitting(
    svc: ServiceContext, dsn: str, tmp_path: Path
) -> None:
    """A real crash: kill -9 the dispatching process after the provider recorded
    the side effect but before submit returned (the sandbox's latency)."""
    await template(svc, "slow", [node("withdraw", "cex_withdrawal")], [])
    m = await movement(svc, "slow")
    proc = await trio.lowlevel.open_process([sys.executable, "-c", WORKER, dsn])
    try:
        await eventually(lambda: svc.db.fetch(Q["submissions"]))
        assert (
            states(await drive(svc, m["id"], stop=frozenset({"EXECUTING"})))["withdraw"]
            == "SUBMITTING"
        )
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    impatient = with_settings(svc, node_recovery_submitting_grace_seconds=0.001)
    # the dead backend's locks go when PostgreSQL notices; recovery then finds the node
    await eventually(lambda: recover_unknown_nodes(impatient))
    done = await drive(impatient, m["id"])
    assert done["request_state"] == "COMPLETED"
    subs = await svc.db.fetch(Q["submissions"])
    assert [(s["attempt_no"], s["duplicate_submits"]) for s in subs] == [(1, 0)]
