"""A real HTTP callback receiver on loopback, for tests.

It speaks HTTP/1.1 over trio sockets (parsed by h11), records every request,
and checks each v3 signature *with its own code* (hashlib + hmac, nothing from
qtg), so a bug in qtg's signing cannot hide behind the same bug here. A path
can be told to answer any status, or to hang: accept the request and never
answer, like a receiver whose process is stuck.

    receiver = Receiver(secret=b"s3cret")
    await nursery.start(receiver.serve)
    receiver.behave("/down", 500)
    receiver.behave("/stuck", HANG)
    url = receiver.url("/ok")
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from functools import partial
from typing import Any

import h11
import trio

HANG = "hang"


def signature_valid(secret: bytes, headers: dict[str, str], body: bytes) -> bool:
    """The v3 check a receiver makes (lower-case header names), written without qtg."""
    if headers.get("x-qtg-callback-signature-version") != "v3":
        return False
    message = "{}\n{}\n{}".format(
        headers.get("x-qtg-callback-timestamp", ""),
        headers.get("x-qtg-callback-nonce", ""),
        hashlib.sha256(body).hexdigest(),
    ).encode()
    expected = hmac.new(secret, message, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, headers.get("x-qtg-callback-signature", ""))


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    at: float  # trio.current_time() when the request was complete
    signature_ok: bool

    @property
    def timestamp(self) -> str:
        return self.headers.get("x-qtg-callback-timestamp", "")

    @property
    def nonce(self) -> str:
        return self.headers.get("x-qtg-callback-nonce", "")

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self.requests: list[Received] = []
        self.port: int | None = None
        self._behaviour: dict[str, int | str | bytes] = {}
        self._changed = trio.Event()

    def behave(self, path: str, behaviour: int | str | bytes) -> None:
        """Answer `path` with this status code, or HANG, or 200 with these bytes (default 200)."""
        self._behaviour[path] = behaviour

    def url(self, path: str) -> str:
        assert self.port is not None, "receiver not serving yet"
        return f"http://127.0.0.1:{self.port}{path}"

    def on(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path == path]

    async def wait_for(self, path: str, count: int = 1) -> list[Received]:
        """Wait until `path` has received at least `count` requests (use under fail_after)."""
        while len(self.on(path)) < count:
            await self._changed.wait()
        return self.on(path)

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                partial(trio.serve_tcp, self._handle, 0, host="127.0.0.1")
            )
            self.port = listeners[0].socket.getsockname()[1]
            task_status.started(self)

    # ---------------------------------------------------------------- internals

    def _verify(self, headers: dict[str, str], body: bytes) -> bool:
        return signature_valid(self.secret, headers, body)

    def _record(self, received: Received) -> None:
        self.requests.append(received)
        self._changed.set()
        self._changed = trio.Event()

    async def _handle(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request: h11.Request | None = None
                body = b""
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        data = await stream.receive_some(65536)
                        conn.receive_data(data)
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
                headers = {k.decode().lower(): v.decode() for k, v in request.headers}
                path = request.target.decode()
                self._record(
                    Received(path, headers, body, trio.current_time(), self._verify(headers, body))
                )
                behaviour = self._behaviour.get(path, 200)
                if behaviour == HANG:
                    await stream.receive_some(1)  # returns when the client gives up
                    return
                answer = b'{"ok": true}'
                if isinstance(behaviour, bytes):
                    answer, behaviour = behaviour, 200
                await stream.send_all(
                    conn.send(
                        h11.Response(
                            status_code=int(behaviour),
                            headers=[
                                ("content-type", "application/json"),
                                ("content-length", str(len(answer))),
                            ],
                        )
                    )
                    + conn.send(h11.Data(data=answer))
                    + conn.send(h11.EndOfMessage())
                )
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (h11.RemoteProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            await stream.aclose()
