"""Which transaction consumed a nonce: read from the block that consumed it (issue 43).

qtg's rule (qtg.domain.chain_outcome) never reads a missing receipt as evidence.
When the account's transaction count at the trusted depth has passed nonce N,
the transaction that took N is in the block where the count went from N to
N + 1. `find_consumer` finds that block — galloping back from the trusted head
(recent blocks first: a pruned node still has their state) then bisecting
`eth_getTransactionCount(address, block)` — fetches it with full transactions
and returns the one from `address` with nonce N. `block_receipt` then reads that
transaction's receipt from the block's receipts (`eth_getBlockReceipts`), for a
provider whose by-hash receipt index lags or is pruned.

Nothing here decides: any read that fails, answers null or answers nonsense
makes the result None (unreadable), and the caller waits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from qtg.providers.evm.rpc import EvmRpc, RpcError, RpcUnavailable

log = logging.getLogger("qtg.providers.evm.consumed")


@dataclass(frozen=True, slots=True)
class Consumer:
    tx_hash: str
    block: int


class _Unreadable(Exception):
    pass


async def _count(rpc: EvmRpc, address: str, block: int) -> int:
    try:
        return await rpc.nonce(address, hex(block))
    except (RpcError, RpcUnavailable, TypeError, ValueError) as exc:
        raise _Unreadable(f"eth_getTransactionCount at {block}: {exc}") from None


async def find_consumer(rpc: EvmRpc, address: str, nonce: int, head: int) -> Consumer | None:
    """The transaction from `address` with `nonce`, in the block (at or below `head`,
    where the count is known to be past `nonce`) that consumed it; None: unreadable."""
    try:
        return await _find(rpc, address.lower(), nonce, head)
    except _Unreadable as exc:
        log.info(
            "the consuming transaction could not be read; waiting",
            extra={"chain_id": rpc.chain_id, "nonce": nonce, "why": str(exc)[:200]},
        )
        return None


async def _find(rpc: EvmRpc, address: str, nonce: int, head: int) -> Consumer | None:
    hi = head  # count(hi) > nonce
    if await _count(rpc, address, hi) <= nonce:
        return None  # the caller's head read raced a reorg: nothing to find yet
    lo, step = -1, 1  # count(lo) <= nonce; -1: before the first block
    while hi - step >= 0:  # gallop back: the consuming block is usually recent
        probe = hi - step
        if await _count(rpc, address, probe) <= nonce:
            lo = probe
            break
        hi, step = probe, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if await _count(rpc, address, mid) > nonce:
            hi = mid
        else:
            lo = mid
    try:
        block = await rpc.call("eth_getBlockByNumber", hex(hi), True)
    except (RpcError, RpcUnavailable) as exc:
        raise _Unreadable(f"eth_getBlockByNumber {hi}: {exc}") from None
    if not isinstance(block, dict) or not isinstance(block.get("transactions"), list):
        raise _Unreadable(f"block {hi} was not readable with its transactions")
    for tx in block["transactions"]:
        if not isinstance(tx, dict):
            raise _Unreadable(f"block {hi} came without full transactions")
        try:
            same = str(tx.get("from", "")).lower() == address and int(tx["nonce"], 16) == nonce
        except (KeyError, TypeError, ValueError):
            raise _Unreadable(f"block {hi} has a malformed transaction") from None
        if same and isinstance(tx.get("hash"), str):
            return Consumer(tx_hash=tx["hash"].lower(), block=hi)
    raise _Unreadable(f"block {hi} has no transaction from the signer with nonce {nonce}")


async def block_receipt(rpc: EvmRpc, block: int, tx_hash: str) -> dict[str, Any] | None:
    """The receipt of `tx_hash` read from `block`'s receipts; None: not readable."""
    try:
        receipts = await rpc.call("eth_getBlockReceipts", hex(block))
    except (RpcError, RpcUnavailable):
        return None
    if not isinstance(receipts, list):
        return None
    for receipt in receipts:
        if (
            isinstance(receipt, dict)
            and str(receipt.get("transactionHash", "")).lower() == tx_hash.lower()
            and isinstance(receipt.get("status"), str)
            and isinstance(receipt.get("blockNumber"), str)
        ):
            return receipt
    return None
