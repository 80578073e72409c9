"""Signer holds (issue 43): stop a signer's new signatures until a person has looked.

A hold says "this signer's key or ledger cannot be trusted right now": its nonce was
consumed by a transaction qtg never signed (the key is used elsewhere), or the chain
shows more transactions than the ledger knows it signed (lost history). Signing on
would pay again, so every lane of the signer waits. The API, for every chain executor
and every helper that finds such a thing:

    await place(db, chain_id=1, address="0x…", reason="FOREIGN_NONCE_CONSUMER",
                evidence={"tx_hash": "0x…", "block": 123}, actor="evm_outcome")
        Idempotent: an active hold with the same (chain, signer, reason) only counts
        the occurrence. Raises a critical notification (kind `evm_signer_hold`) in the
        same transaction, so a hold never exists without its page. `chain_id=None`
        holds the signer on every chain. Pass `tx=` to place it inside your own
        transaction (it then commits or rolls back with yours).

    await check(db, chain_id=1, address="0x…")   (or check_in(tx, ...))
        Asked before anything new is signed for a signer — every nonce reservation
        (qtg.providers.evm.nonces.reserve_run, so evm, ccip and cctp) asks it: raises
        RetryLater (code EVM_SIGNER_HELD) while a hold is active. The dispatcher turns
        that into a wait (the node stays READY, paged past
        MG_NODE_TRANSIENT_ATTENTION_SECONDS), never FAILED: nothing was sent.

    await active(db, chain_id=1, address="0x…") -> list of active holds

Clearing is a person's act (qtg.services.evm_signer_holds.clear_hold, audited), which
resolves the page. Already signed bytes (a payment's, its replacements', a gap fill's)
are still broadcast while a hold is active: they are transactions qtg made, and
withholding them only strands payments the ledger already records.

Table: migrations/0040_evm_signer_holds.sql; queries: sql/evm_signer_holds/.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qtg.db import Database, Jsonb, Tx, sql_family
from qtg.providers.base import RetryLater

SQL = sql_family("evm_signer_holds", "place", "active_for")

#: The code a node held by a signer hold waits with.
HELD_CODE = "EVM_SIGNER_HELD"
#: How long a held node waits before it looks again (the dispatcher's backoff caps it).
HELD_RETRY_SECONDS = 30.0
#: Reasons used by qtg itself (any UPPER_SNAKE code is accepted).
FOREIGN_NONCE_CONSUMER = "FOREIGN_NONCE_CONSUMER"


async def place(
    db: Database,
    *,
    chain_id: int | None,
    address: str,
    reason: str,
    evidence: Mapping[str, Any],
    actor: str,
    body: str = "",
    tx: Tx | None = None,
) -> dict[str, Any]:
    """Hold `address` on `chain_id` (None: every chain); the hold row, with `created`
    (False: it was already held for this reason) and the notification's id."""
    args = {
        "chain_id": chain_id,
        "address": address.lower(),
        "reason": reason,
        "evidence": Jsonb(dict(evidence)),
        "actor": actor,
        "body": body
        or (
            f"qtg signs nothing new for {address.lower()} until a person clears the hold "
            f"(reason {reason}). Evidence: {dict(evidence)}"
        ),
    }
    if tx is not None:
        row = await tx.fetchrow(SQL.place, args)
    else:
        async with db.transaction() as own:
            row = await own.fetchrow(SQL.place, args)
    assert row is not None
    return dict(row)


async def active(db: Database, *, chain_id: int, address: str) -> list[dict[str, Any]]:
    """The active holds on `address` on `chain_id` (its own and every-chain ones)."""
    rows = await db.fetch(SQL.active_for, {"chain_id": chain_id, "address": address.lower()})
    return [dict(r) for r in rows]


async def check(db: Database, *, chain_id: int, address: str) -> None:
    """RetryLater(EVM_SIGNER_HELD) while `address` is held on `chain_id`; else nothing."""
    _refuse_if_held(chain_id, address, await active(db, chain_id=chain_id, address=address))


async def check_in(tx: Tx, *, chain_id: int, address: str) -> None:
    """`check` inside the caller's transaction (evm_nonces.reserve_run asks it under the
    account lock, so every executor's every new nonce passes it)."""
    rows = await tx.fetch(SQL.active_for, {"chain_id": chain_id, "address": address.lower()})
    _refuse_if_held(chain_id, address, rows)


def _refuse_if_held(chain_id: int, address: str, holds: list[dict[str, Any]]) -> None:
    if holds:
        reasons = ", ".join(sorted({h["reason"] for h in holds}))
        raise RetryLater(
            f"signer {address.lower()} is held on chain {chain_id} ({reasons}): nothing new "
            "is signed until a person clears the hold",
            code=HELD_CODE,
            retry_after_seconds=HELD_RETRY_SECONDS,
        )
