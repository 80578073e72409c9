"""Errors an application operation raises on purpose.

Each carries a stable `code`, a human `message` and a `detail` dict, and
maps to one HTTP status, so the API turns them into
`{"error": {"code", "message", "detail"}}` without knowing any operation.
"""

from __future__ import annotations

import uuid
from typing import Any


class ServiceError(Exception):
    status = 400
    code = "BAD_REQUEST"

    def __init__(
        self, message: str, *, code: str | None = None, detail: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.detail = detail or {}


class InvalidInput(ServiceError):
    """The input is well-formed JSON but not acceptable (names the field in detail)."""

    status = 422
    code = "INVALID_INPUT"


class NotFound(ServiceError):
    status = 404
    code = "NOT_FOUND"


class Forbidden(ServiceError):
    """Authenticated, but this principal may not do this (e.g. four-eyes)."""

    status = 403
    code = "FORBIDDEN"


class Conflict(ServiceError):
    """The object's current state does not allow this; detail carries current_state."""

    status = 409
    code = "CONFLICT"


class IdempotencyConflict(Conflict):
    code = "IDEMPOTENCY_KEY_REUSED"


def uuid_or_not_found(value: object, *, what: str, key: str) -> uuid.UUID:
    """`value` as a UUID; anything that is not one names no object: NotFound."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise NotFound(f"{what} {value!r} not found", detail={key: str(value)}) from None
