"""The ledger against the chain, before a signature (issue 43 item 2): pure rules.

qtg signs for an account only what its ledger records first (a nonce reservation,
kept signed bytes: write-ahead). So the chain's transaction count for the account
can never be ahead of what the ledger knows it signed — unless the ledger lost
history (an asynchronous failover, a restore from a backup) or a second system
uses the key. Signing on from a ledger that forgot would pay again: the nodes
whose payments were lost look unpaid. So, before a new nonce is signed:

- `chain_ahead`: the nonces the chain has used that the ledger does not know
  (empty: in step; the chain behind the ledger is normal, its transactions are
  in flight);
- `transfer_call`: what an `evm_transfer` node's transaction is on chain (to,
  value, calldata), the same rule the evm executor builds it with;
- `match_payments`: which node each unknown transaction paid. A transaction
  matches a node when it is exactly that node's transfer (destination, asset,
  amount, calldata) and its block is not older than the node's movement (a
  payment cannot precede its movement); each node pays once, the oldest
  movement first. A node matched is adopted (observed, never signed again); a
  transaction that matches nothing keeps the signer held for a person.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from qtg.domain.evm import erc20_transfer_data, is_address, to_base_units

#: A block's timestamp may be this far before the movement's creation (clocks differ)
#: and its transaction still be that movement's payment.
CLOCK_SKEW_SECONDS = 120


def chain_ahead(known_next: int, *counts: int) -> range:
    """The nonces the chain shows used (any of `counts`: pending, latest) that the ledger,
    whose next unknown nonce is `known_next`, never recorded. Empty: in step."""
    return range(known_next, max((known_next, *counts)))


@dataclass(frozen=True, slots=True)
class TransferCall:
    to: str
    value: int
    data: str


def transfer_call(destination: str, token: str | None, value: int) -> TransferCall:
    """The transaction of an evm transfer of `value` base units: native coin goes to
    the destination with the value; an ERC-20 calls the token's transfer(destination, value)."""
    if token is None:
        return TransferCall(to=destination.lower(), value=value, data="0x")
    return TransferCall(to=token.lower(), value=0, data=erc20_transfer_data(destination, value))


def node_transfer_call(
    intent: Mapping[str, Any], node_config: Mapping[str, Any]
) -> tuple[int, TransferCall] | None:
    """(chain_id, call) of an evm_transfer node as its executor would build it; None when
    the node could not be built (bad config: such a node cannot have paid)."""
    cfg = node_config.get("evm")
    if not isinstance(cfg, Mapping) or not isinstance(cfg.get("chain_id"), int):
        return None
    destination = intent.get("destination", cfg.get("destination"))
    token = cfg.get("token")
    if not is_address(destination) or (token is not None and not is_address(token)):
        return None
    try:
        value = to_base_units(
            str(intent.get("amount", cfg.get("amount"))), int(cfg.get("decimals", 18))
        )
    except (TypeError, ValueError):
        return None
    return cfg["chain_id"], transfer_call(destination, token, value)


@dataclass(frozen=True, slots=True)
class ChainTx:
    """One transaction of the signer found in its block."""

    tx_hash: str
    nonce: int
    to: str | None
    value: int
    data: str
    block: int
    block_time: int  # the block's timestamp, seconds since the epoch


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node that may have paid: its transfer and when its movement was created."""

    request_node_id: str
    call: TransferCall
    created_at: float  # seconds since the epoch


def pays(tx: ChainTx, call: TransferCall) -> bool:
    """The matching rule: `tx` is exactly the transfer `call` (destination, asset, amount,
    calldata). Also asked by the outcome judge before it calls a nonce's consumer foreign:
    a node's own payment whose signed bytes the ledger lost is its payment, not a foreign
    use of the key (qtg.providers.evm.outcome)."""
    return (
        (tx.to or "").lower() == call.to
        and tx.value == call.value
        and (tx.data or "0x").lower() == call.data.lower()
    )


def match_payments(
    txs: Iterable[ChainTx],
    candidates: Sequence[Candidate],
    *,
    reserved_by: Mapping[int, str] | None = None,
    skew_seconds: float = CLOCK_SKEW_SECONDS,
) -> tuple[dict[str, str], list[ChainTx]]:
    """({tx_hash: request_node_id}, unmatched transactions). Transactions are taken in
    nonce order; each goes to the node that reserved its nonce (`reserved_by`: the ledger
    kept the reservation but lost the bytes) when its transfer is exactly that node's,
    else to the oldest movement's node whose transfer it is exactly; never to a node whose
    movement is younger than the block (less the clock skew); a node is matched at most
    once (two identical payments are two nodes' payments)."""
    by_id = {c.request_node_id: c for c in candidates}
    ordered = sorted(candidates, key=lambda c: (c.created_at, c.request_node_id))
    taken: set[str] = set()
    matched: dict[str, str] = {}
    unmatched: list[ChainTx] = []
    for tx in sorted(txs, key=lambda t: t.nonce):
        owner = by_id.get((reserved_by or {}).get(tx.nonce, ""))
        for cand in ([owner] if owner is not None else []) + ordered:
            if cand.request_node_id in taken:
                continue
            if cand.created_at - skew_seconds > tx.block_time:
                continue
            if pays(tx, cand.call):
                taken.add(cand.request_node_id)
                matched[tx.tx_hash] = cand.request_node_id
                break
        else:
            unmatched.append(tx)
    return matched, unmatched
