"""A real JSON HTTP server on loopback that plays a venue (Circle Gateway, an exchange).

h11 over trio sockets, like tests/receiver.py. Each route (method, path) has a
handler returning `(status, json_body)`, or HANG to accept the request and
never answer (a stuck venue). Every request is recorded with its query and
body, so a test can check what qtg asked for.

    server = VenueServer()
    server.route("POST", "/v1/balances", lambda req: (200, {...}))
    await nursery.start(server.serve)
    server.url  # http://127.0.0.1:<port>
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

import h11
import trio

HANG = "hang"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


Handler = Callable[[Request], "tuple[int, Any] | str"]


class VenueServer:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.port: int | None = None
        self._routes: dict[tuple[str, str], Handler] = {}

    def route(self, method: str, path: str, handler: Handler) -> None:
        self._routes[(method, path)] = handler

    @property
    def url(self) -> str:
        assert self.port is not None, "server not serving yet"
        return f"http://127.0.0.1:{self.port}"

    def on(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.path == path]

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                partial(trio.serve_tcp, self._handle, 0, host="127.0.0.1")
            )
            self.port = listeners[0].socket.getsockname()[1]
            task_status.started(self)

    async def _handle(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request: h11.Request | None = None
                body = b""
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        conn.receive_data(await stream.receive_some(65536))
                        continue
                    if isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.Data):
                        body += event.data
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    elif isinstance(event, h11.ConnectionClosed):
                        return
                assert request is not None
                target = urlsplit(request.target.decode())
                received = Request(
                    method=request.method.decode(),
                    path=target.path,
                    query={k: v[-1] for k, v in parse_qs(target.query).items()},
                    headers={k.decode().lower(): v.decode() for k, v in request.headers},
                    body=body,
                )
                self.requests.append(received)
                handler = self._routes.get((received.method, received.path))
                answer = handler(received) if handler else (404, {"error": "no such route"})
                if answer == HANG:
                    await stream.receive_some(1)  # returns when the client gives up
                    return
                status, payload = answer
                data = json.dumps(payload).encode()
                await stream.send_all(
                    conn.send(
                        h11.Response(
                            status_code=status,
                            headers=[
                                ("content-type", "application/json"),
                                ("content-length", str(len(data))),
                            ],
                        )
                    )
                    + conn.send(h11.Data(data=data))
                    + conn.send(h11.EndOfMessage())
                )
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (h11.RemoteProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            await stream.aclose()
