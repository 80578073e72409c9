"""WS /v3/stream authenticated by a subprotocol: how a browser keeps its token out of the URL.

A browser WebSocket can set no header, and a `?token=` ends up in history
and access logs; the console offers `qtg.v3, qtg.token.<token>` instead
(qtg/api/stream.py). Real server, real WebSocket client (trio-websocket).
"""

from __future__ import annotations

import json

import pytest
import trio
import trio_websocket

from .conftest import Api
from .streaming import a_request, next_event, stream_url


def offer(api: Api, who: str, *extra: str) -> list[str]:
    return ["qtg.v3", f"qtg.token.{api.tokens[who]}", *extra]


async def test_a_token_subprotocol_authenticates_and_qtg_v3_is_selected(api: Api) -> None:
    rid = await a_request(api)
    url = stream_url(api, after=0, request_id=str(rid))
    async with trio_websocket.open_websocket_url(
        url, subprotocols=offer(api, "vic"), disconnect_timeout=2
    ) as ws:
        # The server answers with qtg.v3, never with the protocol carrying the token.
        assert ws.subprotocol == "qtg.v3"
        with trio.fail_after(5):
            event = await next_event(ws)
        assert event["event_type"] == "request_created" and event["request_id"] == str(rid)
    assert api.tokens["vic"] not in url


@pytest.mark.parametrize(
    ("protocols", "status", "field"),
    [
        (lambda api: ["qtg.v3", "qtg.token.qtg_not-a-token"], 401, None),
        (lambda api: ["qtg.v3"], 401, "Authorization"),  # no token at all
        (lambda api: [f"qtg.token.{api.tokens['vic']}"], 422, "Sec-WebSocket-Protocol"),
        (
            lambda api: ["qtg.v3", f"qtg.token.{api.tokens['vic']}", "qtg.token.other"],
            422,
            "Sec-WebSocket-Protocol",
        ),
    ],
    ids=["unknown-token", "no-token", "token-without-qtg.v3", "two-tokens"],
)
async def test_bad_subprotocol_offers_are_refused_before_the_upgrade(
    api: Api, protocols, status: int, field: str | None
) -> None:
    with pytest.raises(trio_websocket.ConnectionRejected) as rejected:
        async with trio_websocket.open_websocket_url(
            stream_url(api), subprotocols=protocols(api), disconnect_timeout=2
        ):
            pass
    assert rejected.value.status_code == status
    error = json.loads(rejected.value.body)["error"]
    if field is not None:
        assert error["detail"]["field"] == field, error


async def test_a_viewer_token_is_enough_and_the_header_still_wins(api: Api) -> None:
    # An Authorization header beside a protocol token: the header is the credential.
    async with trio_websocket.open_websocket_url(
        stream_url(api),
        subprotocols=["qtg.v3", "qtg.token.qtg_not-a-token"],
        extra_headers=[(b"authorization", f"Bearer {api.tokens['vic']}".encode())],
        disconnect_timeout=2,
    ) as ws:
        assert ws.subprotocol == "qtg.v3"


async def test_without_subprotocols_nothing_is_selected(api: Api) -> None:
    async with trio_websocket.open_websocket_url(
        stream_url(api),
        extra_headers=[(b"authorization", f"Bearer {api.tokens['vic']}".encode())],
        disconnect_timeout=2,
    ) as ws:
        assert ws.subprotocol is None
