"""Issue 10: the money path under faults — one test (at least) per defect, each
failing on the code before the fix.

Real PostgreSQL throughout: locks are held by real transactions on other
connections, as another worker or an API call would hold them.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import psycopg
import pytest
import trio

from qtg.db import Database, Query
from qtg.domain.context import ExecutionContext
from qtg.domain.faults import CLAIM_TRIES_PER_TRANSACTION
from qtg.providers.base import PreparedAction, SubmitResult
from qtg.providers.registry import build_registry
from qtg.runtime.loop import run_loop
from qtg.services.callbacks import dispatch_pending_callbacks
from qtg.services.context import ServiceContext
from qtg.services.dispatch import ClaimWalk, _submit, dispatch_ready_nodes
from qtg.services.expiration import expire_pending_requests
from qtg.services.movements import create_movement, get_movement, retry_node
from qtg.services.observe import next_observe_due, observe_active_nodes
from qtg.services.recover import next_recovery_due, recover_unknown_nodes

from .helpers import (
    Q,
    WrappedExecutor,
    drive,
    eventually,
    movement,
    node,
    states,
    template,
    with_settings,
    write_ahead_only,
)

NODE_BY_KEY = Query(
    "tests/faults-node",
    "SELECT n.* FROM movement_request_nodes n WHERE n.node_key = %(key)s",
)
# The lock strength of the engine's own claims (FOR NO KEY UPDATE).
LOCK_REQUEST = Query(
    "tests/faults-lock-request",
    "SELECT id FROM movement_requests WHERE id = %(rid)s FOR NO KEY UPDATE",
)
LOCK_REQUESTS = Query(
    "tests/faults-lock-requests",
    "SELECT id FROM movement_requests WHERE id = ANY(%(ids)s::uuid[]) FOR NO KEY UPDATE",
)
LOCK_NODE = Query(
    "tests/faults-lock-node",
    "SELECT id FROM movement_request_nodes WHERE id = %(id)s FOR NO KEY UPDATE",
)


async def node_row(svc: ServiceContext, key: str) -> dict[str, Any]:
    row = await svc.db.fetchrow(NODE_BY_KEY, {"key": key})
    assert row is not None
    return row


# ---------------------------------------------------------------- item 1


UNDECIDED = {"fail": "submit_crash_after", "recover": "undecided"}


async def test_an_undecidable_node_is_paced_not_spun(svc: ServiceContext) -> None:
    """recover() cannot tell: the pass does not count the node (no drain), and
    the node gets a next-attempt time that holds off every process."""
    await template(svc, "undecided", [node("x", "cex_withdrawal", sandbox=UNDECIDED)], [])
    await movement(svc, "undecided")
    assert await dispatch_ready_nodes(svc) == 1
    assert (await node_row(svc, "x"))["node_state"] == "UNKNOWN"

    assert await recover_unknown_nodes(svc) == 0  # asked, undecided: not "processed"
    first = await node_row(svc, "x")
    assert first["recover_attempts"] == 1
    assert "cannot tell" in first["error_detail"]
    # another process (its own context, same database) does not ask again at once
    other = ServiceContext(svc.db, svc.settings, svc.providers)
    assert await recover_unknown_nodes(other) == 0
    assert (await node_row(svc, "x"))["recover_attempts"] == 1
    # and the loop knows when to come back: the node's next attempt
    assert await next_recovery_due(svc) == first["next_recover_at"]


async def test_the_recovery_loop_asks_an_undecided_provider_at_a_measured_pace(
    svc: ServiceContext,
) -> None:
    """The real run_loop with the drain rule and next_due, for 2 s: base 0.4 s,
    so at most 0.0, 0.4, 1.2 (and maybe 2.8) — never hundreds (issue: 313 in 2 s)."""
    paced = with_settings(
        svc, node_recovery_retry_base_seconds=0.4, node_recovery_interval_seconds=60.0
    )
    await template(paced, "undecided", [node("x", "cex_withdrawal", sandbox=UNDECIDED)], [])
    await movement(paced, "undecided")
    assert await dispatch_ready_nodes(paced) == 1
    passes = 0

    async def one_pass() -> int:
        nonlocal passes
        passes += 1
        return await recover_unknown_nodes(paced)

    with trio.move_on_after(2.0):  # the measurement window itself
        await run_loop("node_recovery", one_pass, 60.0, next_due=lambda: next_recovery_due(paced))
    asked = (await node_row(paced, "x"))["recover_attempts"]
    assert 2 <= asked <= 3, asked
    assert passes <= 6, passes


# ---------------------------------------------------------------- item 2


class LostConnectionExecutor(WrappedExecutor):
    """The sandbox, except that submit dies with the database connection — the
    error psycopg raises when PostgreSQL restarts under a call."""

    key = "lost-connection"

    async def submit(
        self, ctx: ExecutionContext, prepared: PreparedAction, signature: str | None, key: str
    ) -> SubmitResult:
        raise psycopg.OperationalError("server closed the connection unexpectedly")


async def test_a_submit_whose_connection_died_is_left_for_recovery_and_attempted_again(
    svc: ServiceContext,
) -> None:
    """Not a provider failure (main recorded UNKNOWN SUBMIT_OUTCOME_UNKNOWN):
    the node stays SUBMITTING; recovery proves nothing happened; attempt 2
    completes the movement, one submission in all."""
    await template(svc, "one", [node("withdraw", "cex_withdrawal")], [])
    m = await movement(svc, "one")
    sub = await write_ahead_only(svc)
    broken = dataclasses.replace(sub, executor=LostConnectionExecutor(sub.executor))
    with pytest.raises(psycopg.OperationalError):
        await _submit(svc, broken)
    left = await node_row(svc, "withdraw")
    assert (left["node_state"], left["error_code"]) == ("SUBMITTING", None)

    impatient = with_settings(svc, node_recovery_submitting_grace_seconds=0.001)
    done = await drive(impatient, m["id"])
    assert done["request_state"] == "COMPLETED"
    subs = await svc.db.fetch(Q["submissions"])
    assert [(s["attempt_no"], s["duplicate_submits"]) for s in subs] == [(2, 0)]


async def test_a_mint_after_a_burn_is_attempted_again_not_paged(svc: ServiceContext) -> None:
    """The measured MANUAL_INTERVENTION: a bridge's second leg stranded
    SUBMITTING by a restart after the first leg completed."""
    await template(
        svc, "bridge", [node("burn", "cctp_burn"), node("mint", "cctp_mint")], [["burn", "mint"]]
    )
    m = await movement(svc, "bridge")
    impatient = with_settings(svc, node_recovery_submitting_grace_seconds=0.001)
    assert await dispatch_ready_nodes(svc) == 1  # the burn

    async def mint_ready() -> bool:
        await observe_active_nodes(svc)
        return (await node_row(svc, "mint"))["node_state"] == "READY"

    await eventually(mint_ready)
    await write_ahead_only(svc)  # the restart kills the mint's submit
    done = await drive(impatient, m["id"])
    assert done["request_state"] == "COMPLETED"
    assert states(done) == {"burn": "COMPLETED", "mint": "COMPLETED"}


# ---------------------------------------------------------------- item 3


async def test_a_timed_out_node_beside_a_failed_sibling_pages(svc: ServiceContext) -> None:
    """a times out while b is in flight (no page yet: b must still be watched);
    then b fails. On main the request stayed EXECUTING with nobody paged."""
    enforcing = with_settings(svc, observe_timeout_enforcement_enabled=True)
    watch = node(
        "a",
        "destination_chain_receive_observe",
        "observe",
        sandbox={"observations_to_complete": 1000, "retry_after_seconds": 0.05},
    )
    watch["timeout_policy"] = {"observe_seconds": 3600}
    failing = node(
        "b",
        "cex_withdrawal",
        sandbox={"fail": "observe_failed", "observations_to_complete": 40,
                 "retry_after_seconds": 0.02},
    )  # fmt: skip
    await template(enforcing, "par", [watch, failing], [])
    m = await movement(enforcing, "par", callback_url="http://127.0.0.1:9/cb")
    while await dispatch_ready_nodes(enforcing):
        pass
    await enforcing.db.execute(
        Query(
            "tests/age-a",
            "UPDATE movement_request_nodes SET started_at = now() - interval '2 h'"
            " WHERE node_key = 'a'",
        )
    )

    async def a_timed_out() -> dict | None:
        await observe_active_nodes(enforcing)
        current = await get_movement(enforcing.db, m["id"])
        return current if states(current)["a"] == "UNKNOWN" else None

    now = await eventually(a_timed_out)
    assert states(now)["b"] in ("SUBMITTED", "OBSERVING")
    assert now["request_state"] == "EXECUTING"

    done = await drive(enforcing, m["id"])
    assert states(done) == {"a": "UNKNOWN", "b": "FAILED"}
    assert done["request_state"] == "MANUAL_INTERVENTION"
    events = await enforcing.db.fetch(Q["events"], {"rid": m["id"]})
    assert [e["event_type"] for e in events].count("request_attention") == 1
    callbacks = await enforcing.db.fetch(Q["callbacks"], {"rid": m["id"]})
    assert "request_attention" in {c["event_type"] for c in callbacks}


# ---------------------------------------------------------------- item 4


async def test_a_retried_node_gets_its_own_observation_clock(svc: ServiceContext) -> None:
    enforcing = with_settings(svc, observe_timeout_enforcement_enabled=True)
    withdraw = node(
        "withdraw", "cex_withdrawal",
        sandbox={"observations_to_complete": 2, "retry_after_seconds": 0.02},
    )  # fmt: skip
    withdraw["timeout_policy"] = {"observe_seconds": 3600}
    await template(enforcing, "timed", [withdraw], [])
    m = await movement(enforcing, "timed")
    assert await dispatch_ready_nodes(enforcing) == 1
    # attempt 1 started long ago and then failed for good
    await enforcing.db.execute(
        Query(
            "tests/fail-attempt-1",
            "UPDATE movement_request_nodes SET node_state = 'FAILED', error_code = 'X',"
            " started_at = now() - interval '2 h'",
        )
    )
    await retry_node(enforcing.db, m["id"], "withdraw", actor="bob")
    done = await drive(enforcing, m["id"])
    assert done["request_state"] == "COMPLETED", done["nodes"][0]["error_code"]
    subs = await svc.db.fetch(Q["submissions"])
    assert sorted(s["attempt_no"] for s in subs) == [1, 2]


# ---------------------------------------------------------------- item 5


async def test_every_worker_claims_only_its_own_network_class(
    svc: ServiceContext, settings: Any
) -> None:
    """Two deployments on one database: `mainnet` (the fixture's class, renamed)
    and `testnet`. Every worker of one leaves the other's movements alone."""
    main = with_settings(svc, network_class="mainnet", callback_signing_secret="s" * 32)
    test = with_settings(svc, network_class="testnet", callback_signing_secret="s" * 32)
    await template(test, "plain", [node("withdraw", "cex_withdrawal")], [])
    crash = {"fail": "submit_crash_after"}
    await template(test, "crash", [node("x", "cex_withdrawal", sandbox=crash)], [])

    plain = await movement(test, "plain", callback_url="http://127.0.0.1:9/cb")
    assert await dispatch_ready_nodes(main) == 0
    assert await dispatch_ready_nodes(with_settings(main, node_dispatch_batch_size=1)) == 0
    assert await dispatch_ready_nodes(test) == 1
    assert await next_observe_due(main) is None
    assert await observe_active_nodes(main) == 0
    assert await observe_active_nodes(with_settings(main, node_observe_batch_claim=False)) == 0
    assert await dispatch_pending_callbacks(main) == 0  # testnet's callback rows stay
    assert await observe_active_nodes(test) == 1
    assert (await get_movement(svc.db, plain["id"]))["request_state"] == "COMPLETED"
    assert await dispatch_pending_callbacks(test) > 0

    await movement(test, "crash")
    assert await dispatch_ready_nodes(test) == 1
    assert (await node_row(svc, "x"))["node_state"] == "UNKNOWN"
    assert await next_recovery_due(main) is None
    assert await recover_unknown_nodes(main) == 0
    assert await recover_unknown_nodes(test) == 1

    created, _ = await create_movement(
        test.db, test.settings, template_key="plain",
        intent={"asset": "USDC", "amount": "1.00", "destination": "0xabc"},
        idempotency_key=f"expire-{uuid.uuid4()}", actor="alice",
    )  # fmt: skip
    await svc.db.execute(
        Query("tests/expire-now", "UPDATE movement_requests SET expires_at = now() - interval '1 s'"
              " WHERE request_state = 'PENDING_APPROVAL'"),
    )  # fmt: skip
    assert await expire_pending_requests(main) == 0
    assert await expire_pending_requests(test) == 1
    assert (await get_movement(svc.db, created["id"]))["request_state"] == "EXPIRED"


# ---------------------------------------------------------------- item 7


async def test_one_failing_dispatch_does_not_cancel_a_siblings_submit(
    svc: ServiceContext,
) -> None:
    """MG_NODE_DISPATCH_CONCURRENCY = 2: one dispatch loses its connection in
    submit while the other's submit is in flight (1.5 s). On main the failure
    cancelled the group, leaving the sibling SUBMITTING for recovery."""
    registry = build_registry(svc.settings, svc.db)
    registry.add_executor(LostConnectionExecutor(registry.executor_for("cex_withdrawal")))
    wide = ServiceContext(svc.db, svc.settings.replace(node_dispatch_concurrency=2), registry)
    try:
        broken = node("a", "cex_withdrawal")
        broken["executor_key"] = "lost-connection"
        slow = node("b", "evm_transfer", sandbox={"latency_ms": 1500})
        slow["executor_key"] = "sandbox"
        await template(wide, "broken", [broken], [])
        await template(wide, "slow", [slow], [])
        await movement(wide, "broken")
        await movement(wide, "slow")
        with pytest.raises(psycopg.OperationalError):
            await dispatch_ready_nodes(wide)
        assert (await node_row(wide, "b"))["node_state"] == "SUBMITTED"
        assert (await node_row(wide, "a"))["node_state"] == "SUBMITTING"
    finally:
        await registry.aclose()


# ---------------------------------------------------------------- item 8


async def test_the_observer_does_not_spin_on_a_due_node_locked_elsewhere(
    svc: ServiceContext, dsn: str
) -> None:
    slow = {"observations_to_complete": 1000, "retry_after_seconds": 600}
    await template(svc, "one", [node("withdraw", "cex_withdrawal", sandbox=slow)], [])
    await movement(svc, "one")
    assert await dispatch_ready_nodes(svc) == 1
    due = await node_row(svc, "withdraw")
    assert due["node_state"] == "SUBMITTED"
    passes = 0

    async def one_pass() -> int:
        nonlocal passes
        passes += 1
        return await observe_active_nodes(svc)

    async with Database(dsn, min_size=1, max_size=1) as other, other.transaction() as holder:
        await holder.fetch(LOCK_NODE, {"id": due["id"]})  # another observer, mid provider call
        assert await next_observe_due(svc) is None
        with trio.move_on_after(1.0):  # the measurement window itself
            await run_loop("node_observer", one_pass, 5.0, next_due=lambda: next_observe_due(svc))
    assert passes <= 2, passes  # main: ~10 (every 0.1 s)
    # released, the node is due again
    assert await next_observe_due(svc) is not None


# ---------------------------------------------------------------- item 9


async def test_a_rejected_submit_is_recorded_while_an_observer_holds_the_request(
    svc: ServiceContext, dsn: str
) -> None:
    """On main, _submit waited for the request lock before writing anything:
    behind a long provider call it hit statement_timeout and lost the outcome."""
    await template(
        svc, "rej", [node("a", "cex_withdrawal", sandbox={"fail": "submit_rejected"})], []
    )
    m = await movement(svc, "rej")
    sub = await write_ahead_only(svc)

    async with (  # noqa: SIM117 - the lock must be released before the nursery joins
        Database(dsn, min_size=1, max_size=1) as other,
        trio.open_nursery() as nursery,
    ):
        async with other.transaction() as observer:
            await observer.fetch(LOCK_REQUEST, {"rid": m["id"]})
            nursery.start_soon(_submit, svc, sub)

            async def recorded() -> bool:
                return (await node_row(svc, "a"))["node_state"] == "FAILED"

            await eventually(recorded, deadline=5)
            # the request is still held: its state follows once the observer is done
            assert (await get_movement(svc.db, m["id"]))["request_state"] == "EXECUTING"
    done = await get_movement(svc.db, m["id"])
    assert done["request_state"] == "FAILED"
    assert done["nodes"][0]["error_code"] == "SANDBOX_SUBMIT_REJECTED"


# ---------------------------------------------------------------- item 10


async def test_the_claim_walk_is_bounded_per_transaction(svc: ServiceContext, dsn: str) -> None:
    """40 held requests with 3 READY nodes each ahead of one free request: the
    walk tries each held request once (not each node), at most
    CLAIM_TRIES_PER_TRANSACTION claims (savepoints) per transaction."""
    roots = [node(f"r{i}", "cex_withdrawal") for i in range(3)]
    await template(svc, "wide", roots, [])
    await template(svc, "free", [node("free", "evm_transfer")], [])
    held = [(await movement(svc, "wide", key=f"held-{i}"))["id"] for i in range(40)]
    await movement(svc, "free")

    async with Database(dsn, min_size=1, max_size=1) as other, other.transaction() as holder:
        await holder.fetch(LOCK_REQUESTS, {"ids": held})
        walk = ClaimWalk("default")
        async with svc.db.transaction() as tx:
            assert await walk.step(tx) is None
        assert (walk.tries, walk.exhausted) == (CLAIM_TRIES_PER_TRANSACTION, False)
        async with svc.db.transaction() as tx:
            claimed = await walk.step(tx)
        assert claimed is not None
        assert claimed[1].node_by_id(claimed[0])["node_key"] == "free"
        assert walk.tries == 41  # one per held request, then the free one

        assert await dispatch_ready_nodes(svc) == 1
        assert (await node_row(svc, "free"))["node_state"] == "SUBMITTED"
        assert await dispatch_ready_nodes(svc) == 0  # every candidate left is held


# ---------------------------------------------------------------- item 11


async def test_each_lane_has_its_own_submitting_grace(svc: ServiceContext) -> None:
    await template(svc, "ccip", [node("c", "ccip_send")], [])
    await template(svc, "cex", [node("x", "cex_withdrawal")], [])
    await movement(svc, "ccip")
    await movement(svc, "cex")
    await write_ahead_only(svc)
    await write_ahead_only(svc)
    ccip_only = with_settings(svc, node_recovery_submitting_grace_seconds_ccip=0.001)
    assert await recover_unknown_nodes(ccip_only) == 1
    assert (await node_row(svc, "c"))["node_state"] == "READY"  # never sent: attempt 2
    assert (await node_row(svc, "x"))["node_state"] == "SUBMITTING"  # within cex's 120 s
    cex_too = with_settings(ccip_only, node_recovery_submitting_grace_seconds_cex=0.001)
    assert await recover_unknown_nodes(cex_too) == 1
    assert (await node_row(svc, "x"))["node_state"] == "READY"
