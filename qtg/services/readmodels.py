"""Read-only views the API serves that no other service owns.

Workers with a stale flag, executors, a page of the audit log, and the raw
reads the event stream is built from (qtg/api/feed.py explains why those
look the way they do). Nothing here changes a row a worker or an operator
would see, except that `xact_bound` gives its own short transaction an xid.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from qtg.db import Database, sql_family

SQL = sql_family(
    "readmodels",
    "list_workers",
    "list_executors",
    "audit_events_page",
    "last_event_id",
    "xact_bound",
    "snapshot_xmin",
    "events_page",
)

#: Seconds on top of three intervals before a silent worker is called stale.
STALE_GRACE_SECONDS = 10.0


async def list_workers(db: Database, *, network_class: str) -> list[dict[str, Any]]:
    return await db.fetch(
        SQL.list_workers, {"network_class": network_class, "grace_seconds": STALE_GRACE_SECONDS}
    )


async def list_executors(db: Database) -> list[dict[str, Any]]:
    return await db.fetch(SQL.list_executors)


async def audit_events_page(
    db: Database,
    *,
    before_id: int | None = None,
    object_type: str | None = None,
    object_id: str | None = None,
    actor: str | None = None,
    action: str | None = None,
    limit: int = 50,
) -> tuple[list[dict[str, Any]], int | None]:
    """Newest first; returns the page and the id to pass as `before_id` next (or None)."""
    rows = await db.fetch(
        SQL.audit_events_page,
        {
            "before_id": before_id,
            "object_type": object_type,
            "object_id": object_id,
            "actor": actor,
            "action": action,
            "limit": limit + 1,
        },
    )
    next_before = rows[limit - 1]["id"] if len(rows) > limit else None
    return rows[:limit], next_before


# ------------------------------------------------------------ the event stream


async def probe_event_horizon(db: Database, *, known: int) -> tuple[int, int | None]:
    """(last event id handed out, an xid bound), the bound only if the id moved past `known`.

    Both in one transaction, in this order: the id is read *before* the xid
    is assigned, which is what makes the bound cover every transaction that
    holds an id up to it. The transaction commits at once, so its own xid
    does not hold anyone back.
    """
    async with db.transaction() as tx:
        last_id = int(await tx.fetchval(SQL.last_event_id))
        if last_id <= known:
            return last_id, None
        bound = int(await tx.fetchval(SQL.xact_bound))
    return last_id, bound


async def snapshot_xmin(db: Database) -> int:
    return int(await db.fetchval(SQL.snapshot_xmin))


async def events_page(
    db: Database,
    *,
    after: int,
    upto: int,
    request_id: uuid.UUID | None = None,
    types: Sequence[str] | None = None,
    limit: int = 500,
) -> list[dict[str, Any]]:
    return await db.fetch(
        SQL.events_page,
        {
            "after": after,
            "upto": upto,
            "request_id": request_id,
            "types": list(types) if types is not None else None,
            "limit": limit,
        },
    )
