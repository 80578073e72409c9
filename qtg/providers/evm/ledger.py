"""The ledger reconciles itself with the chain before it signs (issue 43 item 2).

Every nonce reservation that would sign a new nonce first compares the chain's
transaction count for the signer (pending and latest) with what the ledger knows it
signed: the nonces it kept signed bytes for (written before anything leaves) or
adopted. A nonce the chain used above those, or one the ledger reserved but kept no
bytes for (an asynchronous failover keeps a reservation and loses the bytes signed
right after it), is unknown (`behind`, which `qtg.providers.evm.nonces.reserve_run`
asks under the account lock, raising `LedgerBehindChain`). The chain ahead means the
ledger lost history (an asynchronous failover, a restore from a backup) or a second
system uses the key; signing on would pay again for payments the chain holds.
`reconcile` then:

1. holds the signer (`qtg.providers.evm.holds`, reason LEDGER_BEHIND_CHAIN: every
   lane of it waits, a critical page) — not on the first use of a key (the ledger
   knew nothing of the account: its history is older than qtg's);
2. reads each unknown transaction from the block that consumed its nonce (bisect
   eth_getTransactionCount by block number, then eth_getBlockByNumber with full
   transactions) — a nonce only pending, or a block that cannot be read, is no
   evidence of anything: the hold stays and the next reservation looks again;
3. matches each to the node it paid (qtg.domain.ledger.match_payments) and keeps
   them all in evm_ledger_adoptions: an adopted node is observed from its chain
   transaction and never signed again (`adoption_for`, asked first by every
   reservation); a transaction that matches no node keeps the hold until a person
   clears it;
4. when every unknown transaction was adopted, the ledger is in step again: the hold
   ends (cleared by qtg, with the evidence) and a critical notification
   (`evm_ledger_behind_chain`) stays open for a person.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from qtg.db import Database, Jsonb, sql_family
from qtg.domain.ledger import (
    Candidate,
    ChainTx,
    chain_ahead,
    match_payments,
    node_transfer_call,
)
from qtg.providers.base import RetryLater
from qtg.providers.evm import holds as signer_holds
from qtg.providers.evm.rpc import EvmRpc

log = logging.getLogger("qtg.providers.evm.ledger")

SQL = sql_family(
    "evm_nonces",
    "lock_account",
    "ledger_known",
    "adoption_for",
    "adoption_candidates",
    "record_adoption",
    "ledger_release_hold",
    "ledger_notice",
    "reserved_by",
)

#: The hold's reason and the code a node waits with while the ledger is reconciled.
REASON = "LEDGER_BEHIND_CHAIN"
RECONCILING_CODE = "EVM_LEDGER_RECONCILING"
#: On the first use of a key with history, at most this many of its newest nonces are
#: read (a restore to before the first payment loses the newest ones; reading a long
#: history once would cost thousands of reads: the docs say so).
FIRST_USE_SCAN = 32
ACTOR = "evm_ledger_reconcile"


class LedgerBehindChain(Exception):
    """The chain has used nonces of the signer the ledger has no record of."""

    def __init__(
        self,
        *,
        chain_id: int,
        address: str,
        known_next: int,
        counts: tuple[int, ...],
        known: bool,
        unsigned_below: Sequence[int] = (),
    ) -> None:
        super().__init__(
            f"chain {chain_id}: {address} has used nonces up to {max(counts) - 1}; "
            f"the ledger knows it signed below {known_next} only"
            + (f", and not {list(unsigned_below)[:5]}" if unsigned_below else "")
        )
        self.chain_id = chain_id
        self.address = address
        self.known_next = known_next
        self.counts = counts
        self.first_use = not known
        #: nonces below known_next the ledger reserved but kept no bytes for
        self.unsigned_below = list(unsigned_below)


@dataclass(frozen=True, slots=True)
class Adopted:
    """The chain transaction adopted as a node's payment."""

    chain_id: int
    address: str
    nonce: int
    tx_hash: str
    block_number: int


class PaidOnChain(Exception):
    """The node's payment is a chain transaction the ledger adopted: observe it, sign nothing."""

    def __init__(self, adopted: Adopted, request_node_id: str) -> None:
        super().__init__(
            f"node {request_node_id} was paid by {adopted.tx_hash} (nonce {adopted.nonce})"
        )
        self.adopted = adopted
        self.request_node_id = request_node_id


@dataclass(frozen=True, slots=True)
class Outcome:
    adopted: dict[str, str]  # tx_hash -> request_node_id
    unmatched: list[str]  # tx hashes
    unread: list[int]  # nonces that could not be read from a block yet
    held: bool  # the signer stays held

    @property
    def in_step(self) -> bool:
        return not self.held and not self.unread


async def behind(
    tx: Any, *, chain_id: int, address: str, counts: tuple[int, ...]
) -> LedgerBehindChain | None:
    """Inside the reservation's locked transaction: the chain's counts (read before the
    lock) against what the ledger knows it signed; None when in step. A transaction in
    those counts was recorded (write-ahead) before it left, so it is seen here."""
    row = await tx.fetchrow(
        SQL.ledger_known, {"chain_id": chain_id, "address": address, "top": max(counts)}
    )
    known_next, unsigned = int(row["known_next"]), list(row["unsigned_below"] or [])
    if not chain_ahead(known_next, *counts) and not unsigned:
        return None
    return LedgerBehindChain(
        chain_id=chain_id,
        address=address,
        known_next=known_next,
        counts=counts,
        known=bool(row["known"]),
        unsigned_below=unsigned,
    )


async def adoption_in(tx: Any, request_node_id: str) -> Adopted | None:
    """The adopted chain transaction of a node, inside the caller's transaction."""
    row = await tx.fetchrow(SQL.adoption_for, {"request_node_id": request_node_id})
    if row is None:
        return None
    return Adopted(
        chain_id=row["chain_id"],
        address=row["address"],
        nonce=row["nonce"],
        tx_hash=row["tx_hash"],
        block_number=row["block_number"],
    )


async def adoption(db: Database, request_node_id: str) -> Adopted | None:
    """The adopted chain transaction of a node (None: none)."""
    async with db.transaction() as tx:
        return await adoption_in(tx, request_node_id)


T = TypeVar("T")


async def reserve_in_step(
    db: Database,
    rpc: EvmRpc,
    address: str,
    reserve: Callable[[int, tuple[int, int]], Awaitable[T]],
) -> T:
    """`reserve(chain_floor, chain_counts)` (a nonce reservation: evm_nonces.reserve or
    reserve_run) once the ledger is in step with the chain, for every chain executor: the
    counts are read before the reservation's lock; a chain ahead of the ledger is
    reconciled first (`reconcile`); while it cannot be, nothing is reserved or signed and
    the node waits (RetryLater EVM_LEDGER_RECONCILING). `PaidOnChain` passes through."""
    for _ in range(2):
        pending = await rpc.nonce(address, "pending")
        latest = await rpc.nonce(address, "latest")
        try:
            return await reserve(pending, (pending, latest))
        except LedgerBehindChain as behind:
            outcome = await reconcile(db, rpc, behind)
            if not outcome.in_step:
                raise RetryLater(
                    f"{behind}: {len(outcome.unmatched)} transaction(s) match no node, "
                    f"{len(outcome.unread)} not readable yet; the signer is held",
                    code=RECONCILING_CODE,
                    retry_after_seconds=5.0,
                ) from None
    raise RetryLater(
        "the chain moved ahead of the ledger again while it was reconciled",
        code=RECONCILING_CODE,
        retry_after_seconds=1.0,
    )


# ------------------------------------------------------------------ reading the chain


async def _count_at(rpc: EvmRpc, address: str, block: int) -> int:
    return await rpc.nonce(address, hex(block))


async def first_block_past(rpc: EvmRpc, address: str, nonce: int, lo: int, hi: int) -> int:
    """The first block in [lo, hi] at whose end the account's count is above `nonce`
    (the block holding its transaction `nonce`); the count at `hi` must be above it.
    Galloping back from `hi` first: the transactions a ledger lost are recent, and are
    found in about 2 log2(distance) reads instead of log2(height)."""
    step = 1
    while hi - step >= lo:
        probe = hi - step
        if await _count_at(rpc, address, probe) > nonce:
            hi, step = probe, step * 2
        else:
            lo = probe + 1
            break
    while lo < hi:
        mid = (lo + hi) // 2
        if await _count_at(rpc, address, mid) > nonce:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _chain_tx(raw: dict[str, Any], block: dict[str, Any]) -> ChainTx:
    return ChainTx(
        tx_hash=str(raw["hash"]).lower(),
        nonce=int(raw["nonce"], 16),
        to=(raw.get("to") or None),
        value=int(raw.get("value") or "0x0", 16),
        data=str(raw.get("input") or raw.get("data") or "0x"),
        block=int(block["number"], 16),
        block_time=int(block["timestamp"], 16),
    )


async def read_transactions(
    rpc: EvmRpc, address: str, nonces: Sequence[int]
) -> tuple[list[ChainTx], list[int]]:
    """The signer's transactions at `nonces`, each read from its block; and the nonces
    that could not be read (not mined yet: only a pending count says they are used)."""
    address = address.lower()
    head = await rpc.block_number()
    mined = await _count_at(rpc, address, head)
    found: dict[int, ChainTx] = {}
    unread: list[int] = []
    lo = 0
    for nonce in sorted(nonces):
        if nonce in found:
            continue
        if nonce >= mined:
            unread.append(nonce)
            continue
        number = await first_block_past(rpc, address, nonce, lo, head)
        lo = number
        block = await rpc.call("eth_getBlockByNumber", hex(number), True)
        if not block:
            unread.append(nonce)
            continue
        for raw in block.get("transactions") or []:
            if isinstance(raw, dict) and str(raw.get("from", "")).lower() == address:
                found[int(raw["nonce"], 16)] = _chain_tx(raw, block)
        if nonce not in found:
            unread.append(nonce)
    return [found[n] for n in sorted(nonces) if n in found], unread


# ------------------------------------------------------------------ reconciling


async def reconcile(db: Database, rpc: EvmRpc, behind: LedgerBehindChain) -> Outcome:
    """Hold, read, match and keep what the chain shows (the module's docstring).
    RpcError/RpcUnavailable while reading: the hold (if any) stays, the caller retries."""
    chain_id, address = behind.chain_id, behind.address.lower()
    top = max(behind.counts)
    start = max(behind.known_next, top - FIRST_USE_SCAN) if behind.first_use else behind.known_next
    nonces = sorted(set(behind.unsigned_below) | set(range(start, top)))
    evidence = {
        "known_next": behind.known_next,
        "chain_counts": list(behind.counts),
        "unknown_nonces": nonces[:50],
    }
    if not behind.first_use:
        hold = await signer_holds.place(
            db,
            chain_id=chain_id,
            address=address,
            reason=REASON,
            evidence=evidence,
            actor=ACTOR,
            body=(
                f"The chain shows {len(nonces)} nonce(s) of {address} used that the ledger "
                "kept no signed bytes for: it lost history (asynchronous failover, restore "
                "from a backup) or a second system uses the key. Nothing new is signed for "
                "this signer; qtg reads those transactions and adopts the ones that are "
                "payments of its nodes. Transactions that match no node keep this hold until "
                "a person clears it."
            ),
        )
        log.critical(
            "ledger behind the chain: signer held",
            extra={"chain_id": chain_id, "address": address, "hold_id": hold.get("id"), **evidence},
        )
    txs, unread = await read_transactions(rpc, address, nonces)
    if behind.first_use and unread:
        # the first use of a key whose newest transactions are not mined yet: nothing is
        # kept (kept rows would make the account known), the next reservation looks again
        return Outcome(adopted={}, unmatched=[], unread=unread, held=False)
    async with db.transaction() as tx:
        await tx.execute(SQL.lock_account, {"chain_id": chain_id, "address": address})
        rows = await tx.fetch(SQL.adoption_candidates, {"chain_id": chain_id})
        candidates = []
        for row in rows:
            built = node_transfer_call(row["intent"], row["node_config"])
            if built is not None and built[0] == chain_id:
                candidates.append(
                    Candidate(
                        request_node_id=row["request_node_id"],
                        call=built[1],
                        created_at=float(row["created_at"]),
                    )
                )
        owners = await tx.fetch(
            SQL.reserved_by,
            {"chain_id": chain_id, "address": address, "nonces": [t.nonce for t in txs]},
        )
        matched, unmatched = match_payments(
            txs, candidates, reserved_by={r["nonce"]: r["request_node_id"] for r in owners}
        )
        adopted: dict[str, str] = {}
        for found in txs:
            node = matched.get(found.tx_hash)
            disposition = (
                "adopted" if node else ("prior_history" if behind.first_use else "unmatched")
            )
            kept = await tx.fetchval(
                SQL.record_adoption,
                {
                    "chain_id": chain_id,
                    "address": address,
                    "nonce": found.nonce,
                    "tx_hash": found.tx_hash,
                    "block_number": found.block,
                    "disposition": disposition,
                    "request_node_id": node,
                    "evidence": Jsonb(
                        {"to": found.to, "value": str(found.value), "input": found.data[:200]}
                    ),
                },
            )
            if node and kept is not None:
                adopted[found.tx_hash] = node
        unmatched_hashes = [t.tx_hash for t in unmatched] if not behind.first_use else []
        held = not behind.first_use and bool(unmatched_hashes or unread)
        if not behind.first_use and not held:
            await tx.fetch(
                SQL.ledger_release_hold,
                {
                    "chain_id": chain_id,
                    "address": address,
                    "actor": ACTOR,
                    "evidence": (
                        f"every transaction the ledger did not know ({len(txs)}) was read "
                        "from its block and adopted as a node's payment"
                    ),
                },
            )
        if adopted or unmatched_hashes or unread:
            await tx.fetchval(
                SQL.ledger_notice,
                {
                    "chain_id": chain_id,
                    "address": address,
                    "subject": (
                        f"ledger behind chain {chain_id} for {address}: "
                        f"{len(adopted)} payment(s) adopted, {len(unmatched_hashes)} unmatched, "
                        f"{len(unread)} not readable yet"
                    ),
                    "body": (
                        "The chain holds transactions of this signer the ledger had no record "
                        "of. Adopted ones are their nodes' payments: those nodes are observed "
                        "from them, not paid again. Unmatched ones (and unreadable ones) keep "
                        "the signer held (evm_signer_holds) until a person clears it."
                    ),
                    "links": Jsonb(
                        {
                            "adopted": adopted,
                            "unmatched": unmatched_hashes,
                            "unread_nonces": unread,
                        }
                    ),
                },
            )
    log.warning(
        "ledger reconciled with the chain",
        extra={
            "chain_id": chain_id,
            "address": address,
            "first_use": behind.first_use,
            "adopted": len(adopted),
            "unmatched": len(unmatched_hashes),
            "prior_history": len(unmatched) if behind.first_use else 0,
            "unread": len(unread),
        },
    )
    return Outcome(adopted=adopted, unmatched=unmatched_hashes, unread=unread, held=held)
