"""Admission control: a bounded number of HTTP requests in progress at once.

A request beyond MG_API_MAX_CONCURRENT_REQUESTS is answered 503 with
`Retry-After` at once, before it authenticates or touches the database, so a
flood costs the process a parse and a short answer per request instead of a
queue that grows without bound (memory) and holds sockets open (CLOSE-WAIT).
Liveness (`/healthz`) is always admitted: it reads nothing, and a saturated
API is alive. WebSocket streams are long-lived and are not counted here.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import ApiError, error_response

ALWAYS_ADMITTED = frozenset({"/healthz"})
RETRY_AFTER_SECONDS = 1


class Admission:
    """ASGI middleware: at most `limit` HTTP requests inside the app at once."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0
        self.refused = 0  # since start; what a metrics page would show

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in ALWAYS_ADMITTED:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            self.refused += 1
            response = error_response(
                ApiError(
                    503,
                    "OVERLOADED",
                    "the API is at its limit of requests in progress; retry shortly",
                    {"limit": self.limit, "retry_after_seconds": RETRY_AFTER_SECONDS},
                )
            )
            response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
            await response(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
