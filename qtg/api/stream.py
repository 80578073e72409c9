"""`WS /v3/stream`: movement events, backlog first, then live, resumable by event id.

Query: `after=<event id>` (the last id the client received; absent: live
events only), `request_id=<uuid>`, `types=a,b` (event types), and `token=`
for clients that cannot set an `Authorization` header. Role: viewer.

A browser can set neither headers on a WebSocket nor keep a query string out
of history and logs, so the token may also come as a subprotocol: offer
`Sec-WebSocket-Protocol: qtg.v3, qtg.token.<token>` (in JavaScript,
`new WebSocket(url, ["qtg.v3", "qtg.token." + token])`). The server selects
`qtg.v3` and never echoes the token back. A `qtg.token.` offer without
`qtg.v3` is refused (422), since the browser would fail a handshake whose
answer names no protocol it offered. The operator console authenticates
this way (qtg/console/api.js).

Messages (JSON text):
- `{"type": "event", "id", "request_id", "node_key", "event_type",
  "from_state", "to_state", "data", "occurred_at"}` in id order, with no gap
  and no duplicate (qtg/api/feed.py proves it);
- `{"type": "ping", "after": N}` every MG_STREAM_PING_INTERVAL_SECONDS while
  idle: every matching event with id <= N has been sent, so N is a safe
  `after` even for a filtered stream that has seen no event for a while.

Refusals happen before the WebSocket is accepted, as an HTTP response with
the usual error body (401/403/422). After acceptance the server closes with:
- 4008 "slow consumer; resume with after=N": the client fell more than
  MG_STREAM_CLIENT_BUFFER events behind. Everything before the close was
  delivered; reconnecting with `after=N` loses nothing.
- 1001 "server shutting down; resume with after=N";
- 1013 "database unavailable; resume with after=N".

A client that stops reading altogether cannot be told anything: its socket
is full. The feed drops its subscription at once (so it holds no events),
and the connection ends when the client reads or goes away.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import psycopg
import trio
from pydantic import ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from qtg.db import Database
from qtg.services import readmodels
from qtg.services.tokens import Role

from . import schemas as s
from .auth import authenticate
from .errors import ApiError, describe, error_body, json_response, validation_error
from .feed import EventFeed
from .routing import check_text

log = logging.getLogger("qtg.api.stream")

#: The subprotocol the server selects, and the prefix of the one carrying a token.
PROTOCOL = "qtg.v3"
TOKEN_PROTOCOL_PREFIX = "qtg.token."

SLOW_CONSUMER = 4008
GOING_AWAY = 1001
TRY_AGAIN_LATER = 1013
_EVENT_TYPE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class StreamSettings:
    def __init__(self, *, ping_interval_seconds: float) -> None:
        self.ping_interval_seconds = ping_interval_seconds


async def stream_endpoint(websocket: WebSocket) -> None:
    app_state = websocket.app.state
    feed: EventFeed = app_state.feed
    try:
        params = _parse(websocket)
        offered, protocol_token = protocol_offer(websocket.scope.get("subprotocols") or [])
        await authenticate(
            app_state.ctx.db,
            websocket.headers,
            Role.viewer,
            query_token=protocol_token or params.token,
        )
    except Exception as exc:
        await _refuse(websocket, exc)
        return
    if not feed.ready.is_set():
        await _refuse(websocket, ApiError(503, "NOT_READY", "the event stream is starting"))
        return
    try:
        await _check_after(app_state.ctx.db, feed, params.after)
    except Exception as exc:
        await _refuse(websocket, exc)
        return
    await websocket.accept(subprotocol=PROTOCOL if offered else None)
    clients = app_state.metrics.stream_clients
    clients.inc()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_disconnect, websocket, nursery.cancel_scope)
            await _serve(websocket, feed, params, app_state.stream_settings)
            nursery.cancel_scope.cancel()
    except (WebSocketDisconnect, OSError, trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the client went away; nothing to tell it
    finally:
        clients.dec()


def protocol_offer(subprotocols: list[str]) -> tuple[bool, str | None]:
    """Whether `qtg.v3` was offered, and the token a `qtg.token.<token>` offer carries.

    Any other offered protocol is ignored (not selected). Two token offers are
    refused: which one is meant would be a guess.
    """
    tokens = [
        p[len(TOKEN_PROTOCOL_PREFIX) :] for p in subprotocols if p.startswith(TOKEN_PROTOCOL_PREFIX)
    ]
    offered = PROTOCOL in subprotocols
    if len(tokens) > 1:
        raise ApiError(
            422,
            "VALIDATION_FAILED",
            "Sec-WebSocket-Protocol: more than one qtg.token. protocol",
            {"field": "Sec-WebSocket-Protocol"},
        )
    if tokens and not offered:
        raise ApiError(
            422,
            "VALIDATION_FAILED",
            f"Sec-WebSocket-Protocol: a {TOKEN_PROTOCOL_PREFIX} protocol needs {PROTOCOL} "
            "offered beside it (the one the server selects)",
            {"field": "Sec-WebSocket-Protocol"},
        )
    token = tokens[0] if tokens else None
    return offered, token or None


def _parse(websocket: WebSocket) -> s.StreamQuery:
    values: dict[str, Any] = {}
    for key, value in websocket.query_params.multi_items():
        if key in values:
            raise ApiError(422, "VALIDATION_FAILED", f"{key}: given more than once", {"field": key})
        values[key] = value
    try:
        params = s.StreamQuery.model_validate(values)
    except ValidationError as exc:
        status, code, message, detail = validation_error(
            exc.errors(include_url=False, include_input=False), "query"
        )
        raise ApiError(status, code, message, detail) from None
    check_text(params.model_dump(), "query")
    for event_type in params.type_set() or ():
        if not _EVENT_TYPE.match(event_type):
            raise ApiError(
                422,
                "VALIDATION_FAILED",
                f"types: {event_type!r} is not an event type name",
                {"field": "types"},
            )
    return params


async def _check_after(db: Database, feed: EventFeed, after: int | None) -> None:
    """Refuse an `after` beyond the last event id ever handed out.

    Such an id was never sent to anyone (a typo, or 2^63-1 as "only new
    events"); accepting it would deliver nothing, silently, until the ids
    caught up. The feed's position is checked first, so a normal resume costs
    no query; the sequence decides only for ids beyond it (another API
    process's feed may be a little ahead of this one's).
    """
    if after is None or after <= feed.position:
        return
    last = await readmodels.last_event_id(db)
    if after > last:
        raise ApiError(
            422,
            "VALIDATION_FAILED",
            f"after: {after} is beyond the last event id ({last}); resume with an id "
            "this stream sent, or leave after out for live events only",
            {"field": "after", "last_event_id": last},
        )


async def _refuse(websocket: WebSocket, exc: BaseException) -> None:
    """An HTTP error response instead of the upgrade (ASGI websocket.http.response)."""
    status, code, message, detail = describe(exc, where="WS /v3/stream")
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    response = json_response(error_body(code, message, detail), status, headers)
    try:
        await websocket.send_denial_response(response)
    except RuntimeError:  # the server does not support denial responses
        await websocket.close(code=1008, reason=message[:120])


async def _watch_disconnect(websocket: WebSocket, scope: trio.CancelScope) -> None:
    """Read (and ignore) client messages; a disconnect ends the whole connection."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            scope.cancel()
            return


async def _serve(
    websocket: WebSocket, feed: EventFeed, params: s.StreamQuery, settings: StreamSettings
) -> None:
    types = params.type_set()
    sub = feed.subscribe(request_id=params.request_id, types=types)
    last = sub.start if params.after is None else params.after
    try:
        # Backlog: everything in (last, sub.start] from the table. If live
        # events overflow the queue meanwhile (a long backlog while events
        # pour in), subscribe again and keep reading the table: the client is
        # reading, just far behind.
        while True:
            while True:
                page = await feed.backlog_page(
                    after=last, upto=sub.start, request_id=params.request_id, types=types
                )
                for event in page:
                    await websocket.send_text(event.message)
                    last = event.id
                if len(page) < feed.page_size:
                    break
            if not sub.overflowed:
                break
            sub = feed.subscribe(request_id=params.request_id, types=types)
        # Live.
        while True:
            with trio.move_on_after(settings.ping_interval_seconds) as idle:
                try:
                    event = await sub.events.receive()
                except trio.EndOfChannel:
                    break
            if idle.cancelled_caught:
                # The feed's position is safe to announce only when nothing it
                # already queued for this client is still waiting to be sent.
                queued = sub.events.statistics().current_buffer_used
                await websocket.send_text(_ping(last if queued else max(last, feed.position)))
                continue
            if event.id <= last:
                continue  # already sent from the backlog
            await websocket.send_text(event.message)
            last = event.id
        if sub.overflowed:
            log.info("stream client too slow; closing", extra={"after": last})
            await websocket.close(SLOW_CONSUMER, f"slow consumer; resume with after={last}")
        else:
            await websocket.close(GOING_AWAY, f"server shutting down; resume with after={last}")
    except psycopg.Error:
        log.warning("stream backlog read failed; closing", extra={"after": last})
        await websocket.close(TRY_AGAIN_LATER, f"database unavailable; resume with after={last}")
    finally:
        sub.close()


def _ping(after: int) -> str:
    return f'{{"type":"ping","after":{int(after)}}}'
