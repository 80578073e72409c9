"""The EIP-1559 transaction payloads the contract executors (ccip, cctp) sign.

One builder so that gas margins and fee caps are applied the same way for every
contract call: the estimate plus a fifth (the call's path can vary a little), plus
`headroom` for state that may change between the estimate and the mining; fees
from the ChainJudge, which raises RetryLater above MG_EVM_FEE_CAPS (nothing is
signed, the node waits).
"""

from __future__ import annotations

from typing import Any

from qtg.providers.evm.outcome import ChainJudge
from qtg.providers.evm.rpc import EvmRpc

#: Gas added to an ERC-20 allowance raise's estimate. The estimate prices the allowance as
#: it is when prepared; a raise estimated while an earlier send's allowance is still
#: unspent (a cheap non-zero → non-zero write) may be mined after that send spent it to
#: zero, and then writes a fresh slot (about 17,100 gas more): without this it runs out of
#: gas and the send behind it reverts for want of allowance (found by the fault harness).
ALLOWANCE_RAISE_HEADROOM_GAS = 20_000


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
