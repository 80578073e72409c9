"""Slow and oversized clients cannot hold an API socket (issue 17 item 2).

Raw sockets on loopback, because an HTTP client library would send the body
it promised: the point is a client that never does.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
import trio

from .conftest import api_settings, start_api

READ_TIMEOUT = 1.0


@pytest.fixture
def stream_overrides() -> dict[str, Any]:
    return {"api_read_timeout_seconds": READ_TIMEOUT, "api_keep_alive_timeout_seconds": 1.0}


def _request(api: Any, content_length: int) -> bytes:
    return (
        b"POST /v3/movements HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Authorization: Bearer " + api.tokens["alice"].encode() + b"\r\n"
        b"Content-Type: application/json\r\nIdempotency-Key: k\r\n"
        b"Content-Length: " + str(content_length).encode() + b"\r\n\r\n"
    )


async def _read_until_closed(sock: trio.socket.SocketType, deadline: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the socket, and how long that took."""
    started = time.monotonic()
    received = b""
    with trio.fail_after(deadline):
        while True:
            try:
                chunk = await sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
    return received, time.monotonic() - started


async def _connect(api: Any) -> trio.socket.SocketType:
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    await sock.connect(("127.0.0.1", api.server.port))
    return sock


async def test_a_promised_body_that_never_comes_is_closed_within_the_read_timeout(
    api: Any,
) -> None:
    sock = await _connect(api)
    with sock:
        await sock.send(_request(api, 1000) + b"{")  # 1000 bytes promised, one sent
        received, waited = await _read_until_closed(sock, deadline=READ_TIMEOUT + 10)
    # Not before the timeout (the server waited for the body, as it should),
    # and not long after it.
    assert READ_TIMEOUT * 0.9 <= waited < READ_TIMEOUT + 5, waited
    assert b" 200 " not in received and b" 201 " not in received


async def test_an_idle_connection_is_closed_within_the_read_timeout(api: Any) -> None:
    sock = await _connect(api)
    with sock:
        await sock.send(b"GET /v3/health HTTP/1.1\r\nHost: 127.0")  # headers never finish
        _, waited = await _read_until_closed(sock, deadline=READ_TIMEOUT + 10)
    assert waited < READ_TIMEOUT + 5, waited


async def test_a_413_is_followed_by_close_without_reading_the_body(api: Any) -> None:
    sock = await _connect(api)
    with sock:
        await sock.send(_request(api, 50 * 1024 * 1024))  # 50 MB promised, none sent
        received, waited = await _read_until_closed(sock, deadline=READ_TIMEOUT + 10)
    head = received.split(b"\r\n\r\n", 1)[0].lower()
    assert head.startswith(b"http/1.1 413"), received[:200]
    assert b"connection: close" in head
    assert b"BODY_TOO_LARGE" in received
    # Closed right after the answer, not when the read timeout ends the wait.
    assert waited < READ_TIMEOUT, waited


async def test_a_413_closes_even_while_the_client_keeps_sending(api: Any) -> None:
    """The client writes its (too large) body regardless, as httpx does; the server
    must still answer and close, not wait with a full queue (issue 17 item 2)."""
    sock = await _connect(api)
    sent = 0
    with sock:
        await sock.send(_request(api, 50 * 1024 * 1024))

        async def pour() -> None:
            nonlocal sent
            chunk = b" " * 65536
            try:
                while sent < 50 * 1024 * 1024:
                    sent += await sock.send(chunk)
            except OSError:
                return  # the server closed: what this test waits for

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pour)
            received, waited = await _read_until_closed(sock, deadline=READ_TIMEOUT + 10)
            nursery.cancel_scope.cancel()
    assert received == b"" or received.lower().startswith(b"http/1.1 413"), received[:200]
    # closed promptly, long before 50 MB went through, and not by the read timeout
    assert waited < READ_TIMEOUT, waited
    assert sent < 50 * 1024 * 1024


async def test_timeouts_come_from_settings(dsn: str, db: Any, hub: Any, nursery: Any) -> None:
    settings = api_settings(dsn, api_read_timeout_seconds=7.5, api_keep_alive_timeout_seconds=3.0)
    server = await start_api(nursery, db, hub, settings)
    config = server.app.state.hypercorn_config
    assert config.read_timeout == 7.5
    assert config.keep_alive_timeout == 3.0
    assert config.h11_max_incomplete_size == settings.api_max_header_bytes


async def test_a_request_head_past_the_header_limit_gets_431(api: Any) -> None:
    """One 60,000-byte header, sent whole, got 200 (issue 26): Hypercorn's own
    limit only bounds a head still incomplete in its buffer. Real clients
    against the served app: httpx, and a raw socket writing it in one go."""
    limit = api.settings.api_max_header_bytes
    assert limit == 16 * 1024
    big = {"X-Padding": "a" * 60_000}
    for who, path in (("alice", "/v3/movements"), ("anon", "/healthz")):
        r = await api[who].get(path, headers=big)
        assert r.status_code == 431, (path, r.status_code, r.text[:200])
        assert r.json()["error"]["code"] == "HEADERS_TOO_LARGE"
        assert r.json()["error"]["detail"] == {"field": "headers", "max_bytes": limit}
    # Many headers adding up past the limit count too; just under it passes.
    many = {f"X-P{i}": "b" * 1000 for i in range(20)}
    assert (await api["alice"].get("/v3/movements", headers=many)).status_code == 431
    near = {"X-Padding": "c" * (limit - 2000)}
    assert (await api["alice"].get("/v3/movements", headers=near)).status_code == 200

    host, port = api.url.removeprefix("http://").rsplit(":", 1)
    sock = trio.socket.socket()
    with sock:
        await sock.connect((host, int(port)))
        await sock.send(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"d" * 60_000 + b"\r\n\r\n"
        )
        received, _ = await _read_until_closed(sock, deadline=READ_TIMEOUT + 10)
    assert received.startswith(b"HTTP/1.1 431"), received[:200]


async def test_a_stream_handshake_past_the_header_limit_is_refused(api: Any) -> None:
    from trio_websocket import ConnectionRejected, open_websocket_url

    with trio.fail_after(10), pytest.raises(ConnectionRejected) as refused:
        async with open_websocket_url(
            api.server.ws_url + "/v3/stream",
            extra_headers=[
                (b"authorization", f"Bearer {api.tokens['vic']}".encode()),
                (b"x-padding", b"e" * 60_000),
            ],
        ):
            pass
    assert refused.value.status_code == 431
