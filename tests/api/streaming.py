"""Helpers for stream tests: write events, open real WebSocket clients, collect messages."""

from __future__ import annotations

import contextlib
import json
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlencode

import trio
import trio_websocket

from qtg.db import Database, Query

from .conftest import Api, make_movement, make_template

INSERT_EVENTS = Query(
    "t/insert_events",
    "INSERT INTO movement_events (request_id, event_type, payload) "
    "SELECT %(request_id)s, 'test_event', "
    "       jsonb_build_object('n', g, 'pad', repeat('x', %(pad)s)) "
    "FROM generate_series(1, %(count)s) g RETURNING id",
)
EVENT_IDS = Query(
    "t/event_ids",
    "SELECT id FROM movement_events WHERE request_id = %(request_id)s AND id > %(after)s "
    "ORDER BY id",
)
ALL_EVENT_IDS = Query("t/all_event_ids", "SELECT id FROM movement_events ORDER BY id")


async def a_request(api: Api) -> uuid.UUID:
    """A movement to hang test events on (its own request_created event included)."""
    with contextlib.suppress(AssertionError):  # already there
        await make_template(api, "t.stream")
    return uuid.UUID((await make_movement(api, "t.stream"))["id"])


async def write_events(
    db: Database, request_id: uuid.UUID, count: int, *, pad: int = 0
) -> list[int]:
    rows = await db.fetch(INSERT_EVENTS, {"request_id": request_id, "count": count, "pad": pad})
    return [r["id"] for r in rows]


async def event_ids(db: Database, request_id: uuid.UUID, after: int = 0) -> list[int]:
    return [r["id"] for r in await db.fetch(EVENT_IDS, {"request_id": request_id, "after": after})]


def stream_url(api: Api, **params: Any) -> str:
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return f"{api.server.ws_url}/v3/stream" + (f"?{query}" if query else "")


@asynccontextmanager
async def stream(
    api: Api, who: str = "vic", *, header: bool = True, **params: Any
) -> AsyncIterator[trio_websocket.WebSocketConnection]:
    headers = [(b"authorization", f"Bearer {api.tokens[who]}".encode())] if header else []
    async with trio_websocket.open_websocket_url(
        stream_url(api, **params), extra_headers=headers, disconnect_timeout=2
    ) as ws:
        yield ws


async def next_event(ws: trio_websocket.WebSocketConnection) -> dict[str, Any]:
    """The next event message (pings skipped)."""
    while True:
        message = json.loads(await ws.get_message())
        if message["type"] == "event":
            return message


async def collect(
    ws: trio_websocket.WebSocketConnection, until: int, *, seen: list[int] | None = None
) -> list[int]:
    """Event ids received until one with id >= `until` arrives."""
    got = [] if seen is None else seen
    while not got or got[-1] < until:
        got.append((await next_event(ws))["id"])
    return got


@asynccontextmanager
async def slow_client(
    api: Api, nursery: trio.Nursery, **params: Any
) -> AsyncIterator[trio_websocket.WebSocketConnection]:
    """A client with a tiny receive buffer that reads only when told to.

    trio-websocket reads ahead at most one message; with SO_RCVBUF tiny the
    server's socket fills after a few kilobytes, as with a stalled consumer.
    """
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    await sock.connect(("127.0.0.1", api.server.port))
    stream_ = trio.SocketStream(sock)
    query = urlencode({k: v for k, v in params.items() if v is not None})
    ws = await trio_websocket.wrap_client_stream(
        nursery,
        stream_,
        "127.0.0.1",
        f"/v3/stream?{query}",
        extra_headers=[(b"authorization", f"Bearer {api.tokens['vic']}".encode())],
        receive_buffer_size=1024,
    )
    try:
        yield ws
    finally:
        with trio.move_on_after(2):
            await ws.aclose()


async def until(condition: Callable[[], bool], *, deadline: float = 10.0) -> None:
    """Poll in-process state `condition()` until true; fail after `deadline` seconds."""
    with trio.fail_after(deadline):
        while not condition():  # noqa: ASYNC110 - plain attributes, no event to wait on
            await trio.sleep(0.005)
