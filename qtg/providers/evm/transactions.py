"""The EIP-1559 transaction payloads the contract executors (ccip, cctp) sign.

One builder so that gas margins and fee caps are applied the same way for every
contract call: the estimate plus a fifth (the call's path can vary a little), plus
`headroom` for state that may change between the estimate and the mining; fees
from the ChainJudge, which raises RetryLater above MG_EVM_FEE_CAPS (nothing is
signed, the node waits).
"""

from __future__ import annotations

from typing import Any

from qtg.domain.evm import (
    erc20_allowance_data,
    erc20_approve_data,
    erc20_increase_allowance_data,
)
from qtg.providers.evm.outcome import ChainJudge
from qtg.providers.evm.rpc import EvmRpc, RpcError

#: Gas added to an ERC-20 allowance raise's estimate. The estimate prices the allowance as
#: it is when prepared; a raise estimated while an earlier send's allowance is still
#: unspent (a cheap non-zero → non-zero write) may be mined after that send spent it to
#: zero, and then writes a fresh slot (about 17,100 gas more): without this it runs out of
#: gas and the send behind it reverts for want of allowance (found by the fault harness).
ALLOWANCE_RAISE_HEADROOM_GAS = 20_000
#: An allowance this large is a standing approval: nothing to raise.
UNLIMITED_ALLOWANCE = 2**255


async def allowance_raise_call(
    rpc: EvmRpc, token: str, owner: str, spender: str, amount: int
) -> dict[str, Any] | None:
    """The call that lets `spender` pull `amount` more of `token` from `owner`; None under a
    standing (unlimited) approval.

    Raised by the amount (`increaseAllowance`), not set to it, where the token has it: sends
    prepared side by side each add their own. A token without it (OpenZeppelin 5, minimal
    tokens) gets `approve(current + amount)`, a set — safe because the caller reserves the
    raise right below its spend (`nonces.reserve_run`). Only a *revert* of the probe says the
    function is missing: a transient error (an internal error, a rate limit) is raised for
    the caller's `transient_rpc_faults` to make a wait — taken for a missing function it
    turned a raise into a set that a neighbour's set could overwrite (found by the ccip
    fault harness: a ccipSend reverted for want of allowance).
    """
    allowance = int(await rpc.eth_call(token, erc20_allowance_data(owner, spender)), 16)
    if allowance >= UNLIMITED_ALLOWANCE:
        return None
    increase = {
        "from": owner,
        "to": token,
        "value": "0x0",
        "data": erc20_increase_allowance_data(spender, amount),
    }
    try:
        await rpc.call("eth_estimateGas", increase)
    except RpcError as exc:
        if exc.transient:
            raise
        return {**increase, "data": erc20_approve_data(spender, allowance + amount)}
    return increase


async def contract_call_tx(
    rpc: EvmRpc,
    judge: ChainJudge,
    chain_id: int,
    call: dict[str, Any],
    nonce: int,
    *,
    gas: int | None = None,
    headroom: int = 0,
) -> dict[str, Any]:
    """The payload of `call` (`from`, `to`, `data`, optional hex `value`) at `nonce`:
    `gas` as given, else estimated with its margin and `headroom`."""
    if gas is None:
        estimate = int(await rpc.call("eth_estimateGas", call), 16)
        gas = estimate + estimate // 5 + headroom
    max_fee, tip = await judge.fees(chain_id)  # RetryLater above MG_EVM_FEE_CAPS
    return {
        "from": call["from"],
        "to": call["to"],
        "value": str(int(call.get("value") or "0x0", 16)),
        "data": call["data"],
        "gas": str(gas),
        "maxFeePerGas": str(max_fee),
        "maxPriorityFeePerGas": str(tip),
        "nonce": str(nonce),
        "chainId": str(chain_id),
        "type": 2,
    }
