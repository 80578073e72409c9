"""Worker heartbeats and the audit log."""

from __future__ import annotations

from typing import Any

from qtg.api import schemas as s
from qtg.api.errors import ApiError
from qtg.api.routing import Call, Endpoint, decode_cursor, encode_cursor
from qtg.services import readmodels


async def list_workers(call: Call) -> Any:
    network_class = call.query.network_class or call.ctx.settings.network_class
    return {
        "network_class": network_class,
        "items": await readmodels.list_workers(call.ctx.db, network_class=network_class),
        "next_cursor": None,
    }


async def list_audit_events(call: Call) -> Any:
    q: s.AuditQuery = call.query
    before = decode_cursor(q.cursor)
    if before is not None and not (before.isdigit() and len(before) <= 18):
        raise ApiError(
            422, "VALIDATION_FAILED", "cursor: not a cursor this API returned", {"field": "cursor"}
        )
    rows, next_before = await readmodels.audit_events_page(
        call.ctx.db,
        before_id=int(before) if before is not None else None,
        object_type=q.object_type,
        object_id=q.object_id,
        actor=q.actor,
        action=q.action,
        limit=q.limit,
    )
    return {"items": rows, "next_cursor": encode_cursor(next_before)}


ENDPOINTS = [
    Endpoint(
        "GET",
        "/v3/workers",
        list_workers,
        "Worker heartbeats of a network class, with stale flags",
        "operations",
        s.WorkerList,
        query_model=s.WorkerQuery,
    ),
    Endpoint(
        "GET",
        "/v3/audit-events",
        list_audit_events,
        "The audit log, newest first (filters, cursor pagination)",
        "operations",
        s.AuditPage,
        query_model=s.AuditQuery,
    ),
]
