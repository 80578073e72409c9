"""Issue 43 item 3 against a real anvil and a real database: an operator cannot make
FAILED true by saying so.

On a23afdb two operators resolving an undecided evm node FAILED made it FAILED at once;
the nonce reaper then re-broadcast its kept bytes (so the destination could be paid), and a
retry paid again. Here the payment sits unmined in anvil's mempool (automine off) when the
operators resolve it FAILED: the node waits (UNKNOWN, FAILURE_NOT_PROVEN) while the reaper
replaces the payment at its nonce with a zero-value cancel, and is FAILED only once the
chain shows the cancel consumed the nonce; if the payment is mined first, the node is
observed again and completes, never FAILED. Every outcome is judged by the balances.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
import trio
from runtime.rt_procs import query

from evm.anvil import ADDRESSES, CHAIN_ID, KEYS
from qtg.config import Settings
from qtg.db import Database
from qtg.providers.registry import build_registry
from qtg.services import evm_nonces, movements
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.errors import Conflict
from qtg.services.node_attention import resolve_node
from qtg.services.observe import observe_active_nodes
from qtg.services.recover import next_recovery_due, recover_unknown_nodes
from qtg.services.templates import create_template

WEI = 10**18


def settings_for(anvil, dsn: str, **env: str) -> Settings:
    return Settings.from_env(
        {
            "MG_DATABASE_URL": dsn,
            "MG_PROVIDERS": "evm",
            "MG_EVM_RPC_URLS": f"{CHAIN_ID}={anvil.url}",
            "MG_EVM_SIGNER_PRIVATE_KEY": KEYS[0],
            **env,
        }
    )


async def approved_payment(
    anvil, dsn: str, db, **env: str
) -> tuple[ServiceContext, dict[str, Any], str]:
    """An approved one-node movement paying 1 ETH to a fresh address, not yet dispatched
    (settings ``env`` added to the evm ones). The context, the movement, the destination;
    shared with test_reorg_events so both start their payments the same way."""
    settings = settings_for(anvil, dsn, **env)
    ctx = ServiceContext(db=db, settings=settings, providers=build_registry(settings, db))
    destination = "0x" + secrets.token_hex(20)
    await create_template(
        db, actor="alice", template_key="t", name="t",
        graph={"nodes": [{"key": "send", "kind": "action", "action_type": "evm_transfer",
                          "config": {"evm": {"chain_id": CHAIN_ID}}}]},
    )  # fmt: skip
    m, _ = await movements.create_movement(
        db, settings, template_key="t", idempotency_key=secrets.token_hex(8), actor="alice",
        intent={"asset": "ETH", "amount": "1", "destination": destination},
    )  # fmt: skip
    await movements.approve_movement(db, m["id"], actor="bob")
    return ctx, m, destination


async def _in_mempool(anvil, dsn: str, db) -> tuple[ServiceContext, dict[str, Any], str]:
    """A movement whose payment was broadcast and sits unmined; its node forced UNKNOWN
    (as a recovery that cannot tell leaves it). The context, the movement, the destination."""
    ctx, m, destination = await approved_payment(anvil, dsn, db)
    anvil.call("evm_setAutomine", False)
    while await dispatch_ready_nodes(ctx):
        pass
    [(state, refs)] = query(
        dsn, "SELECT node_state, provider_refs FROM movement_request_nodes WHERE request_id = %s",
        (m["id"],),
    )  # fmt: skip
    assert state == "SUBMITTED"
    assert anvil.call("eth_getTransactionByHash", refs["tx_hash"])["blockNumber"] is None
    query(dsn, "UPDATE movement_request_nodes SET node_state = 'UNKNOWN' WHERE request_id = %s",
          (m["id"],))  # fmt: skip
    return ctx, m, destination


async def _resolve_failed(ctx: ServiceContext, m: dict[str, Any]) -> tuple[dict, bool]:
    args = {"outcome": "FAILED", "evidence": "the venue says it never left"}
    await resolve_node(ctx.db, ctx.settings, m["id"], "send", actor="carol", **args)
    return await resolve_node(ctx.db, ctx.settings, m["id"], "send", actor="dave", **args)


def _node(dsn: str, m: dict[str, Any]) -> tuple[str, str | None]:
    [row] = query(
        dsn, "SELECT node_state, error_code FROM movement_request_nodes WHERE request_id = %s",
        (m["id"],),
    )  # fmt: skip
    return row


@pytest.fixture
def automine_back(anvil):
    yield
    anvil.call("evm_setAutomine", True)


async def test_failed_only_once_the_chain_shows_the_cancel_consumed_the_nonce(
    anvil, dsn, db, automine_back
) -> None:
    ctx, m, destination = await _in_mempool(anvil, dsn, db)
    first = anvil.nonce(ADDRESSES[0])
    try:
        result, applied = await _resolve_failed(ctx, m)
        assert not applied and result["resolution"]["applied_at"] is None
        assert _node(dsn, m) == ("UNKNOWN", "FAILURE_NOT_PROVEN")
        # recovery neither claims it nor counts it due (it would wake for nothing, forever)
        assert await recover_unknown_nodes(ctx) == 0
        assert await next_recovery_due(ctx) is None
        with pytest.raises(Conflict) as refused:  # not FAILED yet: nothing to retry
            await movements.retry_node(db, m["id"], "send", actor="bob")
        assert refused.value.status == 409
        # a second resolution is refused while the chain decides
        with pytest.raises(Conflict) as again:
            await resolve_node(db, ctx.settings, m["id"], "send", actor="erin",
                               outcome="COMPLETED", evidence="x")  # fmt: skip
        assert again.value.code == "FAILURE_PROOF_PENDING"

        await evm_nonces.reap_stale_nonces(ctx)  # the cancel is signed, kept and sent
        [(cancel_hash,)] = query(
            dsn, "SELECT tx_hash FROM evm_signed_transactions WHERE kind = 'cancel'"
        )
        pending = anvil.call("eth_getTransactionByHash", cancel_hash)
        assert pending is not None and int(pending["value"], 16) == 0
        assert pending["to"].lower() == ADDRESSES[0].lower()
        assert _node(dsn, m) == ("UNKNOWN", "FAILURE_NOT_PROVEN")  # sent is not proven

        anvil.call("evm_mine")
        await evm_nonces.reap_stale_nonces(ctx)
        assert _node(dsn, m) == ("FAILED", "RESOLVED_FAILED_BY_OPERATORS")
        [(proof,)] = query(dsn, "SELECT proof FROM movement_node_resolutions")
        assert proof["kind"] == "cancel_mined" and proof["tx_hash"] == cancel_hash
        assert anvil.nonce(ADDRESSES[0]) == first + 1 and anvil.balance(destination) == 0
        body = await movements.get_movement(db, m["id"])
        assert body["nodes"][0]["failure_proven"] is True

        # proven: retry is allowed, and the new attempt pays exactly once
        await movements.retry_node(db, m["id"], "send", actor="bob")
        anvil.call("evm_setAutomine", True)
        while await dispatch_ready_nodes(ctx):
            pass
        await observe_active_nodes(ctx)
        assert _node(dsn, m)[0] == "COMPLETED"
    finally:
        await ctx.providers.aclose()
    assert anvil.balance(destination) == WEI


async def test_the_payment_mined_first_is_never_failed(anvil, dsn, db, automine_back) -> None:
    ctx, m, destination = await _in_mempool(anvil, dsn, db)
    try:
        _, applied = await _resolve_failed(ctx, m)
        assert not applied
        anvil.call("evm_mine")  # the original lands before any cancel is sent
        await evm_nonces.reap_stale_nonces(ctx)
        assert _node(dsn, m) == ("SUBMITTED", None)  # handed back to the observer
        await observe_active_nodes(ctx)
        assert _node(dsn, m)[0] == "COMPLETED"
        [(proof,)] = query(dsn, "SELECT proof FROM movement_node_resolutions")
        assert proof["kind"] == "payment_mined"
        assert query(
            dsn, "SELECT severity FROM notifications WHERE kind = 'failure_overruled'"
        ) == [("critical",)]
        assert query(dsn, "SELECT count(*) FROM evm_signed_transactions WHERE kind = 'cancel'") == [
            (0,)
        ]
    finally:
        await ctx.providers.aclose()
    assert anvil.balance(destination) == WEI


async def test_a_failed_node_with_live_bytes_is_never_resent_nor_retried(
    anvil, dsn, db, automine_back
) -> None:
    """A node FAILED by operators before this change (no proof) whose payment was dropped
    from the mempool: the reconcile step does not send it again (a23afdb did), cancels the
    nonce instead (so it is no hole), and retry answers 409 FAILURE_NOT_PROVEN."""
    ctx, m, destination = await _in_mempool(anvil, dsn, db)
    settings = ctx.settings.replace(evm_nonce_reservation_stale_seconds=0.001)
    ctx = ServiceContext(db=db, settings=settings, providers=ctx.providers)
    first = anvil.nonce(ADDRESSES[0])
    try:
        query(dsn, "UPDATE movement_request_nodes SET node_state = 'FAILED',"
                   " error_code = 'RESOLVED_FAILED_BY_OPERATORS' WHERE request_id = %s",
              (m["id"],))  # fmt: skip
        [(payment,)] = query(dsn, "SELECT tx_hash FROM evm_signed_transactions")
        anvil.call("anvil_dropTransaction", payment)
        with pytest.raises(Conflict) as refused:
            await movements.retry_node(db, m["id"], "send", actor="bob")
        assert refused.value.code == "FAILURE_NOT_PROVEN"
        assert (await movements.get_movement(db, m["id"]))["nodes"][0]["failure_proven"] is False
        query(dsn, "SELECT pg_sleep(0.01)")  # past the 1 ms stale threshold
        await evm_nonces.reap_stale_nonces(ctx)
        assert anvil.call("eth_getTransactionByHash", payment) is None  # not re-sent
        anvil.call("evm_mine")
        assert anvil.nonce(ADDRESSES[0]) == first + 1  # the cancel filled the nonce
    finally:
        await ctx.providers.aclose()
    assert anvil.balance(destination) == 0


async def test_two_runtimes_racing_the_cancel_step_decide_once(
    anvil, dsn, db, automine_back
) -> None:
    """Two runtimes' reapers (their own pools) run the cancel step side by side, before and
    after the cancel is mined: one cancel transaction, one FAILED, one proof audit."""
    ctx, m, destination = await _in_mempool(anvil, dsn, db)
    other_db = Database(dsn, min_size=1, max_size=2)
    other = ServiceContext(
        db=other_db, settings=ctx.settings, providers=build_registry(ctx.settings, other_db)
    )
    try:
        _, applied = await _resolve_failed(ctx, m)
        assert not applied

        async def both() -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(evm_nonces.reap_stale_nonces, ctx)
                nursery.start_soon(evm_nonces.reap_stale_nonces, other)

        await both()
        assert _node(dsn, m) == ("UNKNOWN", "FAILURE_NOT_PROVEN")
        anvil.call("evm_mine")
        await both()
        assert _node(dsn, m) == ("FAILED", "RESOLVED_FAILED_BY_OPERATORS")
        proven = query(
            dsn, "SELECT count(*) FROM audit_outbox WHERE action = 'movement.node_failure_proven'"
        )
        assert proven == [(1,)]
        mined = [
            h
            for (h,) in query(
                dsn, "SELECT tx_hash FROM evm_signed_transactions WHERE kind = 'cancel'"
            )
            if anvil.call("eth_getTransactionReceipt", h) is not None
        ]
        assert len(mined) == 1
    finally:
        await other.providers.aclose()
        await other_db.close()
        await ctx.providers.aclose()
    assert anvil.balance(destination) == 0


async def test_a_cancel_that_cannot_go_out_pages_after_the_bound(
    anvil, dsn, db, automine_back
) -> None:
    """The market fee is above MG_EVM_FEE_CAPS: no cancel is signed, the node stays
    UNKNOWN FAILURE_NOT_PROVEN, and past MG_NODE_UNKNOWN_ATTENTION_SECONDS a critical
    failure_not_proven page says so — once, however many passes."""
    ctx, m, destination = await _in_mempool(anvil, dsn, db)
    capped = ServiceContext(
        db=db,
        settings=ctx.settings.replace(
            evm_fee_caps=f"{CHAIN_ID}=0.000000001:0.000000001",
            node_unknown_attention_seconds=0.001,
        ),
        providers=ctx.providers,
    )
    try:
        await _resolve_failed(ctx, m)
        query(dsn, "SELECT pg_sleep(0.01)")  # past the 1 ms bound
        for _ in range(2):
            await evm_nonces.reap_stale_nonces(capped)
        assert query(dsn, "SELECT count(*) FROM evm_signed_transactions WHERE kind = 'cancel'") == [
            (0,)
        ]
        assert _node(dsn, m) == ("UNKNOWN", "FAILURE_NOT_PROVEN")
        assert query(
            dsn,
            "SELECT severity, occurrences > 1, resolved_at IS NULL FROM notifications"
            " WHERE kind = 'failure_not_proven'",
        ) == [("critical", True, True)]
    finally:
        await ctx.providers.aclose()
    assert anvil.balance(destination) == 0


async def test_an_old_attempts_live_bytes_are_never_resent_beside_a_new_attempt(
    anvil, dsn, db, automine_back
) -> None:
    """A node retried before this rule (attempt 2) while attempt 1's payment was still
    live: the reconcile step does not send attempt 1's bytes again (a23afdb did: a second
    payment beside the new attempt's); it cancels that nonce."""
    ctx, m, destination = await _in_mempool(anvil, dsn, db)
    settings = ctx.settings.replace(evm_nonce_reservation_stale_seconds=0.001)
    ctx = ServiceContext(db=db, settings=settings, providers=ctx.providers)
    try:
        query(dsn, "UPDATE movement_request_nodes SET node_state = 'FAILED' WHERE request_id = %s",
              (m["id"],))  # fmt: skip
        query(dsn, "UPDATE movement_request_nodes SET node_state = 'READY', attempt_no = 2"
                   " WHERE request_id = %s", (m["id"],))  # fmt: skip
        [(payment,)] = query(dsn, "SELECT tx_hash FROM evm_signed_transactions")
        anvil.call("anvil_dropTransaction", payment)
        query(dsn, "SELECT pg_sleep(0.01)")
        await evm_nonces.reap_stale_nonces(ctx)
        assert anvil.call("eth_getTransactionByHash", payment) is None
        assert query(dsn, "SELECT count(*) FROM evm_signed_transactions WHERE kind = 'cancel'") == [
            (1,)
        ]
        anvil.call("evm_mine")
    finally:
        await ctx.providers.aclose()
    assert anvil.balance(destination) == 0
