"""Issue 29 item 3: concurrent reads to one URL go out as JSON-RPC batch requests,
against a real anvil behind `FaultProxy` (tests/evm/lagproxy.py), which counts the HTTP
requests it receives and faults batch elements one by one.

Each element keeps a single call's meaning: its own result or error, retries and failover,
and "not found" only when every URL said so; a URL that refuses batches degrades to single
calls and still answers; writes never ride in a batch.
"""

from __future__ import annotations

import math
import secrets

import pytest
import trio

from evm.anvil import ADDRESSES, CHAIN_ID, KEYS, deploy_token, token_balance, wait_receipt
from evm.lagproxy import FaultProxy, Faults, tx_hash_of
from qtg.config import ConfigError, Settings
from qtg.providers.evm.balances import EvmBalanceFetcher
from qtg.providers.evm.rpc import EvmRpc, RpcError, RpcUnavailable

BATCH_MAX = 8


def client(*urls: str, batch_max: int = BATCH_MAX, retries: int = 1) -> EvmRpc:
    return EvmRpc(
        CHAIN_ID, urls, timeout=2.0, concurrency=4, read_retries=retries, batch_max=batch_max
    )


def signed_transfers(anvil, n: int) -> list[str]:
    """`n` raw signed native transfers from ADDRESSES[1] at its next `n` nonces (not the
    runtimes' signer, ADDRESSES[0]: nothing a test before this one left behind — a mempool
    peer's late gossip — can take these nonces)."""
    from eth_account import Account
    from eth_utils import to_checksum_address

    fee = int(anvil.call("eth_gasPrice"), 16) * 2
    first = anvil.nonce(ADDRESSES[1])
    raws = []
    for k in range(n):
        tx = {
            "to": to_checksum_address("0x" + secrets.token_hex(20)),
            "value": 1,
            "gas": 21_000,
            "maxFeePerGas": fee,
            "maxPriorityFeePerGas": 1,
            "nonce": first + k,
            "chainId": CHAIN_ID,
            "type": 2,
        }
        signed = Account.sign_transaction(tx, KEYS[1])
        raw = getattr(signed, "raw_transaction", None) or signed.rawTransaction
        raws.append("0x" + bytes(raw).hex())
    return raws


def mined(anvil, n: int) -> list[str]:
    """`n` transactions on anvil (sent straight to it, not through a proxy): their hashes."""
    hashes = [anvil.call("eth_sendRawTransaction", raw) for raw in signed_transfers(anvil, n)]
    for tx_hash in hashes:
        wait_receipt(anvil, tx_hash)
    return hashes


async def receipts(rpc: EvmRpc, hashes: list[str]) -> list[object]:
    """Every lookup at once (as the observer's batch does): each one's receipt or
    the exception it raised."""
    out: list[object] = [None] * len(hashes)

    async def one(index: int) -> None:
        try:
            out[index] = await rpc.receipt(hashes[index])
        except Exception as exc:
            out[index] = exc

    async with trio.open_nursery() as nursery:
        for index in range(len(hashes)):
            nursery.start_soon(one, index)
    return out


def test_the_batch_size_setting_is_validated() -> None:
    assert Settings.from_env({}).evm_rpc_batch_max == 20
    assert Settings.from_env({"MG_EVM_RPC_BATCH_MAX": "1"}).evm_rpc_batch_max == 1
    for bad in ("0", "-3", "many", "1001"):
        with pytest.raises(ConfigError, match=r"^MG_EVM_RPC_BATCH_MAX: "):
            Settings.from_env({"MG_EVM_RPC_BATCH_MAX": bad})


def test_concurrent_lookups_make_one_request_per_batch(anvil) -> None:
    """N concurrent receipt lookups: at most ceil(N / batch max) HTTP requests, each
    receipt its own; with batching off, one request per lookup (the counter counts)."""
    hashes = mined(anvil, 3 * BATCH_MAX + 3)
    proxy = FaultProxy(anvil.url, seed=1)

    async def run() -> None:
        rpc = client(proxy.url)
        try:
            found = await receipts(rpc, hashes)
            assert [r["transactionHash"] for r in found] == hashes  # type: ignore[index]
            assert proxy.posts <= math.ceil(len(hashes) / BATCH_MAX)
            assert proxy.batch_sizes and max(proxy.batch_sizes) <= BATCH_MAX
            proxy.posts = 0
            # eth_blockNumber is single-flight: thirty callers, one request
            heads = await _together(rpc.block_number, 30)
            newest = max(int(r["blockNumber"], 16) for r in found)  # type: ignore[index]
            # (anvil may mine two of the transfers in one block: not one block each)
            assert len(set(heads)) == 1 and heads[0] >= newest > 0
            assert proxy.posts == 1
        finally:
            await rpc.aclose()
        proxy.posts = 0
        unbatched = client(proxy.url, batch_max=1)
        try:
            found = await receipts(unbatched, hashes)
            assert [r["transactionHash"] for r in found] == hashes  # type: ignore[index]
            assert proxy.posts == len(hashes)
        finally:
            await unbatched.aclose()

    try:
        trio.run(run)
    finally:
        proxy.close()


def _raised(fn):
    """`fn`, answering the exception it raises instead of raising it."""

    async def wrapped():
        try:
            return await fn()
        except Exception as exc:
            return exc

    return wrapped


async def _together(fn, n: int) -> list:
    out: list = [None] * n

    async def one(index: int) -> None:
        out[index] = await fn()

    async with trio.open_nursery() as nursery:
        for index in range(n):
            nursery.start_soon(one, index)
    return out


def test_errors_stay_with_their_element(anvil) -> None:
    """In one batch: a permanent error (invalid params) is raised to its caller alone;
    injected transient errors of some elements are retried for those elements alone."""
    hashes = mined(anvil, BATCH_MAX)
    proxy = FaultProxy(anvil.url, seed=2)
    flaky = FaultProxy(anvil.url, Faults(read_rpc_error=0.3), seed=3)

    async def run() -> None:
        rpc = client(proxy.url)
        out: dict[str, object] = {}

        async def read(name: str, method: str, *params: object) -> None:
            try:
                out[name] = await rpc.call(method, *params)
            except Exception as exc:
                out[name] = exc

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read, "bad", "eth_getBalance", "0xnot-an-address", "latest")
                for k, tx_hash in enumerate(hashes[:5]):
                    nursery.start_soon(read, f"r{k}", "eth_getTransactionReceipt", tx_hash)
            assert proxy.batch_sizes == [6]  # one request carried all six
            assert isinstance(out["bad"], RpcError) and not out["bad"].transient
            for k, tx_hash in enumerate(hashes[:5]):
                assert out[f"r{k}"]["transactionHash"] == tx_hash  # type: ignore[index]
        finally:
            await rpc.aclose()
        rpc = client(flaky.url, retries=8)
        try:  # a JSON-RPC error of one element is that element's: retried, then found
            for _ in range(3):
                found = await receipts(rpc, hashes)
                assert [r["transactionHash"] for r in found] == hashes  # type: ignore[index]
        finally:
            await rpc.aclose()

    try:
        trio.run(run)
        assert flaky.count("read_rpc_error") >= 1
        assert len(flaky.batch_sizes) > 3  # the retried elements went in later batches
    finally:
        proxy.close()
        flaky.close()


@pytest.mark.parametrize("how", ["error", "http", "elements"])
def test_a_url_that_refuses_batches_gets_single_calls(anvil, how: str) -> None:
    hashes = mined(anvil, 5)
    proxy = FaultProxy(anvil.url, seed=4)
    proxy.refuse_batches = how

    async def run() -> None:
        rpc = client(proxy.url)
        try:
            for _ in range(2):
                found = await receipts(rpc, hashes)
                assert [r["transactionHash"] for r in found] == hashes  # type: ignore[index]
            assert proxy.url in rpc.unbatched
        finally:
            await rpc.aclose()

    try:
        trio.run(run)
        assert proxy.batch_sizes == [5]  # refused once, remembered
        assert proxy.posts == 1 + 2 * len(hashes)
    finally:
        proxy.close()


def test_a_broken_batch_reply_is_no_answer_for_each_element(anvil) -> None:
    """An HTTP fault of a batch (an outage) is no answer for all of its elements: with
    no retry left every lookup is unavailable; with one, every lookup is found."""
    hashes = mined(anvil, 4)
    proxy = FaultProxy(anvil.url, seed=5)

    async def run() -> None:
        rpc = client(proxy.url, retries=0)
        try:
            proxy.outage(600)
            found = await receipts(rpc, hashes)
            assert all(isinstance(r, RpcUnavailable) for r in found), found
            assert proxy.count("outage") == 1  # one request, four lookups
            # a single-flight failure reaches every caller, each its own exception
            heads = await _together(_raised(rpc.block_number), 10)
            assert all(isinstance(h, RpcUnavailable) for h in heads), heads
            assert len({id(h) for h in heads}) == 10
            assert proxy.count("outage") == 2
            proxy.end_outage()
            found = await receipts(rpc, hashes)
            assert [r["transactionHash"] for r in found] == hashes  # type: ignore[index]
        finally:
            await rpc.aclose()

    try:
        trio.run(run)
        assert proxy.batch_sizes == [4, 4]  # the block number went alone
    finally:
        proxy.close()


@pytest.mark.parametrize("how", ["drop_id", "object"])
def test_a_batch_reply_missing_an_id_or_not_an_array_is_no_answer_for_each(anvil, how: str) -> None:
    hashes = mined(anvil, 4)
    proxy = FaultProxy(anvil.url, seed=13)

    async def run() -> None:
        rpc = client(proxy.url, retries=0)
        try:
            proxy.mangle_batches = [how]
            found = await receipts(rpc, hashes)
            assert all(isinstance(r, RpcUnavailable) for r in found), found
        finally:
            await rpc.aclose()
        rpc = client(proxy.url, retries=1)
        try:  # the same break with a retry left: every element asked again, found
            proxy.mangle_batches = [how]
            found = await receipts(rpc, hashes)
            assert [r["transactionHash"] for r in found] == hashes  # type: ignore[index]
            assert proxy.url not in rpc.unbatched  # a broken reply is not a refusal
        finally:
            await rpc.aclose()

    try:
        trio.run(run)
        assert proxy.batch_sizes == [4, 4, 4] and not proxy.mangle_batches
    finally:
        proxy.close()


def test_not_found_in_a_batch_from_a_lagging_url_is_no_proof(anvil) -> None:
    """Lookups batched to a URL that lags (null for what it forwarded) and a URL that
    does not answer: none is "not found"; with a URL that has them, all are found."""
    lagging = FaultProxy(anvil.url, Faults(lag=600), seed=6)
    good = FaultProxy(anvil.url, seed=7)
    down = FaultProxy(anvil.url, seed=8)
    raws = signed_transfers(anvil, 5)
    hashes = [tx_hash_of(raw) for raw in raws]

    async def run() -> None:
        rpc = client(lagging.url, good.url)
        try:
            for raw in raws:  # one at a time: nonces in order
                await rpc.call("eth_sendRawTransaction", raw)
        finally:
            await rpc.aclose()
        for tx_hash in hashes:
            wait_receipt(anvil, tx_hash)
        down.outage(600)
        rpc = client(lagging.url, down.url)
        try:
            found = await receipts(rpc, hashes)
            assert all(
                isinstance(r, RpcUnavailable) and "absence is not proven" in str(r) for r in found
            ), found
        finally:
            await rpc.aclose()
        rpc = client(lagging.url, good.url)
        try:
            found = await receipts(rpc, hashes)
            assert [r["transactionHash"] for r in found] == hashes  # type: ignore[index]
        finally:
            await rpc.aclose()

    try:
        trio.run(run)
        assert lagging.count("lag_null") >= 2 * len(hashes)
        assert max(lagging.batch_sizes) == len(hashes)  # the nulls came in a batch
        assert max(good.batch_sizes) == len(hashes)
    finally:
        for proxy in (lagging, good, down):
            proxy.close()


def test_writes_never_ride_in_a_batch(anvil) -> None:
    """Broadcasts issued alongside many reads: each is a request of its own, to
    every URL; the reads around them are batched."""
    proxies = [FaultProxy(anvil.url, seed=9), FaultProxy(anvil.url, seed=10)]
    raws = signed_transfers(anvil, 6)
    hashes = [tx_hash_of(raw) for raw in raws]

    async def run() -> None:
        rpc = client(*(p.url for p in proxies))
        try:
            async with trio.open_nursery() as nursery:
                for raw in raws:  # the chain sorts the nonces out (anvil's pool)
                    nursery.start_soon(rpc.call, "eth_sendRawTransaction", raw)
                for _ in range(12):
                    nursery.start_soon(rpc.call, "eth_getBalance", ADDRESSES[0], "latest")
        finally:
            await rpc.aclose()

    try:
        trio.run(run)
        for proxy in proxies:
            assert proxy.count("batched_send") == 0
            assert all(h in proxy.sent for h in hashes)
        assert max(size for p in proxies for size in p.batch_sizes) > 1  # reads were batched
    finally:
        for proxy in proxies:
            proxy.close()
    for tx_hash in hashes:
        wait_receipt(anvil, tx_hash)


def test_a_cancelled_caller_leaves_the_batch_to_the_others(anvil) -> None:
    hashes = mined(anvil, 6)
    proxy = FaultProxy(anvil.url, seed=11)

    async def run() -> None:
        rpc = client(proxy.url)
        got: dict[int, object] = {}

        async def one(index: int, cancel: bool) -> None:
            with trio.CancelScope() as scope:
                if cancel:
                    scope.cancel()  # gone before its read was sent
                got[index] = await rpc.receipt(hashes[index])

        try:
            async with trio.open_nursery() as nursery:
                for index in range(len(hashes)):
                    nursery.start_soon(one, index, index == 0)
        finally:
            await rpc.aclose()
        assert sorted(got) == list(range(1, len(hashes)))
        assert all(got[i]["transactionHash"] == hashes[i] for i in got)  # type: ignore[index]

    try:
        trio.run(run)
        assert proxy.batch_sizes == [len(hashes) - 1]
    finally:
        proxy.close()


def test_one_balance_read_per_address_list(anvil) -> None:
    """The balance fetcher reads every address and token of its lists in one request."""
    token = deploy_token(anvil, 10**24)
    addresses = [*ADDRESSES, *("0x" + secrets.token_hex(20) for _ in range(4))]
    proxy = FaultProxy(anvil.url, seed=12)

    async def run() -> list:
        rpc = client(proxy.url, batch_max=20)
        try:
            return await EvmBalanceFetcher(rpc, addresses, [token]).fetch_balances()
        finally:
            await rpc.aclose()

    try:
        rows = trio.run(run)
        assert proxy.posts == 1 and proxy.batch_sizes == [1 + 2 * len(addresses)]
    finally:
        proxy.close()
    by_key = {(row.account, row.asset): row for row in rows}
    assert len(rows) == 2 * len(addresses)
    for address in addresses:
        native = by_key[(address.lower(), "native")]
        assert native.amount.scaleb(18) == anvil.balance(address)
        held = by_key[(address.lower(), token.lower())]
        assert held.amount.scaleb(held.detail["decimals"]) == token_balance(anvil, token, address)
    assert by_key[(ADDRESSES[0].lower(), token.lower())].amount > 0  # the deployer holds supply


async def test_an_observation_reads_its_two_nonce_counts_in_one_request(anvil, dsn, db) -> None:
    """Issue 47 item 3: the observer's look at a node reads the signer's count at the
    trusted head and at the tip in one batch request, not a round trip each (on main,
    all the trusted counts in one request, all the tips' in the next). Three nodes
    observed at once, as the observer's batch does: every request that reads counts
    reads both kinds, each observation is COMPLETED, and there are fewer HTTP requests
    than reads."""
    from evm.test_chain_faults import (
        chain_reaches,
        context,
        fresh_address,
        send,
        settings_for,
        with_refs,
    )
    from qtg.providers.base import ObserveStatus
    from qtg.providers.registry import build_registry

    proxy = FaultProxy(anvil.url)
    registry = build_registry(settings_for(proxy.url, dsn), db)
    executor = registry.executor_for("evm_transfer")
    first = anvil.nonce(ADDRESSES[0])
    nodes = [context(f"counts{i}", fresh_address()) for i in range(3)]
    seen: list[object] = [None] * len(nodes)
    try:
        refs = [await send(registry, ctx) for ctx in nodes]
        await chain_reaches(anvil, first + len(nodes))
        anvil.call("evm_mine")  # past MG_EVM_CONFIRMATIONS: one look decides each
        proxy.requests.clear()

        async def observe(i: int) -> None:
            seen[i] = await executor.observe(with_refs(nodes[i], refs[i]))

        async with trio.open_nursery() as nursery:
            for i in range(len(nodes)):
                nursery.start_soon(observe, i)
    finally:
        await registry.aclose()
        proxy.close()
    assert [s.status for s in seen] == [ObserveStatus.COMPLETED] * len(nodes)  # type: ignore[attr-defined]
    counts = [
        [params[-1] for method, params in request if method == "eth_getTransactionCount"]
        for request in proxy.requests
    ]
    counts = [blocks for blocks in counts if blocks]
    assert sum(len(blocks) for blocks in counts) == 2 * len(nodes)
    for blocks in counts:  # the tip's count beside the trusted head's, in each request
        assert blocks.count("latest") * 2 == len(blocks), proxy.requests
    assert len(proxy.requests) < sum(len(r) for r in proxy.requests), proxy.requests
