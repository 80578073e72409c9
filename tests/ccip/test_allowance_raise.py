"""`allowance_raise_call` (qtg/providers/evm/transactions.py), the allowance raise the
ccip and cctp executors put right below their spend, against real tokens on anvil behind
`FaultProxy`: CCIP-BnM (has increaseAllowance) and TestToken (approve only).

Found by the ccip fault harness: an injected "internal error" answering the probe of
increaseAllowance was taken for a token without it, the raise became a set
(approve(current + amount)) that a send prepared beside it overwrote, and a ccipSend
reverted for want of allowance (FAILED, nothing moved, a movement lost to a fault).
"""

from __future__ import annotations

import pytest
from evm.anvil import ADDRESSES, CHAIN_ID, deploy_token, wait_receipt
from evm.lagproxy import FaultProxy

from ccip.local import set_up
from qtg.domain.evm import erc20_approve_data, erc20_increase_allowance_data
from qtg.providers.base import RetryLater
from qtg.providers.evm.rpc import EvmRpc, transient_rpc_faults
from qtg.providers.evm.transactions import allowance_raise_call

OWNER = ADDRESSES[0]
SPENDER = "0x" + "5e" * 20
RETRIES = 2


@pytest.fixture
def proxy(anvil):
    proxy = FaultProxy(anvil.url)
    yield proxy
    proxy.server.shutdown()


def client(url: str) -> EvmRpc:
    return EvmRpc(CHAIN_ID, [url], timeout=2.0, concurrency=4, read_retries=RETRIES)


def approve(anvil, token: str, value: int) -> None:
    tx = {"from": OWNER, "to": token, "data": erc20_approve_data(SPENDER, value)}
    assert wait_receipt(anvil, anvil.call("eth_sendTransaction", tx))["status"] == "0x1"


async def test_a_token_with_increase_allowance_is_raised_by_the_amount(anvil, proxy) -> None:
    bnm = set_up(anvil, drips=0).bnm
    approve(anvil, bnm, 7)
    call = await allowance_raise_call(client(proxy.url), bnm, OWNER, SPENDER, 5)
    assert call == {
        "from": OWNER,
        "to": bnm,
        "value": "0x0",
        "data": erc20_increase_allowance_data(SPENDER, 5),
    }


async def test_an_error_of_the_node_answering_the_probe_is_a_wait_not_a_missing_function(
    anvil, proxy
) -> None:
    bnm = set_up(anvil, drips=0).bnm
    approve(anvil, bnm, 7)
    rpc = client(proxy.url)
    proxy.error_reads("eth_estimateGas", 1 + RETRIES)
    with pytest.raises(RetryLater) as waited, transient_rpc_faults("prepare"):
        await allowance_raise_call(rpc, bnm, OWNER, SPENDER, 5)
    assert waited.value.code == "EVM_RPC_ERROR"
    assert proxy.count("read_rpc_error") == 1 + RETRIES  # every retry met the error
    # once the node answers again: a raise by the amount, never approve(7 + 5)
    call = await allowance_raise_call(rpc, bnm, OWNER, SPENDER, 5)
    assert call is not None and call["data"] == erc20_increase_allowance_data(SPENDER, 5)


async def test_a_token_without_it_is_approved_its_allowance_plus_the_amount(anvil, proxy) -> None:
    token = deploy_token(anvil, 10**24).lower()
    approve(anvil, token, 7)
    call = await allowance_raise_call(client(proxy.url), token, OWNER, SPENDER, 5)
    assert call is not None and call["data"] == erc20_approve_data(SPENDER, 12)


async def test_a_standing_approval_needs_no_raise(anvil, proxy) -> None:
    token = deploy_token(anvil, 10**24).lower()
    approve(anvil, token, 2**256 - 1)
    assert await allowance_raise_call(client(proxy.url), token, OWNER, SPENDER, 5) is None
    assert proxy.count("read_rpc_error") == 0
