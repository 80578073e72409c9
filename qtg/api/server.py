"""Serving the API: Hypercorn's trio worker inside the caller's nursery.

`serve_api` runs the event feed and the HTTP server side by side and reports
where it listens through `task_status.started(...)` (port 0 asks the OS for a
free port; tests use that). It runs until cancelled, or until `shutdown` is
set, which lets Hypercorn finish in-flight requests first (graceful_timeout).
Hypercorn's access log stays off: request lines would carry `?token=` for
stream clients that cannot send headers.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import Any

import msgspec
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from qtg.config import Settings
from qtg.db import ListenHub
from qtg.services.context import ServiceContext
from qtg.services.metrics import RuntimeMetrics

from .app import create_app
from .errors import error_body
from .feed import EventFeed

log = logging.getLogger("qtg.api")

GRACEFUL_SECONDS = 3.0


@dataclass(frozen=True, slots=True)
class ApiServer:
    """Where a running API listens."""

    host: str
    port: int
    app: Any

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return "ws" + self.url[len("http") :]


#: The largest message a WebSocket client may send (the stream ignores them all).
WEBSOCKET_MAX_MESSAGE_BYTES = 64 * 1024


def hypercorn_config(settings: Settings) -> Config:
    """Hypercorn's settings: bound read and keep-alive waits, so that a client
    that promises a body (or headers) and never sends it cannot hold a socket."""
    host, port = settings.api_host, settings.api_port
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.read_timeout = settings.api_read_timeout_seconds  # type: ignore[assignment]
    config.keep_alive_timeout = settings.api_keep_alive_timeout_seconds
    config.h11_max_incomplete_size = settings.api_max_header_bytes
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = GRACEFUL_SECONDS
    config.include_server_header = False
    # The event stream reads nothing from its clients (they only listen): a
    # client message larger than this closes the connection (1009) before
    # anything buffers it, let alone parses it.
    config.websocket_max_message_size = WEBSOCKET_MAX_MESSAGE_BYTES
    # Hypercorn listens again on the launcher's socket with this backlog (its default,
    # 100): a burst of 1,000 connections overflowed it and clients were reset without a
    # reply (issue 44). The kernel caps it at net.core.somaxconn.
    config.backlog = socket.SOMAXCONN
    return config


async def serve_api(
    ctx: ServiceContext,
    hub: ListenHub,
    settings: Settings,
    *,
    shutdown: trio.Event | None = None,
    sock: socket.socket | None = None,
    metrics: RuntimeMetrics | None = None,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the API on MG_API_HOST:MG_API_PORT until cancelled (or `shutdown` is set).

    `sock`, when given, is an already bound listening socket (the launcher
    binds before touching the database); Hypercorn serves a duplicate of it.
    """
    app = create_app(ctx, hub, metrics)
    feed: EventFeed = app.state.feed
    config = hypercorn_config(settings)
    if sock is not None:
        config.bind = [f"fd://{os.dup(sock.fileno())}"]
    app.state.hypercorn_config = config
    stop = shutdown or trio.Event()

    async def shutdown_trigger() -> None:
        await stop.wait()
        feed.close_subscribers()  # stream clients get 1001 with their resume id

    async with trio.open_nursery() as nursery:
        await nursery.start(feed.run)
        async with trio.open_nursery() as http:
            binds: list[str] = await http.start(
                lambda task_status: serve(
                    HeaderLimit(CloseAfterRefusedBody(app), settings.api_max_header_bytes),
                    config,
                    shutdown_trigger=shutdown_trigger,
                    task_status=task_status,
                )
            )
            host, port = _bound(binds[0])
            server = ApiServer(host=host, port=port, app=app)
            log.info(
                "API listening", extra={"url": server.url, "console": f"{server.url}/console/"}
            )
            task_status.started(server)
        # Hypercorn has finished its graceful shutdown: stop the feed too.
        nursery.cancel_scope.cancel()
    log.info("API stopped")


async def serve_metrics_only(
    ctx: ServiceContext,
    metrics: RuntimeMetrics,
    settings: Settings,
    port: int,
    *,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve GET /metrics alone on MG_API_HOST:`port` (a --workers-only process)."""
    from .routes.metrics import metrics_only_app

    config = hypercorn_config(settings)
    config.bind = [f"{settings.api_host}:{port}"]
    app = metrics_only_app(ctx, metrics)
    async with trio.open_nursery() as http:
        binds: list[str] = await http.start(
            lambda task_status: serve(
                HeaderLimit(app, settings.api_max_header_bytes), config, task_status=task_status
            )
        )
        host, bound = _bound(binds[0])
        url = ApiServer(host=host, port=bound, app=app).url
        log.info("metrics listening", extra={"url": url})
        task_status.started(url)


def head_bytes(scope: Any) -> int:
    """About the size of the request head as sent: the target and every
    header line (`name: value` and its CRLF)."""
    size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
    for name, value in scope.get("headers") or ():
        size += len(name) + len(value) + 4
    return size


class HeaderLimit:
    """ASGI wrapper: a request head larger than MG_API_MAX_HEADER_BYTES gets 431.

    Hypercorn's `h11_max_incomplete_size` only bounds a head that is still
    incomplete in its buffer: a 60,000-byte header that arrives in one read
    (Hypercorn reads 64 KiB at a time) is parsed whole and reached the app
    with a 200 (issue 26). So the limit is checked here, on what was parsed,
    before any route (or authentication) runs. A WebSocket handshake that
    large is refused before it is accepted.
    """

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or head_bytes(scope) <= self.max_bytes:
            await self.app(scope, receive, send)
            return
        body = msgspec.json.encode(
            error_body(
                "HEADERS_TOO_LARGE",
                f"the request head is larger than {self.max_bytes} bytes",
                {"field": "headers", "max_bytes": self.max_bytes},
            )
        )
        start = {
            "status": 431,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
        if scope["type"] == "http":
            await send({"type": "http.response.start", **start})
            await send({"type": "http.response.body", "body": body})
        elif "websocket.http.response" in (scope.get("extensions") or {}):
            await send({"type": "websocket.http.response.start", **start})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1009})


class CloseAfterRefusedBody:
    """ASGI wrapper: a 413 really ends the connection, even while the client sends.

    The app answers 413 without reading the body. Hypercorn meanwhile feeds
    the body chunks it receives into the request's queue (10 entries); once
    full, its reader waits, and so does its close path, which queues an
    `http.disconnect` before closing the socket. Nothing then reads or closes:
    the socket stays open with the client blocked writing (this made
    tests/api/test_input.py::test_malformed_json_and_headers time out under
    load). So while a 413 is being sent, a helper empties that queue,
    discarding what Hypercorn already read; the close then goes through and
    nothing more of the body is read.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        async with trio.open_nursery() as nursery:

            async def guarded_send(message: Any) -> None:
                if message["type"] == "http.response.start" and message["status"] == 413:
                    nursery.start_soon(_discard_until_disconnect, receive)
                await send(message)

            await self.app(scope, receive, guarded_send)
            nursery.cancel_scope.cancel()


async def _discard_until_disconnect(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _bound(bind: str) -> tuple[str, int]:
    """('127.0.0.1', 8000) from Hypercorn's 'http://127.0.0.1:8000'."""
    address = bind.split("://", 1)[1]
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)
