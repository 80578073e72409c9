"""A client that cannot keep up is closed with 4008 and resumes without a gap."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio_websocket

from .conftest import Api
from .streaming import (
    a_request,
    collect,
    event_ids,
    slow_client,
    stream,
    until,
    write_events,
)


@pytest.fixture
def stream_overrides() -> dict[str, Any]:
    return {"stream_client_buffer": 8, "stream_ping_interval_seconds": 30.0}


async def test_slow_client_is_closed_with_4008_and_resumes(api: Api, nursery: Any) -> None:
    rid = await a_request(api)
    start = (await event_ids(api.db, rid))[-1]
    async with slow_client(api, nursery, after=start, request_id=str(rid)) as ws:
        await until(lambda: api.feed.subscriber_count >= 1)
        with trio.fail_after(20):
            # Write until the server gives up on the client (its socket is full
            # and more than 8 events wait behind it). Each batch is one commit.
            while api.feed.stats.slow_closed == 0:
                await write_events(api.db, rid, 20, pad=2000)
        assert api.feed.subscriber_count == 0  # the feed holds nothing for it any more
        received: list[int] = []
        with pytest.raises(trio_websocket.ConnectionClosed) as closed:
            with trio.fail_after(20):
                while True:
                    message = json.loads(await ws.get_message())
                    if message["type"] == "event":
                        received.append(message["id"])
    reason = closed.value.reason
    assert reason.code == 4008
    assert reason.reason == f"slow consumer; resume with after={received[-1]}"
    expected = await event_ids(api.db, rid, start)
    assert received == expected[: len(received)]  # a gap-free prefix
    assert len(received) < len(expected)

    async with stream(api, after=received[-1], request_id=str(rid)) as again:
        rest = await collect(again, expected[-1])
    assert received + rest == expected
