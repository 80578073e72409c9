"""Notifications: what needed a person, and an operator saying it is handled."""

from __future__ import annotations

from typing import Any

from qtg.api import schemas as s
from qtg.api.routing import Call, Endpoint, decode_cursor, encode_cursor
from qtg.services import notifications
from qtg.services.tokens import Role


async def list_notifications(call: Call) -> Any:
    q: s.NotificationListQuery = call.query
    rows, next_cursor = await notifications.list_notifications(
        call.ctx.db, open_only=q.open, kind=q.kind, cursor=decode_cursor(q.cursor), limit=q.limit
    )
    return {"items": rows, "next_cursor": encode_cursor(next_cursor)}


async def resolve_notification(call: Call) -> Any:
    return await notifications.resolve_notification_by_id(
        call.ctx.db, call.path.notification_id, actor=call.actor
    )


ENDPOINTS = [
    Endpoint(
        "GET",
        "/v3/notifications",
        list_notifications,
        "List notifications, newest first",
        "notifications",
        s.NotificationPage,
        query_model=s.NotificationListQuery,
    ),
    Endpoint(
        "POST",
        "/v3/notifications/{notification_id}/resolve",
        resolve_notification,
        "Mark a notification handled: the same condition pages again next time",
        "notifications",
        s.Notification,
        role=Role.operator,
        path_model=s.NotificationPath,
        body_model=s.Empty,
        body_required=False,
        errors=(404,),
    ),
]
