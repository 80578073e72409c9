"""The audit outbox (reference §9) and its hash-chained log (DESIGN §2, beyond).

A mutation writes its audit fact with `qtg.services.auditing.record_audit`
in its own transaction, so the fact exists exactly when the change does. The
audit_outbox_promoter (`promote_audit_outbox`) then moves facts into
`audit_events`, oldest outbox id first, chaining each row to the previous one
(qtg/domain/audit_chain.py).

Why promoted outbox rows are *deleted* rather than marked: the audit_events
row is the durable record (it keeps `outbox_id`, UNIQUE, so a fact can never
be promoted twice); keeping the outbox row would duplicate it and grow a
queue that every pass scans. Deleting in the promoting transaction also means
the promoter keeps no cursor, so a fact whose transaction commits after a
later id was promoted is not skipped (DESIGN §9) — it is promoted by the next
pass and lands later in the chain. The chain's order is therefore promotion
order: outbox id order among the facts visible at each pass.

One writer at a time: the pass takes a transaction-level advisory lock and a
runtime that does not get it returns 0 at once, so two runtimes can never
interleave prev_hash values.
"""

from __future__ import annotations

from dataclasses import dataclass

from qtg.db import Database, sql_family
from qtg.domain import audit_chain
from qtg.services.context import ServiceContext

SQL = sql_family(
    "audit",
    "try_lock",
    "chain_head",
    "pending",
    "promote_one",
    "delete_promoted",
    "chain_page",
)

#: Outbox rows promoted per pass; the runtime goes round again at once after a
#: pass that promoted something, so a burst drains in a few passes.
PROMOTE_BATCH_SIZE = 500
#: audit_events rows read per verification page (bounded memory on any size of log).
VERIFY_PAGE_SIZE = 1000


async def promote_pending(db: Database, *, limit: int = PROMOTE_BATCH_SIZE) -> int:
    """Promote up to `limit` outbox rows in one transaction.

    Returns 0 at once when another promoter holds the chain.
    """
    async with db.transaction() as tx:
        if not await tx.fetchval(SQL.try_lock):
            return 0
        rows = await tx.fetch(SQL.pending, {"limit": limit})
        if not rows:
            return 0
        head = await tx.fetchval(SQL.chain_head) or audit_chain.GENESIS_HASH
        hashes = audit_chain.chain(head, rows)
        # sent pipelined, in this order, with the commit
        for row, (prev, current) in zip(rows, hashes, strict=True):
            tx.defer(
                SQL.promote_one,
                {"outbox_id": row["outbox_id"], "prev_hash": prev, "row_hash": current},
            )
        tx.defer(SQL.delete_promoted, {"ids": [row["outbox_id"] for row in rows]})
        return len(rows)


async def promote_audit_outbox(ctx: ServiceContext) -> int:
    """The audit_outbox_promoter pass (reference §9)."""
    return await promote_pending(ctx.db)


@dataclass(frozen=True, slots=True)
class VerifyResult:
    ok: bool
    checked: int  # rows that verified before the first break (all rows when ok)
    first_broken_id: int | None = None
    reason: str | None = None


async def verify_audit_chain(db: Database, *, page_size: int = VERIFY_PAGE_SIZE) -> VerifyResult:
    """Recompute the whole chain from the genesis hash; name the first row that breaks it."""
    prev_hash = audit_chain.GENESIS_HASH
    after_id = 0
    checked = 0
    while True:
        rows = await db.fetch(SQL.chain_page, {"after_id": after_id, "limit": page_size})
        if not rows:
            return VerifyResult(ok=True, checked=checked)
        broken, prev_hash, good = audit_chain.verify_chain(rows, prev_hash)
        checked += good
        if broken is not None:
            return VerifyResult(
                ok=False, checked=checked, first_broken_id=broken.row_id, reason=broken.reason
            )
        after_id = rows[-1]["id"]
