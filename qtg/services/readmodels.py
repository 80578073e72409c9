"""Read-only views the API serves that no other service owns.

Workers with a stale flag, template versions, a page of the audit log, and the raw
reads the event stream is built from (qtg/api/feed.py explains why those
look the way they do). Nothing here changes a row a worker or an operator
would see.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from qtg.db import Database, sql_family
from qtg.domain.workers import fold_workers

SQL = sql_family(
    "readmodels",
    "list_workers",
    "template_versions",
    "audit_events_page",
    "last_event_id",
    "event_writers",
    "events_page",
)

#: Seconds on top of three intervals before a silent worker is called stale.
STALE_GRACE_SECONDS = 10.0


async def list_workers(db: Database, *, network_class: str) -> list[dict[str, Any]]:
    """One entry per worker, folded from its processes' rows (qtg/domain/workers.py)."""
    rows = await db.fetch(
        SQL.list_workers, {"network_class": network_class, "grace_seconds": STALE_GRACE_SECONDS}
    )
    return fold_workers(rows)


async def template_versions(db: Database, template_key: str) -> list[dict[str, Any]] | None:
    """Every version of a template, newest first; None when the template does not exist."""
    rows = await db.fetch(SQL.template_versions, {"template_key": template_key})
    if not rows:
        return None
    return [r for r in rows if r["template_version_id"] is not None]


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


async def last_event_id(db: Database) -> int:
    """The highest event id handed out so far (0 before the first event)."""
    return int(await db.fetchval(SQL.last_event_id))


async def probe_event_horizon(db: Database) -> tuple[int, frozenset[str]]:
    """(last event id handed out, the event-writing transactions running now).

    Two statements, in this order: the id is read *before* the writers are
    listed, which is what makes the list cover every transaction that may
    still hold an id up to it (qtg/api/feed.py has the argument).
    """
    async with db.transaction() as tx:
        last_id = int(await tx.fetchval(SQL.last_event_id))
        writers = await tx.fetchval(SQL.event_writers)
    return last_id, frozenset(writers)


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
