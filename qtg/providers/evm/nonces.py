"""EVM nonce reservations: the store the chain executors (evm, ccip, cctp) use.

A reservation is the only way an executor gets a nonce, so two runtimes can never
hold the same nonce live: `reserve` runs under a per-(chain, address) advisory lock,
reuses the lowest released nonce first (a never-broadcast nonce is a gap that blocks
the address), then mints the next above every reservation and the chain's own count;
`reserve_run` takes consecutive nonces for transactions that must follow one another
(an allowance raise and the send that spends it). Signed bytes are kept
(`record_signed`) before they may leave the process (issue 24). States and rules are
in migrations/0010_evm_nonce_reservations.sql and 0018_evm_signed_transactions.sql;
evm_nonce_reaper (qtg/services/evm_nonces.py) reclaims what is stale. The queries
live in sql/evm_nonces/, beside the reaper's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qtg.db import Database, Jsonb, sql_family
from qtg.domain.context import ExecutionContext
from qtg.providers.evm import holds as signer_holds
from qtg.providers.evm import ledger

SQL = sql_family(
    "evm_nonces",
    "lock_account",
    "for_attempt",
    "take_released",
    "take_next",
    "released_run",
    "release_unsigned",
    "mark",
    "record_signed",
    "own_for_signed",
    "signed_for",
    "touch_broadcast",
    "note_not_landed",
    "clear_not_landed",
    "drift_open",
    "signed_at_nonce",
    "evidence_page",
)


async def reserve(
    db: Database,
    *,
    chain_id: int,
    address: str,
    request_node_id: str,
    attempt_no: int,
    chain_floor: int,
    chain_counts: tuple[int, ...] | None = None,
) -> int:
    """The nonce of this node attempt: the one already reserved, else a reused or new one.
    `chain_floor` is the account's pending transaction count (nothing below it is free).
    A run of one (`reserve_run`)."""
    [nonce] = await reserve_run(
        db,
        chain_id=chain_id,
        address=address,
        request_node_ids=[request_node_id],
        attempt_no=attempt_no,
        chain_floor=chain_floor,
        chain_counts=chain_counts,
    )
    return nonce


async def reserve_run(
    db: Database,
    *,
    chain_id: int,
    address: str,
    request_node_ids: Sequence[str],
    attempt_no: int,
    chain_floor: int,
    chain_counts: tuple[int, ...] | None = None,
) -> list[int]:
    """Consecutive nonces, in order, for transactions of one node attempt that must run one
    right after another: allowance raises, then the send that spends them.

    Why consecutive: nothing else of this signer runs between a raise and its spend, so
    no other send spends the allowance first, a raise that can only *set* the allowance
    (`approve(current + amount)`, a token without increaseAllowance) cannot be
    overwritten by another send's before it is spent, and the spend is never below its
    raise (the lowest released nonce taken by the send while its raise minted a new one
    would run the send first, and revert). A run of released nonces is reused whole;
    otherwise the run is minted above every reservation (a lone released nonce is left
    to single reservations and the reaper's gap fill). An attempt that already holds all
    its nonces gets them back (idempotent prepare); one that holds only some (its raises
    changed between two prepares) gives back those it kept no bytes for and takes a new run.

    Before anything is reserved (issue 43 item 2): a node whose payment the ledger adopted
    from the chain raises `ledger.PaidOnChain` (observe it, sign nothing); given the
    chain's counts for the account (`chain_counts`: pending, latest, read before this
    transaction), a chain ahead of what the ledger knows it signed raises
    `ledger.LedgerBehindChain` (reconcile first: qtg.providers.evm.ledger); then
    RetryLater(EVM_SIGNER_HELD) while the signer is held (qtg.providers.evm.holds). In
    that order: an adopted node signs nothing, so no hold stops it, and a ledger still
    behind (a transaction not readable yet) is reconciled again under its own hold.
    """
    address = address.lower()
    base = {"chain_id": chain_id, "address": address, "attempt_no": attempt_no}
    async with db.transaction() as tx:
        await tx.execute(SQL.lock_account, base)
        for key in request_node_ids:
            adopted = await ledger.adoption_in(tx, key)
            if adopted is not None:
                raise ledger.PaidOnChain(adopted, key)
        if chain_counts is not None:
            lost = await ledger.behind(tx, chain_id=chain_id, address=address, counts=chain_counts)
            if lost is not None:
                raise lost
        # a held signer signs nothing new (issue 43): its nodes wait, never FAILED
        await signer_holds.check_in(tx, chain_id=chain_id, address=address)
        held = [
            await tx.fetchrow(SQL.for_attempt, {**base, "request_node_id": key})
            for key in request_node_ids
        ]
        if all(row is not None for row in held):
            return [row["nonce"] for row in held if row is not None]
        for key, row in zip(request_node_ids, held, strict=True):
            if row is not None:
                await tx.execute(SQL.release_unsigned, {**base, "request_node_id": key})
        if len(request_node_ids) == 1:  # a run of one: the lowest released, if any
            start = chain_floor
        else:
            start = await tx.fetchval(
                SQL.released_run, {**base, "floor": chain_floor, "count": len(request_node_ids)}
            )
        nonces = []
        for offset, key in enumerate(request_node_ids):
            args = {**base, "request_node_id": key}
            nonce = None
            if start is not None:  # the run's next released nonce is the lowest from here
                nonce = await tx.fetchval(SQL.take_released, {**args, "floor": start + offset})
            if nonce is None:
                nonce = await tx.fetchval(SQL.take_next, {**args, "floor": chain_floor})
            nonces.append(nonce)
        return nonces


async def for_attempt(
    db: Database, *, request_node_id: str, attempt_no: int
) -> dict[str, Any] | None:
    """The live reservation of a node attempt (chain_id, address, nonce, state, tx_hash)."""
    async with db.transaction() as tx:
        row = await tx.fetchrow(
            SQL.for_attempt, {"request_node_id": request_node_id, "attempt_no": attempt_no}
        )
    return dict(row) if row is not None else None


async def release_unsigned(db: Database, *, request_node_id: str, attempt_no: int) -> list[int]:
    """Give back the reservations of a node attempt that was never submitted and kept no
    signed bytes (issue 24 item 8); the nonces released."""
    async with db.transaction() as tx:
        rows = await tx.fetch(
            SQL.release_unsigned, {"request_node_id": request_node_id, "attempt_no": attempt_no}
        )
    return [r["nonce"] for r in rows]


def owner_of(ctx: ExecutionContext) -> dict[str, Any]:
    """`mark`'s owner arguments for the node attempt `ctx` runs."""
    return {"owner": ctx.request_node_id, "attempt_no": ctx.attempt_no}


async def mark(
    db: Database,
    *,
    chain_id: int,
    address: str,
    nonce: int,
    state: str,
    owner: str,
    attempt_no: int,
) -> bool:
    """Move the reservation of `nonce` forward, only while `owner` (the node attempt's
    request_node_id, whose allowance raises are keyed `<owner>:approve…`) and
    `attempt_no` still hold it (issue 44 item 5). False: not moved (another attempt or
    the reaper holds that nonce now, or it is consumed already)."""
    async with db.transaction() as tx:
        row = await tx.fetchrow(
            SQL.mark,
            {
                "chain_id": chain_id,
                "address": address.lower(),
                "nonce": nonce,
                "state": state,
                "owner": owner,
                "attempt_no": attempt_no,
            },
        )
    return row is not None


async def record_signed(
    db: Database,
    *,
    chain_id: int,
    address: str,
    nonce: int,
    kind: str,
    tx_hash: str,
    raw: str,
    payload: dict[str, Any],
    request_node_id: str | None,
    attempt_no: int | None,
) -> bool:
    """Write-ahead of a broadcast (issue 24): keep the signed bytes of a payment or a
    replacement, under the account lock, and point the reservation at them. False: the
    reservation is no longer this attempt's (taken back, gap-filled): do not broadcast."""
    args = {
        "chain_id": chain_id,
        "address": address.lower(),
        "nonce": nonce,
        "kind": kind,
        "tx_hash": tx_hash,
        "raw": raw,
        "payload": Jsonb(payload),
        "max_fee": int(payload["maxFeePerGas"]),
        "tip": int(payload["maxPriorityFeePerGas"]),
        "request_node_id": request_node_id,
        "attempt_no": attempt_no,
    }
    async with db.transaction() as tx:
        await tx.execute(SQL.lock_account, args)
        if await tx.fetchrow(SQL.own_for_signed, args) is None:
            return False
        await tx.execute(SQL.record_signed, args)
    return True


def _attempt_nonce(
    chain_id: int, address: str, nonce: int, request_node_id: str | None, attempt_no: int | None
) -> dict[str, Any]:
    """The parameters naming one node attempt's nonce on an account (address lowered, as
    stored), for the queries that read or note what that attempt signed at it."""
    return {
        "chain_id": chain_id,
        "address": address.lower(),
        "nonce": nonce,
        "request_node_id": request_node_id,
        "attempt_no": attempt_no,
    }


async def signed_for(
    db: Database,
    *,
    chain_id: int,
    address: str,
    nonce: int,
    request_node_id: str | None,
    attempt_no: int | None,
) -> list[dict[str, Any]]:
    """Every transaction signed for a node attempt's nonce, oldest first (with age_seconds)."""
    async with db.transaction() as tx:
        rows = await tx.fetch(
            SQL.signed_for, _attempt_nonce(chain_id, address, nonce, request_node_id, attempt_no)
        )
    return [dict(r) for r in rows]


async def touch_broadcast(db: Database, tx_hash: str) -> None:
    async with db.transaction() as tx:
        await tx.execute(SQL.touch_broadcast, {"tx_hash": tx_hash})


async def note_not_landed(
    db: Database,
    *,
    chain_id: int,
    address: str,
    nonce: int,
    request_node_id: str | None,
    attempt_no: int | None,
) -> float:
    """Seconds since a judgement first found this nonce consumed at depth with no
    receipt of ours (the evidence missing: a wait, paged past its bound), on the
    judging attempt's reservation only; 0.0 when that attempt holds none."""
    args = _attempt_nonce(chain_id, address, nonce, request_node_id, attempt_no)
    async with db.transaction() as tx:
        seen = await tx.fetchval(SQL.note_not_landed, args)
    return float(seen or 0.0)


async def clear_not_landed(
    db: Database,
    *,
    chain_id: int,
    address: str,
    nonce: int,
    request_node_id: str | None,
    attempt_no: int | None,
) -> None:
    args = _attempt_nonce(chain_id, address, nonce, request_node_id, attempt_no)
    async with db.transaction() as tx:
        await tx.execute(SQL.clear_not_landed, args)


async def open_drift(db: Database, *, chain_id: int, subject: str) -> list[dict[str, Any]]:
    """Open verify_drift findings on a contract: transfers through it wait until they clear."""
    async with db.transaction() as tx:
        rows = await tx.fetch(SQL.drift_open, {"chain_id": chain_id, "subject": subject})
    return [dict(r) for r in rows]


async def signed_at_nonce(
    db: Database, *, chain_id: int, address: str, nonce: int
) -> list[dict[str, Any]]:
    """Every transaction qtg signed for a nonce, whatever for (issue 43): a consuming
    hash among them is qtg's own (a gap fill, a cancel, another attempt)."""
    rows = await db.fetch(
        SQL.signed_at_nonce, {"chain_id": chain_id, "address": address.lower(), "nonce": nonce}
    )
    return [dict(r) for r in rows]


async def page_missing_evidence(
    db: Database, *, chain_id: int, address: str, nonce: int, hashes: Sequence[str], body: str
) -> None:
    """Page critical (once per nonce) that what consumed it cannot be read."""
    async with db.transaction() as tx:
        await tx.execute(
            SQL.evidence_page,
            {
                "chain_id": chain_id,
                "address": address.lower(),
                "nonce": nonce,
                "hashes": Jsonb(list(hashes)),
                "body": body,
            },
        )
