"""EVM nonce reservations and evm_nonce_reaper (issue 11, reference §10).

A reservation is the only way the `evm` executor gets a nonce, so two
runtimes can never hold the same nonce live: `reserve` runs under a
per-(chain, address) advisory lock, reuses the lowest released nonce first
(a never-broadcast nonce is a gap that blocks the address), then mints the
next above every live reservation and the chain's own count. States and rules
are in migrations/0010_evm_nonce_reservations.sql.

evm_nonce_reaper reclaims stale reservations deciding from the chain alone
(`qtg.domain.evm.nonce_verdict`); rows are claimed FOR UPDATE SKIP LOCKED so
several runtimes share the work. Any error is raised: the worker is in the core
fail-fast group, as the reference says.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from qtg.db import Database, sql_family
from qtg.domain.evm import NonceVerdict, nonce_verdict
from qtg.services.context import ServiceContext

if TYPE_CHECKING:
    from qtg.providers.evm.rpc import EvmRpc

SQL = sql_family(
    "evm_nonces",
    "lock_account",
    "for_attempt",
    "take_released",
    "take_next",
    "record_tx_hash",
    "mark",
    "claim_stale",
    "settle",
    "flag_attention",
)

log = logging.getLogger("qtg.services.evm_nonces")


async def reserve(
    db: Database,
    *,
    chain_id: int,
    address: str,
    request_node_id: str,
    attempt_no: int,
    chain_floor: int,
) -> int:
    """The nonce of this node attempt: the one already reserved, else a reused or new one.
    `chain_floor` is the account's pending transaction count (nothing below it is free)."""
    args = {
        "chain_id": chain_id,
        "address": address.lower(),
        "request_node_id": request_node_id,
        "attempt_no": attempt_no,
        "floor": chain_floor,
    }
    async with db.transaction() as tx:
        await tx.execute(SQL.lock_account, args)
        row = await tx.fetchrow(SQL.for_attempt, args)
        if row is not None:
            return row["nonce"]
        nonce = await tx.fetchval(SQL.take_released, args)
        if nonce is None:
            nonce = await tx.fetchval(SQL.take_next, args)
        return nonce


async def for_attempt(db: Database, *, request_node_id: str, attempt_no: int) -> dict | None:
    """The live reservation of a node attempt (chain_id, address, nonce, state, tx_hash)."""
    async with db.transaction() as tx:
        row = await tx.fetchrow(
            SQL.for_attempt, {"request_node_id": request_node_id, "attempt_no": attempt_no}
        )
    return dict(row) if row is not None else None


async def record_tx_hash(db: Database, *, chain_id: int, address: str, nonce: int, tx_hash: str):
    """Write-ahead of the broadcast: a crash after this leaves a hash to look up."""
    async with db.transaction() as tx:
        await tx.execute(
            SQL.record_tx_hash,
            {"chain_id": chain_id, "address": address.lower(), "nonce": nonce, "tx_hash": tx_hash},
        )


async def mark(db: Database, *, chain_id: int, address: str, nonce: int, state: str) -> None:
    async with db.transaction() as tx:
        await tx.execute(
            SQL.mark,
            {"chain_id": chain_id, "address": address.lower(), "nonce": nonce, "state": state},
        )


async def reap_stale_nonces(ctx: ServiceContext) -> int:
    """The evm_nonce_reaper pass: settle what the chain has decided; return rows settled."""
    rpcs: dict[int, EvmRpc] = getattr(ctx.providers, "evm_rpcs", {})
    settled = 0
    async with ctx.db.transaction() as tx:
        rows = await tx.fetch(
            SQL.claim_stale,
            {
                "stale_seconds": ctx.settings.evm_nonce_reservation_stale_seconds,
                "attention_seconds": ctx.settings.evm_nonce_attention_seconds,
                "limit": 100,
                "network_class": ctx.settings.network_class,
            },
        )
        for row in rows:
            rpc = rpcs.get(row["chain_id"])
            if rpc is None:
                continue  # no client for that chain in this process: another runtime's
            mined = await rpc.nonce(row["address"], "latest")
            known = bool(row["tx_hash"]) and await rpc.transaction(row["tx_hash"]) is not None
            verdict = nonce_verdict(
                state=row["state"], nonce=row["nonce"], mined_nonce=mined, tx_known=known
            )
            if verdict is NonceVerdict.WAIT:
                if row["past_attention"] and not row["attention_raised"]:
                    log.warning(
                        "request_attention: nonce %s of %s on chain %s broadcast but not mined",
                        row["nonce"],
                        row["address"],
                        row["chain_id"],
                    )
                    await tx.execute(SQL.flag_attention, {"id": row["id"]})
                continue
            await tx.execute(SQL.settle, {"id": row["id"], "state": verdict.value})
            settled += 1
    return settled
