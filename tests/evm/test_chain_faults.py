"""Issue 24 against a real anvil and a real database: under the faults every production RPC
has, each destination is paid exactly once, judged by the chain's balances, and no node is
FAILED while its payment may land.

Provider level (preflight → prepare → sign → submit, then observe/recover as the workers
call them) so each fault is placed exactly; the runtime crash points are in
test_evm_runtime.py and tests/ccip/test_ccip_runtime.py.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest
import trio
from runtime.rt_procs import query

from evm.anvil import ADDRESSES, CHAIN_ID, KEYS, deploy_token, token_balance
from evm.lagproxy import LagProxy
from qtg.config import Settings
from qtg.domain.context import ExecutionContext
from qtg.domain.execution import build_sign_request
from qtg.providers.base import (
    ObserveStatus,
    PreflightError,
    RecoverOutcome,
    RetryLater,
)
from qtg.providers.registry import build_registry
from qtg.services import evm_nonces
from qtg.services.context import ServiceContext

WEI = 10**18


def settings_for(url: str, dsn: str, **more: str) -> Settings:
    return Settings.from_env(
        {
            "MG_DATABASE_URL": dsn,
            "MG_PROVIDERS": "evm",
            "MG_EVM_RPC_URLS": f"{CHAIN_ID}={url}",
            "MG_EVM_SIGNER_PRIVATE_KEY": KEYS[0],
            **more,
        }
    )


def fresh_address() -> str:
    return "0x" + secrets.token_hex(20)


def context(
    node_id: str,
    destination: str,
    amount: str = "1",
    *,
    token: str | None = None,
    refs: dict | None = None,
) -> ExecutionContext:
    evm: dict[str, Any] = {"chain_id": CHAIN_ID}
    if token is not None:
        evm.update(token=token, decimals=0)
    return ExecutionContext(
        request_id="r-" + node_id,
        request_node_id=node_id,
        compiled_plan_hash="0" * 64,
        template_key="t",
        template_version=1,
        node_key="send",
        node_kind="action",
        action_type="evm_transfer",
        attempt_no=1,
        intent={"amount": amount, "destination": destination},
        input_params={},
        resolved_bindings={},
        risk_controls={},
        prior_artifacts=[],
        node_config={"evm": evm},
        provider_context={},
        timeout_policy={},
        node_provider_refs=refs or {},
    )


def with_refs(ctx: ExecutionContext, refs: dict) -> ExecutionContext:
    fields = {f: getattr(ctx, f) for f in ctx.__struct_fields__}
    return ExecutionContext(**{**fields, "node_provider_refs": refs})


async def send(registry, ctx: ExecutionContext) -> dict:
    """What the dispatcher does for one node; the submit's provider refs."""
    executor = registry.executor_for("evm_transfer")
    await executor.preflight(ctx)
    prepared = await executor.prepare(ctx)
    signature = await registry.signer(prepared.signer_key).sign(build_sign_request(ctx, prepared))
    result = await executor.submit(ctx, prepared, signature, "k-" + ctx.request_node_id)
    return dict(result.provider_refs)


async def observe_until_done(
    executor, ctx: ExecutionContext, refs: dict, *, within=20.0, mine=None
):
    """Observe as node_observer does (refs carried over) until the result is not PENDING."""
    with trio.fail_after(within):
        while True:
            seen = await executor.observe(with_refs(ctx, refs))
            refs = {**refs, **seen.provider_refs}
            if seen.status is not ObserveStatus.PENDING:
                return seen, refs
            if mine is not None:
                mine()
            await trio.sleep(0.1)


async def chain_reaches(anvil, count: int, within: float = 10.0) -> None:
    """Wait until the signer's mined transaction count is `count` (automine answers a send
    before its block is always visible)."""
    with trio.fail_after(within):
        while True:
            if anvil.nonce(ADDRESSES[0]) >= count:
                break
            await trio.sleep(0.05)
    assert anvil.nonce(ADDRESSES[0]) == count


async def test_read_lag_never_fails_a_mined_transfer_and_pays_each_once(anvil, dsn, db) -> None:
    """An RPC that answers null for a just-broadcast hash for 1.5 s: on main all five
    ended FAILED (EVM_NOT_BROADCAST) while mined, and a retry paid twice."""
    proxy = LagProxy(anvil.url, lag=1.5)
    registry = build_registry(
        settings_for(proxy.url, dsn, MG_EVM_EVIDENCE_ATTENTION_SECONDS="30"), db
    )
    executor = registry.executor_for("evm_transfer")
    first = anvil.nonce(ADDRESSES[0])
    destinations = [fresh_address() for _ in range(5)]
    try:
        for i, dest in enumerate(destinations):
            ctx = context(f"lag{i}", dest)
            refs = await send(registry, ctx)
            # recovery asking at once (the node went UNKNOWN): the lagging "not found" is
            # no proof, so no new attempt and no FAILED
            early = await executor.recover(ctx)
            assert early.outcome in (RecoverOutcome.SUBMITTED, RecoverOutcome.UNKNOWN), early
            seen, _ = await observe_until_done(executor, ctx, refs)
            assert seen.status is ObserveStatus.COMPLETED, seen
        assert proxy.nulls > 0  # the lag was really served
    finally:
        await registry.aclose()
        proxy.close()
    assert [anvil.balance(d) for d in destinations] == [WEI] * 5  # each paid exactly once
    assert anvil.nonce(ADDRESSES[0]) == first + 5


async def test_a_dropped_transaction_is_sent_again_from_its_kept_bytes(anvil, dsn, db) -> None:
    registry = build_registry(settings_for(anvil.url, dsn), db)
    executor = registry.executor_for("evm_transfer")
    dest = fresh_address()
    anvil.call("evm_setAutomine", False)
    try:
        ctx = context("drop", dest)
        refs = await send(registry, ctx)
        anvil.call("anvil_dropTransaction", refs["tx_hash"])
        assert anvil.call("eth_getTransactionByHash", refs["tx_hash"]) is None
        outcome = await executor.recover(ctx)  # one "not found": never FAILED, never released
        assert outcome.outcome is RecoverOutcome.SUBMITTED
        assert anvil.call("eth_getTransactionByHash", refs["tx_hash"]) is not None  # re-sent
        anvil.call("evm_mine")
        seen, refs = await observe_until_done(executor, ctx, outcome.provider_refs)
        assert seen.status is ObserveStatus.COMPLETED
        assert refs["tx_hash"] == outcome.provider_refs["tx_hash"]
    finally:
        anvil.call("evm_setAutomine", True)
        await registry.aclose()
    assert anvil.balance(dest) == WEI


async def test_an_unmined_transaction_is_replaced_at_its_nonce_with_a_fee_bump(
    anvil, dsn, db
) -> None:
    registry = build_registry(settings_for(anvil.url, dsn, MG_EVM_REPLACE_AFTER_SECONDS="0.3"), db)
    executor = registry.executor_for("evm_transfer")
    dest, first = fresh_address(), anvil.nonce(ADDRESSES[0])
    anvil.call("evm_setAutomine", False)
    try:
        ctx = context("bump", dest)
        refs = await send(registry, ctx)
        original = refs["tx_hash"]
        with trio.fail_after(10):
            while refs["tx_hash"] == original:  # observe until it replaces
                seen = await executor.observe(with_refs(ctx, refs))
                assert seen.status is ObserveStatus.PENDING
                refs = {**refs, **seen.provider_refs}
                await trio.sleep(0.1)
        anvil.call("evm_mine")
        seen, refs = await observe_until_done(executor, ctx, refs)
        assert seen.status is ObserveStatus.COMPLETED
    finally:
        anvil.call("evm_setAutomine", True)
        await registry.aclose()
    assert anvil.balance(dest) == WEI and anvil.nonce(ADDRESSES[0]) == first + 1
    rows = query(
        dsn,
        "SELECT kind, nonce, max_fee_per_gas FROM evm_signed_transactions ORDER BY id",
    )
    assert [(k, n) for k, n, _ in rows] == [("payment", first), ("replacement", first)]
    assert rows[1][2] >= rows[0][2] * 112 / 100
    assert anvil.call("eth_getTransactionReceipt", refs["tx_hash"])["status"] == "0x1"
    assert anvil.call("eth_getTransactionReceipt", original) is None  # replaced, never mined


async def test_a_kept_payload_edited_in_the_database_is_never_signed_again(anvil, dsn, db) -> None:
    """Issue 45: the fee-bump replacement signs the kept payload again. Someone rewrites
    that payload's destination in the database while the transaction waits unmined: the
    replacement is refused (the signed bytes say otherwise), the genuine bytes are sent
    again, and the payment lands where it was approved to."""
    registry = build_registry(settings_for(anvil.url, dsn, MG_EVM_REPLACE_AFTER_SECONDS="0.3"), db)
    executor = registry.executor_for("evm_transfer")
    dest, attacker, first = fresh_address(), fresh_address(), anvil.nonce(ADDRESSES[0])
    anvil.call("evm_setAutomine", False)
    try:
        ctx = context("tampered-bump", dest)
        refs = await send(registry, ctx)
        query(
            dsn,
            "UPDATE evm_signed_transactions SET payload = jsonb_set(payload, '{to}', %s)",
            (json.dumps(attacker),),
        )
        with trio.fail_after(10):
            for _ in range(15):  # well past MG_EVM_REPLACE_AFTER_SECONDS: it would replace
                seen = await executor.observe(with_refs(ctx, refs))
                assert seen.status is ObserveStatus.PENDING
                assert seen.provider_refs["tx_hash"] == refs["tx_hash"]
                await trio.sleep(0.1)
        anvil.call("evm_mine")
        seen, refs = await observe_until_done(executor, ctx, refs)
        assert seen.status is ObserveStatus.COMPLETED
    finally:
        anvil.call("evm_setAutomine", True)
        await registry.aclose()
    assert query(dsn, "SELECT kind FROM evm_signed_transactions") == [("payment",)]
    assert anvil.balance(attacker) == 0
    assert anvil.balance(dest) == WEI and anvil.nonce(ADDRESSES[0]) == first + 1


async def test_a_receipt_that_vanishes_before_depth_goes_back_to_rebroadcast(
    anvil, dsn, db
) -> None:
    registry = build_registry(
        settings_for(anvil.url, dsn, MG_EVM_CONFIRMATIONS_BY_CHAIN=f"{CHAIN_ID}=3"), db
    )
    executor = registry.executor_for("evm_transfer")
    dest = fresh_address()
    try:
        ctx = context("reorg", dest)
        refs = await send(registry, ctx)
        seen = await executor.observe(with_refs(ctx, refs))
        assert seen.status is ObserveStatus.PENDING  # mined, one block deep of three
        anvil.call("anvil_rollback", 1)
        assert anvil.call("eth_getTransactionReceipt", refs["tx_hash"]) is None
        assert anvil.balance(dest) == 0  # the payment is gone with the block
        seen, refs = await observe_until_done(
            executor, ctx, refs, mine=lambda: anvil.call("evm_mine")
        )
        assert seen.status is ObserveStatus.COMPLETED
    finally:
        await registry.aclose()
    assert anvil.balance(dest) == WEI


async def test_a_reorg_under_a_consumed_nonce_never_leaves_the_next_transfer_stuck(
    anvil, dsn, db
) -> None:
    settings = settings_for(anvil.url, dsn, MG_EVM_NONCE_RESERVATION_STALE_SECONDS="0.001")
    registry = build_registry(settings, db)
    executor = registry.executor_for("evm_transfer")
    first_dest, next_dest, first = fresh_address(), fresh_address(), anvil.nonce(ADDRESSES[0])
    try:
        ctx = context("deep", first_dest)
        refs = await send(registry, ctx)
        seen, _ = await observe_until_done(executor, ctx, refs)
        assert seen.status is ObserveStatus.COMPLETED  # depth 1: the default
        anvil.call("anvil_rollback", 1)
        assert anvil.nonce(ADDRESSES[0]) == first  # the chain forgot nonce `first`
        await evm_nonces.reap_stale_nonces(
            ServiceContext(db=db, settings=settings, providers=registry)
        )
        # reopened and its kept bytes sent again (anvil mines them)
        await chain_reaches(anvil, first + 1)
        later = context("next", next_dest)
        refs = await send(registry, later)
        assert refs["nonce"] == first + 1
        seen, _ = await observe_until_done(executor, later, refs)
        assert seen.status is ObserveStatus.COMPLETED
    finally:
        await registry.aclose()
    assert (anvil.balance(first_dest), anvil.balance(next_dest)) == (WEI, WEI)
    assert anvil.nonce(ADDRESSES[0]) == first + 2


async def test_a_nonce_gap_is_filled_by_the_reaper_not_by_waiting_for_traffic(
    anvil, dsn, db
) -> None:
    settings = settings_for(anvil.url, dsn)
    registry = build_registry(settings, db)
    executor = registry.executor_for("evm_transfer")
    dest, first = fresh_address(), anvil.nonce(ADDRESSES[0])
    try:
        stuck = context("gap-a", fresh_address())
        prepared = await executor.prepare(stuck)  # reserves `first`, never submitted
        assert json.loads(prepared.payload)["nonce"] == str(first)
        behind = context("gap-b", dest)
        refs = await send(registry, behind)  # `first + 1`: queued behind the hole
        assert refs["nonce"] == first + 1
        assert anvil.nonce(ADDRESSES[0]) == first
        # recovery of the stuck attempt: nothing was signed for it, so it is released
        assert (await executor.recover(stuck)).outcome is RecoverOutcome.NOT_SUBMITTED
        await evm_nonces.reap_stale_nonces(
            ServiceContext(db=db, settings=settings, providers=registry)
        )
        await chain_reaches(anvil, first + 2)  # the fill, then the queued transfer
        seen, _ = await observe_until_done(executor, behind, refs)
        assert seen.status is ObserveStatus.COMPLETED
    finally:
        await registry.aclose()
    assert anvil.balance(dest) == WEI
    [(kind, tx_hash)] = query(
        dsn, "SELECT kind, tx_hash FROM evm_signed_transactions WHERE nonce = %s", (first,)
    )
    receipt = anvil.call("eth_getTransactionReceipt", tx_hash)
    assert kind == "gap_fill" and receipt["to"].lower() == ADDRESSES[0].lower()
    assert query(
        dsn, "SELECT object_id FROM audit_outbox WHERE action = 'evm_nonce_gap_filled'"
    ) == [(f"{CHAIN_ID}:{ADDRESSES[0].lower()}:{first}",)]


async def test_a_token_transfer_without_its_transfer_log_needs_a_person(anvil, dsn, db) -> None:
    token = deploy_token(anvil, 1_000)
    anvil.call("anvil_setCode", token, "0x600160005260206000f3")  # returns true, moves nothing
    registry = build_registry(settings_for(anvil.url, dsn), db)
    executor = registry.executor_for("evm_transfer")
    dest = fresh_address()
    try:
        ctx = context("swapped", dest, "50", token=token)
        refs = await send(registry, ctx)
        receipt = anvil.call("eth_getTransactionReceipt", refs["tx_hash"])
        assert (receipt["status"], receipt["logs"]) == ("0x1", [])  # "success", nothing moved
        seen, _ = await observe_until_done(executor, ctx, refs)
    finally:
        await registry.aclose()
    # never COMPLETED on status 1 alone: UNKNOWN with a code that waits for a person
    assert (seen.status, seen.error_code) == (ObserveStatus.UNKNOWN, "EVM_EFFECT_UNVERIFIED")


async def test_a_token_transfer_completes_only_on_its_transfer_log(anvil, dsn, db) -> None:
    token = deploy_token(anvil, 1_000)
    registry = build_registry(settings_for(anvil.url, dsn), db)
    executor = registry.executor_for("evm_transfer")
    dest = fresh_address()
    try:
        ctx = context("genuine", dest, "50", token=token)
        seen, _ = await observe_until_done(executor, ctx, await send(registry, ctx))
    finally:
        await registry.aclose()
    assert seen.status is ObserveStatus.COMPLETED
    assert token_balance(anvil, token, dest) == 50


async def test_an_open_drift_finding_holds_a_token_transfer_until_it_clears(anvil, dsn, db) -> None:
    token = deploy_token(anvil, 1_000)
    registry = build_registry(settings_for(anvil.url, dsn), db)
    executor = registry.executor_for("evm_transfer")
    ctx = context("held", fresh_address(), "5", token=token)
    query(
        dsn,
        "INSERT INTO drift_findings (chain_id, subject, check_name, expected, observed)"
        " VALUES (%s, %s, 'code_hash', 'a', 'b')",
        (CHAIN_ID, token.lower()),
    )
    try:
        with pytest.raises(RetryLater) as held:
            await executor.preflight(ctx)
        assert held.value.code == "EVM_DRIFT_HOLD"
        query(dsn, "UPDATE drift_findings SET cleared_at = now()")
        await executor.preflight(ctx)  # cleared: it goes
    finally:
        await registry.aclose()


async def test_a_fee_above_its_cap_waits_and_takes_no_nonce(anvil, dsn, db) -> None:
    registry = build_registry(
        settings_for(anvil.url, dsn, MG_EVM_FEE_CAPS=f"{CHAIN_ID}=0.000000001:0.000000001"), db
    )
    executor = registry.executor_for("evm_transfer")
    try:
        with pytest.raises(RetryLater) as waits:
            await executor.prepare(context("capped", fresh_address()))
    finally:
        await registry.aclose()
    assert waits.value.code == "EVM_FEE_ABOVE_CAP"
    assert query(dsn, "SELECT count(*) FROM evm_nonce_reservations") == [(0,)]


async def test_prepare_counts_gas_with_a_margin_in_the_balance_check(anvil, dsn, db) -> None:
    registry = build_registry(settings_for(anvil.url, dsn, MG_EVM_GAS_MARGIN_PERCENT="20"), db)
    executor = registry.executor_for("evm_transfer")
    try:
        prepared = await executor.prepare(context("margin", fresh_address()))
        assert json.loads(prepared.payload)["gas"] == "25200"  # 21000 + 20 %
        anvil.call("anvil_setBalance", ADDRESSES[0], hex(WEI + 1000))  # the value, not the gas
        poor = context("poor", fresh_address())
        await executor.preflight(poor)  # balance >= value
        with pytest.raises(PreflightError) as refused:
            await executor.prepare(poor)
    finally:
        await registry.aclose()
    assert refused.value.code == "EVM_INSUFFICIENT_FUNDS"
    assert query(dsn, "SELECT request_node_id FROM evm_nonce_reservations") == [("margin",)]


async def test_a_block_tag_depth_completes_only_once_the_tagged_block_covers_it(
    anvil, dsn, db
) -> None:
    registry = build_registry(
        settings_for(anvil.url, dsn, MG_EVM_CONFIRMATIONS_BY_CHAIN=f"{CHAIN_ID}=finalized"), db
    )
    executor = registry.executor_for("evm_transfer")
    dest = fresh_address()
    try:
        ctx = context("final", dest)
        refs = await send(registry, ctx)
        seen = await executor.observe(with_refs(ctx, refs))
        assert seen.status is ObserveStatus.PENDING  # mined, not yet finalized
        finalized = anvil.call("eth_getBlockByNumber", "finalized", False)
        mined = anvil.call("eth_getTransactionReceipt", refs["tx_hash"])["blockNumber"]
        assert int(finalized["number"], 16) < int(mined, 16)
        seen, _ = await observe_until_done(
            executor, ctx, refs, mine=lambda: anvil.call("anvil_mine", "0x10")
        )
        assert seen.status is ObserveStatus.COMPLETED
        finalized = anvil.call("eth_getBlockByNumber", "finalized", False)
        assert int(finalized["number"], 16) >= int(mined, 16)
    finally:
        await registry.aclose()
    assert anvil.balance(dest) == WEI


async def test_recovery_leaves_an_unverified_effect_to_a_person(anvil, dsn, db) -> None:
    token = deploy_token(anvil, 1_000)
    anvil.call("anvil_setCode", token, "0x600160005260206000f3")
    registry = build_registry(settings_for(anvil.url, dsn), db)
    executor = registry.executor_for("evm_transfer")
    try:
        ctx = context("swapped-rec", fresh_address(), "50", token=token)
        refs = await send(registry, ctx)
        outcome = await executor.recover(with_refs(ctx, refs))
    finally:
        await registry.aclose()
    assert outcome.outcome is RecoverOutcome.UNKNOWN  # not SUBMITTED, not COMPLETED
