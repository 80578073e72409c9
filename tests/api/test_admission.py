"""Admission control (issue 17): beyond MG_API_MAX_CONCURRENT_REQUESTS requests in
progress, the next is answered 503 at once, with the API's error body."""

from __future__ import annotations

import json
from typing import Any

import trio

from qtg.api.admission import Admission


async def _call(app: Any, path: str) -> tuple[int, dict[str, str], bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "headers": []}
    await app(scope, receive, send)
    start = sent[0]
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, b"".join(m.get("body", b"") for m in sent[1:])


async def test_requests_beyond_the_limit_are_refused_at_once_and_admitted_after() -> None:
    inside = trio.Event()
    release = trio.Event()
    entered = 0

    async def slow_app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal entered
        entered += 1
        inside.set()
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    app = Admission(slow_app, limit=1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_call, app, "/v3/movements")
        await inside.wait()
        with trio.fail_after(1):  # refused without waiting for the one inside
            status, headers, body = await _call(app, "/v3/movements")
        assert status == 503
        assert headers["retry-after"] == "1"
        assert json.loads(body)["error"]["code"] == "OVERLOADED"
        assert entered == 1 and app.refused == 1
        release.set()
    assert app.in_flight == 0
    status, _, body = await _call(app, "/v3/movements")  # admitted again
    assert (status, body) == (200, b"ok")


async def test_liveness_is_admitted_even_when_saturated() -> None:
    async def app_ok(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    app = Admission(app_ok, limit=1)
    app.in_flight = 1  # saturated
    assert (await _call(app, "/healthz"))[0] == 200
    assert (await _call(app, "/v3/workers"))[0] == 503
