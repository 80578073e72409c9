"""expiration_checker (reference §5): PENDING_APPROVAL requests past their approval TTL.

Each pass expires up to MG_EXPIRATION_BATCH_SIZE (20) requests whose
expires_at has passed, in one transaction with an audit fact per request
(actor `system:expiration_checker`). The state change, its movement event and
its callback row come from the request triggers, so they cannot be forgotten.
`next_due` lets the runtime sleep until the earliest deadline instead of a
full interval, so a request expires when its TTL ends, not up to 30 s later.
"""

from __future__ import annotations

from datetime import datetime

from qtg.db import sql_family
from qtg.services.auditing import record_audit
from qtg.services.context import ServiceContext

SQL = sql_family("expiration", "expire_due", "next_due")

ACTOR = "system:expiration_checker"


async def expire_pending_requests(ctx: ServiceContext) -> int:
    """The expiration_checker pass: expire what is due, audit each, return how many."""
    async with ctx.db.transaction() as tx:
        expired = await tx.fetch(
            SQL.expire_due,
            {
                "limit": ctx.settings.expiration_batch_size,
                "actor": ACTOR,
                "network_class": ctx.settings.network_class,
            },
        )
        for row in expired:
            await record_audit(
                tx,
                actor=ACTOR,
                action="movement.expired",
                object_type="movement",
                object_id=row["id"],
                detail={"expires_at": row["expires_at"].isoformat()},
            )
    return len(expired)


async def next_due(ctx: ServiceContext) -> datetime | None:
    """The earliest expires_at among PENDING_APPROVAL requests."""
    # timestamptz or NULL
    value: datetime | None = await ctx.db.fetchval(
        SQL.next_due, {"network_class": ctx.settings.network_class}
    )
    return value
