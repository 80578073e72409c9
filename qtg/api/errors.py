"""Every error the API returns: `{"error": {"code", "message", "detail"}}`.

One function, `error_response`, turns whatever went wrong into that shape:
our own `ApiError`s (auth, malformed input), the operations' `ServiceError`s
(mapped generically by their status/code/message/detail, so the API knows no
operation's rules), `PlanError`s (422 naming the graph path), pydantic
`ValidationError`s (422 naming each field), and, as a last resort, anything
unexpected: a 500 carrying only an opaque error id, with the traceback in the
log under that id. Bad input must never get that far; `internal_errors`
counts how often it happens so that tests can prove it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import psycopg
from pydantic import ValidationError
from starlette.responses import Response

from qtg.db import PoolTimeout
from qtg.domain.plan import PlanError
from qtg.services.errors import ServiceError

log = logging.getLogger("qtg.api")

#: SQLSTATE raised by the state-transition guard triggers (migrations/0002).
ILLEGAL_TRANSITION_SQLSTATE = "QT001"


class ApiError(Exception):
    """An error the API raises itself (auth, malformed input, headers)."""

    def __init__(
        self, status: int, code: str, message: str, detail: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.detail = dict(detail or {})


class Counters:
    """What the error mapping has seen (read by tests and /readyz diagnostics)."""

    def __init__(self) -> None:
        self.internal_errors = 0
        self.data_errors = 0


COUNTERS = Counters()


def json_response(
    body: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        msgspec.json.encode(body),
        status_code=status,
        media_type="application/json",
        headers=dict(headers or {}),
    )


def error_body(code: str, message: str, detail: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "detail": dict(detail or {})}}


def error_response(exc: BaseException, *, where: str = "") -> Response:
    status, code, message, detail = describe(exc, where=where)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return json_response(error_body(code, message, detail), status, headers)


def describe(exc: BaseException, *, where: str = "") -> tuple[int, str, str, dict[str, Any]]:
    """(status, code, message, detail) for any exception."""
    if isinstance(exc, ApiError):
        return exc.status, exc.code, exc.message, exc.detail
    if isinstance(exc, ServiceError):
        return exc.status, exc.code, exc.message, dict(exc.detail)
    if isinstance(exc, PlanError):
        field = f"graph.{exc.path}" if exc.path != "graph" else "graph"
        return 422, "INVALID_PLAN", f"{field}: {exc.message}", {"field": field, "reason": exc.code}
    if isinstance(exc, ValidationError):
        return validation_error(exc.errors(include_url=False, include_input=False), "body")
    if isinstance(exc, psycopg.Error):
        return _database_error(exc, where)
    return _internal(exc, where)


def validation_error(
    errors: Sequence[Mapping[str, Any]], location: str
) -> tuple[int, str, str, dict[str, Any]]:
    """422 naming every failing field (`intent.amount`, `limit`, …)."""
    items = []
    for err in errors:
        field = dotted(err.get("loc", ()))
        items.append(
            {
                "field": field or location,
                "location": location,
                "message": str(err.get("msg", "invalid")),
                "type": str(err.get("type", "invalid")),
            }
        )
    first = items[0] if items else {"field": location, "message": "invalid"}
    message = f"{first['field']}: {first['message']}"
    if len(items) > 1:
        message += f" (and {len(items) - 1} more)"
    return 422, "VALIDATION_FAILED", message, {"field": first["field"], "errors": items}


def dotted(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _database_error(exc: psycopg.Error, where: str) -> tuple[int, str, str, dict[str, Any]]:
    sqlstate = getattr(exc, "sqlstate", None) or ""
    if sqlstate == ILLEGAL_TRANSITION_SQLSTATE:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "illegal transition"
        return 409, "ILLEGAL_TRANSITION", first, {}
    if sqlstate.startswith("22"):
        # Data exception (a value PostgreSQL cannot hold). Validation at the
        # edge should have refused it; say 422 rather than 500, and count it.
        COUNTERS.data_errors += 1
        log.warning("database refused a value the API let through", extra={"where": where})
        return 422, "INVALID_VALUE", "a value in the request cannot be stored", {}
    if isinstance(exc, PoolTimeout):  # the API's own pool is exhausted: a flood, not an outage
        return 503, "DATABASE_BUSY", "no database connection is free for the API; retry shortly", {}
    if isinstance(exc, psycopg.OperationalError | psycopg.errors.QueryCanceled):
        # includes qtg.db.PoolTimeout (an OperationalError): answered at once
        return 503, "DATABASE_UNAVAILABLE", "the database is not reachable right now", {}
    return _internal(exc, where)


def _internal(exc: BaseException, where: str) -> tuple[int, str, str, dict[str, Any]]:
    COUNTERS.internal_errors += 1
    error_id = uuid.uuid4().hex[:16]
    log.error(
        "unexpected error %s in %s",
        error_id,
        where or "request",
        exc_info=exc,
        extra={"error_id": error_id},
    )
    return (
        500,
        "INTERNAL",
        "internal error; quote the error id to an operator",
        {"error_id": error_id},
    )
