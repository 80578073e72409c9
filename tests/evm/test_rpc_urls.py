"""Issue 24 item 6: several RPC URLs per chain (MG_EVM_RPC_URLS `chain=url1|url2`),
against a real anvil behind fault proxies (tests/evm/lagproxy.py FaultProxy).

Reads fail over; transient JSON-RPC errors and 5xx are retried; a broadcast goes
to every URL; a transaction is "not found" only when every URL says so — one
lagging or unreachable URL never makes an absence. Then a real runtime with one
URL down and one lagging pays each destination exactly once.
"""

from __future__ import annotations

import secrets

import pytest
import trio
from runtime.rt_procs import RuntimeProcess, base_env, query, request_states, wait_until

from evm.anvil import ADDRESSES, CHAIN_ID, KEYS, wait_receipt
from evm.lagproxy import FaultProxy, Faults, tx_hash_of
from qtg.config import ConfigError, Settings
from qtg.domain.evm import parse_rpc_urls, rpc_error_transient, send_refused
from qtg.providers.evm.rpc import EvmRpc, RpcError, RpcUnavailable, redacted

WEI = 10**18


def client(*urls: str) -> EvmRpc:
    return EvmRpc(CHAIN_ID, urls, timeout=1.0, concurrency=4, read_retries=1)


def signed_transfer(anvil, to: str, value: int) -> str:
    """A raw signed native transfer from ADDRESSES[0] at its next nonce."""
    from eth_account import Account
    from eth_utils import to_checksum_address

    fee = int(anvil.call("eth_gasPrice"), 16) * 2
    tx = {
        "to": to_checksum_address(to),
        "value": value,
        "gas": 21_000,
        "maxFeePerGas": fee,
        "maxPriorityFeePerGas": 1,
        "nonce": anvil.nonce(ADDRESSES[0]),
        "chainId": CHAIN_ID,
        "type": 2,
    }
    signed = Account.sign_transaction(tx, KEYS[0])
    raw = getattr(signed, "raw_transaction", None) or signed.rawTransaction
    return "0x" + bytes(raw).hex()


def test_the_setting_takes_several_urls_per_chain_and_keeps_the_old_syntax() -> None:
    assert parse_rpc_urls("1=http://a") == {1: ("http://a",)}
    assert parse_rpc_urls("1=http://a|https://b, 5=http://c") == {
        1: ("http://a", "https://b"),
        5: ("http://c",),
    }
    for bad in (
        "1=http://a|",
        "1=http://a|ftp://b",
        "1=http://a|http://a",
        "1=http://a,1=http://b",
    ):
        with pytest.raises(ConfigError, match="MG_EVM_RPC_URLS"):
            Settings.from_env({"MG_EVM_RPC_URLS": bad})
    # a provider's key in the path or query never reaches a message
    assert redacted("https://mainnet.example/v3/SECRETKEY?x=1") == "https://mainnet.example/…"


def test_which_json_rpc_errors_are_transient() -> None:
    assert rpc_error_transient(-32603, "internal error")
    assert rpc_error_transient(-32000, "header not found")
    assert rpc_error_transient(-32005, "limit exceeded")
    assert not rpc_error_transient(3, "execution reverted")
    assert not rpc_error_transient(-32000, "insufficient funds for gas * price + value")
    assert not rpc_error_transient(-32602, "invalid params")


def test_reads_fail_over_and_retry_transient_errors(anvil) -> None:
    down = FaultProxy(anvil.url, seed=1)
    down.outage(600)
    flaky = FaultProxy(anvil.url, Faults(read_rpc_error=1.0), seed=2)
    good = FaultProxy(anvil.url, seed=3)

    async def run() -> None:
        rpc = client(down.url, flaky.url, good.url)
        try:
            assert await rpc.block_number() >= 0
            assert await rpc.chain_id_on_chain() == CHAIN_ID
            assert await rpc.wrong_chain() is None
        finally:
            await rpc.aclose()
        only_down = client(down.url)
        try:
            with pytest.raises(RpcUnavailable):
                await only_down.block_number()
        finally:
            await only_down.aclose()
        only_flaky = client(flaky.url)
        try:  # a transient JSON-RPC error that never clears is raised as such
            with pytest.raises(RpcError) as err:
                await only_flaky.block_number()
            assert err.value.transient
        finally:
            await only_flaky.aclose()

    try:
        trio.run(run)
        assert down.count("outage") >= 1 and flaky.count("read_rpc_error") >= 1
    finally:
        for proxy in (down, flaky, good):
            proxy.close()


def test_a_broadcast_goes_to_every_url_and_absence_needs_every_url(anvil) -> None:
    lagging = FaultProxy(anvil.url, Faults(lag=600), seed=4)  # null for what it forwarded
    good = FaultProxy(anvil.url, seed=5)
    down = FaultProxy(anvil.url, seed=6)
    destination = "0x" + secrets.token_hex(20)
    raw = signed_transfer(anvil, destination, WEI)
    tx_hash = tx_hash_of(raw)

    async def run() -> None:
        both = client(lagging.url, good.url)
        try:
            assert await both.call("eth_sendRawTransaction", raw) == tx_hash
            wait_receipt(anvil, tx_hash)
            # the lagging URL says null; the other has it: found
            found = await both.receipt(tx_hash)
            assert found is not None and found["transactionHash"] == tx_hash
        finally:
            await both.aclose()
        lagging_alone = client(lagging.url)
        try:
            assert await lagging_alone.receipt(tx_hash) is None  # what one URL alone says
        finally:
            await lagging_alone.aclose()
        down.outage(600)
        lagging_and_down = client(lagging.url, down.url)
        try:  # null from one URL, silence from the other: the absence is not proven
            with pytest.raises(RpcUnavailable, match="absence is not proven"):
                await lagging_and_down.receipt(tx_hash)
        finally:
            await lagging_and_down.aclose()
        both = client(lagging.url, good.url)
        try:  # every URL answers "not found": believed
            assert await both.receipt("0x" + "ab" * 32) is None
        finally:
            await both.aclose()

    try:
        trio.run(run)
        assert tx_hash in lagging.sent and tx_hash in good.sent  # sent to every URL
        assert lagging.count("lag_null") >= 1
    finally:
        for proxy in (lagging, good, down):
            proxy.close()
    assert anvil.balance(destination) == WEI


def test_a_broadcast_refused_by_one_url_and_unanswered_by_another_is_not_a_refusal(
    anvil,
) -> None:
    refusing = FaultProxy(anvil.url, seed=7)
    refusing.refuse_sends(1, "transaction underpriced (injected)")
    down = FaultProxy(anvil.url, seed=8)
    down.outage(600)
    raw = signed_transfer(anvil, "0x" + secrets.token_hex(20), 1)

    async def run() -> None:
        rpc = client(refusing.url, down.url)
        try:  # the silent URL may have it: unknown, never "refused"
            with pytest.raises(RpcUnavailable):
                await rpc.call("eth_sendRawTransaction", raw)
        finally:
            await rpc.aclose()
        refusing.refuse_sends(2, "transaction underpriced (injected)")
        rpc = client(refusing.url, refusing.url + "/")
        try:  # every URL refused: a refusal
            with pytest.raises(RpcError, match="underpriced"):
                await rpc.call("eth_sendRawTransaction", raw)
        finally:
            await rpc.aclose()

    try:
        trio.run(run)
    finally:
        refusing.close()
        down.close()


def test_an_error_of_the_node_answering_a_broadcast_is_not_a_refusal(anvil) -> None:
    # -32603 from every URL: the bytes may be on their way (one URL forwarded
    # them): unknown, never "refused"; a judgement of the bytes is a refusal
    erring = FaultProxy(anvil.url, seed=12)
    raw = signed_transfer(anvil, "0x" + secrets.token_hex(20), 1)

    async def run() -> None:
        erring.error_sends(2, forward=False)
        rpc = client(erring.url, erring.url + "/")
        try:
            with pytest.raises(RpcUnavailable):
                await rpc.call("eth_sendRawTransaction", raw)
            erring.refuse_sends(2, "max fee per gas less than block base fee (injected)")
            with pytest.raises(RpcError, match="base fee"):
                await rpc.call("eth_sendRawTransaction", raw)
        finally:
            await rpc.aclose()

    try:
        trio.run(run)
    finally:
        erring.close()
    assert erring.count("send_error") == 2 and erring.count("refused") == 2


def test_which_broadcast_errors_are_refusals() -> None:
    assert send_refused(-32000, "replacement transaction underpriced")
    assert send_refused(-32000, "insufficient funds for gas * price + value")
    assert send_refused(-32000, "nonce too low: next nonce 5, tx nonce 4")
    assert send_refused(-32602, "invalid argument 0: hex string has odd length")
    assert not send_refused(-32603, "internal error")
    assert not send_refused(-32000, "request timed out")
    assert not send_refused(-32005, "daily request count exceeded, request rate limited")
    assert not send_refused(-32000, "header not found")


def test_a_runtime_with_one_url_down_and_one_lagging_pays_once(anvil, dsn, procs) -> None:
    """Reads fail over past the dead URL, lookups are not fooled by the lagging one
    (a short not-landed confirmation would turn its nulls into a second payment if
    they were believed), broadcasts reach every live URL."""
    from evm.test_transient_and_lanes import FAST, fresh_address, seed

    down = FaultProxy(anvil.url, seed=9)
    down.outage(600)
    lagging = FaultProxy(anvil.url, Faults(lag=600), seed=10)
    good = FaultProxy(anvil.url, seed=11)
    sent_before = anvil.nonce(ADDRESSES[0])
    payments = [(fresh_address(), "0.25") for _ in range(4)]
    try:
        proc = RuntimeProcess.launcher(
            base_env(
                MG_DATABASE_URL=dsn,
                MG_DB_POOL_MAX_SIZE="20",
                MG_PROVIDERS="evm",
                MG_EVM_SIGNER_PRIVATE_KEY=KEYS[0],
                MG_EVM_RPC_URLS=f"{CHAIN_ID}={down.url}|{lagging.url}|{good.url}",
                MG_EVM_EVIDENCE_ATTENTION_SECONDS="1",
                **FAST,
            )
        )
        procs.append(proc)
        proc.wait_ready()
        ids = seed(dsn, payments, key="multi")
        wait_until(
            lambda: set(request_states(dsn, ids).values()) == {"COMPLETED"},
            60,
            "the movements to complete",
        )
        hashes = [
            h
            for (h,) in query(
                dsn, "SELECT tx_hash FROM evm_signed_transactions WHERE kind = 'payment'"
            )
        ]
    finally:
        for proxy in (down, lagging, good):
            proxy.close()
    assert len(hashes) == 4
    assert all(h in lagging.sent and h in good.sent for h in hashes)
    assert down.count("outage") >= 1 and lagging.count("lag_null") >= 1
    for destination, _ in payments:
        assert anvil.balance(destination) == WEI // 4
    assert anvil.nonce(ADDRESSES[0]) == sent_before + 4


async def test_not_landed_needs_every_url_to_agree(anvil, dsn, db) -> None:
    """The chain counts the nonce used; one URL lags (its lookups answer null for our
    hash) and the other does not answer. With a not-landed confirmation of 0.2 s, a
    lookup that believed the lagging URL alone would soon say EVM_NOT_LANDED and a new
    attempt would pay twice; with every URL asked, the absence is never proven, the node
    stays in flight, and once the second URL answers the transfer is COMPLETED."""
    from evm.test_chain_faults import chain_reaches, context, send, settings_for, with_refs
    from qtg.providers.base import ObserveStatus, RecoverOutcome
    from qtg.providers.registry import build_registry

    lagging = FaultProxy(anvil.url, Faults(lag=600), seed=12)
    other = FaultProxy(anvil.url, seed=13)
    destination = "0x" + secrets.token_hex(20)
    settings = settings_for(
        f"{lagging.url}|{other.url}", dsn, MG_EVM_EVIDENCE_ATTENTION_SECONDS="0.2"
    )
    registry = build_registry(settings, db)
    executor = registry.executor_for("evm_transfer")
    first = anvil.nonce(ADDRESSES[0])
    try:
        ctx = context("every-url", destination)
        refs = await send(registry, ctx)
        other.outage(600)  # from now on the second URL does not answer
        await chain_reaches(anvil, first + 1)
        inconclusive = 0
        for _ in range(6):  # well past the confirmation window, many looks
            # recovery and the observer treat a raise as "no verdict" (undecided, PENDING)
            try:
                outcome = await executor.recover(ctx)
                assert outcome.outcome is not RecoverOutcome.NOT_SUBMITTED, outcome
            except RpcUnavailable:
                inconclusive += 1
            try:
                seen = await executor.observe(with_refs(ctx, refs))
                assert seen.status is ObserveStatus.PENDING, seen
            except RpcUnavailable:
                inconclusive += 1
            await trio.sleep(0.1)
        assert inconclusive == 12  # never a verdict on the lagging URL's word alone
        other.end_outage()
        seen = await executor.observe(with_refs(ctx, refs))
        assert seen.status is ObserveStatus.COMPLETED, seen
    finally:
        await registry.aclose()
        lagging.close()
        other.close()
    assert anvil.balance(destination) == WEI
    assert anvil.nonce(ADDRESSES[0]) == first + 1
