"""Which transaction consumed a nonce: read from the block that consumed it (issue 43).

qtg's rule (qtg.domain.chain_outcome) never reads a missing receipt as evidence.
When the account's transaction count at the trusted depth has passed nonce N,
the transaction that took N is in the block where the count went from N to
N + 1. `find_consumer` finds that block (`first_block_past`: galloping back from the
trusted head — recent blocks first: a pruned node still has their state — then
bisecting `eth_getTransactionCount(address, block)`; the ledger's reconciliation,
qtg.providers.evm.ledger, uses the same primitive and block reader), fetches it
with full transactions and returns the one from `address` with nonce N.
`block_receipt` then reads that transaction's receipt from the block's receipts
(`eth_getBlockReceipts`), for a provider whose by-hash receipt index lags or is pruned.

Nothing here decides: any read that fails, answers null or answers nonsense
makes the result None (unreadable), and the caller waits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from qtg.domain.ledger import ChainTx
from qtg.providers.evm.rpc import EvmRpc, RpcError, RpcUnavailable

log = logging.getLogger("qtg.providers.evm.consumed")


@dataclass(frozen=True, slots=True)
class Consumer:
    tx_hash: str
    block: int
    #: the transaction itself (to, value, calldata), for the ledger's matching rule
    tx: ChainTx | None = None


class Unreadable(Exception):
    """A block not readable with its transactions, or malformed: no evidence."""


async def first_block_past(rpc: EvmRpc, address: str, nonce: int, lo: int, hi: int) -> int:
    """The first block in [lo, hi] at whose end the account's count is above `nonce`
    (the block holding its transaction `nonce`); the count at `hi` must be above it.
    Galloping back from `hi` first: the consuming block is usually recent (and a pruned
    node still has recent state), found in about 2 log2(distance) reads instead of
    log2(height). The one bisection of qtg: the outcome judge (`find_consumer`) and the
    ledger's reconciliation (qtg.providers.evm.ledger) both use it. RPC errors pass."""
    step = 1
    while hi - step >= lo:
        probe = hi - step
        if await rpc.nonce(address, hex(probe)) > nonce:
            hi, step = probe, step * 2
        else:
            lo = probe + 1
            break
    while lo < hi:
        mid = (lo + hi) // 2
        if await rpc.nonce(address, hex(mid)) > nonce:
            hi = mid
        else:
            lo = mid + 1
    return lo


def chain_tx(raw: dict[str, Any], block: dict[str, Any]) -> ChainTx:
    """One transaction of a block read with full transactions (KeyError, TypeError,
    ValueError: malformed)."""
    return ChainTx(
        tx_hash=str(raw["hash"]).lower(),
        nonce=int(raw["nonce"], 16),
        to=(raw.get("to") or None),
        value=int(raw.get("value") or "0x0", 16),
        data=str(raw.get("input") or raw.get("data") or "0x"),
        block=int(block["number"], 16),
        block_time=int(block["timestamp"], 16),
    )


async def signer_transactions(rpc: EvmRpc, address: str, number: int) -> dict[int, ChainTx]:
    """{nonce: transaction} of `address` (lower case) in block `number`, read with full
    transactions. RpcError/RpcUnavailable pass; `Unreadable`: no block, or a malformed one."""
    block = await rpc.call("eth_getBlockByNumber", hex(number), True)
    if not isinstance(block, dict) or not isinstance(block.get("transactions"), list):
        raise Unreadable(f"block {number} was not readable with its transactions")
    found: dict[int, ChainTx] = {}
    for raw in block["transactions"]:
        if not isinstance(raw, dict):
            raise Unreadable(f"block {number} came without full transactions")
        try:
            if str(raw.get("from", "")).lower() == address and isinstance(raw.get("hash"), str):
                tx = chain_tx(raw, block)
                found[tx.nonce] = tx
        except (KeyError, TypeError, ValueError):
            raise Unreadable(f"block {number} has a malformed transaction") from None
    return found


async def find_consumer(rpc: EvmRpc, address: str, nonce: int, head: int) -> Consumer | None:
    """The transaction from `address` with `nonce`, in the block (at or below `head`,
    where the count is known to be past `nonce`) that consumed it; None: unreadable."""
    try:
        return await _find(rpc, address.lower(), nonce, head)
    except (Unreadable, RpcError, RpcUnavailable, TypeError, ValueError) as exc:
        log.info(
            "the consuming transaction could not be read; waiting",
            extra={"chain_id": rpc.chain_id, "nonce": nonce, "why": str(exc)[:200]},
        )
        return None


async def _find(rpc: EvmRpc, address: str, nonce: int, head: int) -> Consumer | None:
    if await rpc.nonce(address, hex(head)) <= nonce:
        return None  # the caller's head read raced a reorg: nothing to find yet
    number = await first_block_past(rpc, address, nonce, 0, head)
    tx = (await signer_transactions(rpc, address, number)).get(nonce)
    if tx is None:
        raise Unreadable(f"block {number} has no transaction from the signer with nonce {nonce}")
    return Consumer(tx_hash=tx.tx_hash, block=number, tx=tx)


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
