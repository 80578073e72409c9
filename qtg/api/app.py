"""The Starlette application: the route table, the stream, and error handling.

`create_app(ctx, hub)` builds everything from the route table
(qtg/api/routes); `qtg.api.server.serve_api` runs it under Hypercorn together
with the event feed it needs. Errors never leave as Starlette's HTML: 404 and
405 from routing, and anything unexpected, become the API's error body.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

import trio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from qtg.db import ListenHub
from qtg.services.context import ServiceContext
from qtg.services.metrics import RuntimeMetrics

from .admission import Admission
from .console import console_routes
from .errors import ApiError, error_response, json_response
from .feed import EventFeed
from .openapi import build_openapi
from .routes import all_endpoints
from .routes.metrics import PATH as METRICS_PATH
from .routes.metrics import metrics_endpoint
from .routing import starlette_routes
from .stream import StreamSettings, stream_endpoint


def _version() -> str:
    try:
        return version("qtg")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0"


def create_app(
    ctx: ServiceContext, hub: ListenHub, metrics: RuntimeMetrics | None = None
) -> Starlette:
    """The app; `metrics` is the runtime's registry (a fresh one when the app stands alone)."""
    metrics = metrics or RuntimeMetrics()
    endpoints = all_endpoints()
    document = build_openapi(endpoints, title="qtg", version=_version())

    async def openapi(request: Request) -> Response:
        return json_response(document)

    routes: list[Any] = [
        *starlette_routes(endpoints, ctx, hub),
        Route("/openapi.json", openapi, methods=["GET"]),
        WebSocketRoute("/v3/stream", stream_endpoint),
        Route(METRICS_PATH, metrics_endpoint, methods=["GET"]),
        *console_routes(),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: _http_error},
        # Admission first: a refused request costs nothing further.
        middleware=[
            Middleware(RequestMetrics, metrics=metrics),
            Middleware(Admission, limit=ctx.settings.api_max_concurrent_requests),
            Middleware(LastResort),
        ],
    )
    settings = ctx.settings
    app.state.ctx = ctx
    app.state.hub = hub
    app.state.metrics = metrics
    app.state.openapi = document
    app.state.feed = EventFeed(
        ctx.db,
        hub,
        client_buffer=settings.stream_client_buffer,
        poll_seconds=settings.stream_poll_interval_seconds,
    )
    app.state.stream_settings = StreamSettings(
        ping_interval_seconds=settings.stream_ping_interval_seconds
    )
    return app


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    codes = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}
    message = {404: "no such route", 405: f"{request.method} is not allowed here"}.get(
        exc.status_code, str(exc.detail)
    )
    response = error_response(
        ApiError(
            exc.status_code,
            codes.get(exc.status_code, "HTTP_ERROR"),
            message,
            {"path": request.url.path},
        )
    )
    if exc.headers:
        response.headers.update(exc.headers)
    return response


class RequestMetrics:
    """ASGI middleware: count and time every HTTP request by route *template*.

    The label is the matched Starlette route's path (`/v3/movements/{id}`),
    read from `scope["route"]` after routing; an unmatched URL is labelled
    `<unmatched>`, so a scanner cannot grow the label set without bound.
    Outermost, so refusals by admission are counted too (as `<unrouted>`
    when routing never ran).
    """

    def __init__(self, app: ASGIApp, metrics: RuntimeMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # an exception before any answer
        started = trio.current_time()

        async def timing_send(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, timing_send)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None)
            if template is None:
                template = "<unmatched>" if "endpoint" in scope or status == 404 else "<unrouted>"
            method = scope.get("method", "")
            self.metrics.http_requests.labels(method, template, str(status)).inc()
            self.metrics.http_seconds.labels(method, template).observe(
                trio.current_time() - started
            )


class LastResort:
    """ASGI middleware: an exception no route handled becomes an opaque 500.

    Route handlers already map every error (qtg.api.routing); this catches
    what escapes the framework itself, logs it with an error id (never the
    request's headers), and answers if nothing was sent yet.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            response = error_response(exc, where=f"{scope.get('method')} {scope.get('path')}")
            if not started:
                await response(scope, receive, send)
