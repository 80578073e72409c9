"""WS /v3/stream through a real server and real WebSocket clients (trio-websocket)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
import pytest
import trio
import trio_websocket

from .conftest import Api
from .streaming import (
    a_request,
    collect,
    event_ids,
    next_event,
    stream,
    until,
    write_events,
)


@pytest.fixture
def stream_overrides() -> dict[str, Any]:
    return {"stream_ping_interval_seconds": 0.3}


async def test_an_after_beyond_the_last_event_is_refused(api: Api) -> None:
    rid = await a_request(api)
    [last] = (await write_events(api.db, rid, 1))[-1:]
    for after in (2**63 - 1, last + 1000):
        with pytest.raises(trio_websocket.ConnectionRejected) as rejected:
            async with stream(api, after=str(after)):
                pass
        assert rejected.value.status_code == 422
        error = json.loads(rejected.value.body)["error"]
        assert error["detail"]["field"] == "after"
        assert error["detail"]["last_event_id"] >= last
        assert f"after: {after} is beyond the last event id" in error["message"]
    async with stream(api, after=str(last)) as ws:  # the last id itself is a fine resume
        assert (await next_event_after_ping(ws))["type"] == "ping"


async def test_refusals_are_http_errors_before_the_upgrade(api: Api) -> None:
    cases = [
        ({"header": False}, 401),
        ({"header": False, "token": "qtg_nope"}, 401),
        ({"after": "-1"}, 422),
        ({"after": "x"}, 422),
        ({"request_id": "not-a-uuid"}, 422),
        ({"types": "Bad Type"}, 422),
        ({"surprise": "1"}, 422),
    ]
    for params, status in cases:
        with pytest.raises(trio_websocket.ConnectionRejected) as rejected:
            async with stream(api, **params):
                pass
        assert rejected.value.status_code == status, params
        body = json.loads(rejected.value.body)
        assert "error" in body and body["error"]["code"], body
    # the token may also come as ?token= (browsers cannot set headers)
    async with stream(api, header=False, token=api.tokens["vic"]) as ws:
        assert (await next_event_after_ping(ws))["type"] == "ping"


async def test_backlog_then_live_in_order(api: Api) -> None:
    rid = await a_request(api)
    backlog = await write_events(api.db, rid, 5)
    async with stream(api, after=0, request_id=str(rid)) as ws:
        first = await next_event(ws)
        assert first["event_type"] == "request_created" and first["request_id"] == str(rid)
        got = await collect(ws, backlog[-1])
        assert got == backlog
        live = await write_events(api.db, rid, 3)
        assert await collect(ws, live[-1]) == live
        message = await next_event_after_ping(ws)
        assert message["type"] == "ping" and message["after"] >= live[-1]


async def next_event_after_ping(ws: trio_websocket.WebSocketConnection) -> dict[str, Any]:
    with trio.fail_after(5):
        while True:
            message = json.loads(await ws.get_message())
            if message["type"] == "ping":
                return message


async def test_live_only_without_after_and_filters(api: Api) -> None:
    rid = await a_request(api)
    other = await a_request(api)
    before = await write_events(api.db, rid, 3)  # before connecting: not sent without `after`
    # "live" starts at the feed's position when the client connects
    await until(lambda: api.feed.position >= before[-1])
    async with (
        stream(api, request_id=str(rid)) as mine,
        stream(api, types="request_state_changed") as states,
    ):
        await wait_subscribers(api, 2)
        await write_events(api.db, other, 2)
        wanted = await write_events(api.db, rid, 2)
        assert await collect(mine, wanted[-1]) == wanted
        r = await api["bob"].post(f"/v3/movements/{other}/reject")
        assert r.status_code == 200
        event = await next_event(states)
        assert event["event_type"] == "request_state_changed"
        assert (event["request_id"], event["from_state"], event["to_state"]) == (
            str(other),
            "PENDING_APPROVAL",
            "REJECTED",
        )


async def wait_subscribers(api: Api, n: int) -> None:
    await until(lambda: api.feed.subscriber_count >= n)


async def test_a_late_commit_is_not_skipped(api: Api, dsn: str) -> None:
    """Event ids are not commit order: hold an early id open while later ones commit."""
    rid = await a_request(api)
    start = (await event_ids(api.db, rid))[-1]
    received: list[dict[str, Any]] = []
    async with stream(api, after=start, request_id=str(rid)) as ws, trio.open_nursery() as n:

        async def read() -> None:
            while True:
                received.append(await next_event(ws))

        n.start_soon(read)
        slow = await trio.to_thread.run_sync(psycopg.connect, dsn)
        try:
            # T1 takes the early id and stays open
            early = await trio.to_thread.run_sync(_insert_one, slow, rid)
            # T2.. take later ids and commit
            later = await write_events(api.db, rid, 3)
            assert early < later[0]
            # A naive reader ("id > cursor") would now see the later ones only and,
            # having moved its cursor past them, never the early one.
            visible = await event_ids(api.db, rid, start)
            assert visible == later and early not in visible
            # The feed has seen the later ids and is waiting for T1 …
            await until(lambda: (api.feed._probes.newest or 0) >= later[-1])
            checks = api.feed.stats.unsettled_checks
            await until(lambda: api.feed.stats.unsettled_checks >= checks + 3)
            # … so nothing at or after the early id went out.
            assert api.feed.position < early
            assert received == []
            await trio.to_thread.run_sync(slow.commit)
        finally:
            await trio.to_thread.run_sync(slow.close)
        await until(lambda: len(received) >= 4)
        assert [e["id"] for e in received] == [early, *later]
        n.cancel_scope.cancel()


async def test_a_rolled_back_early_id_is_passed_over(api: Api, dsn: str) -> None:
    rid = await a_request(api)
    start = (await event_ids(api.db, rid))[-1]
    async with stream(api, after=start, request_id=str(rid)) as ws:
        slow = await trio.to_thread.run_sync(psycopg.connect, dsn)
        try:
            early = await trio.to_thread.run_sync(_insert_one, slow, rid)
            later = await write_events(api.db, rid, 2)
            await trio.to_thread.run_sync(slow.rollback)
        finally:
            await trio.to_thread.run_sync(slow.close)
        got = await collect(ws, later[-1])
        assert got == later and early not in got


def _insert_one(conn: psycopg.Connection, rid: uuid.UUID) -> int:
    row = conn.execute(
        "INSERT INTO movement_events (request_id, event_type) VALUES (%s, 'test_event') "
        "RETURNING id",
        (rid,),
    ).fetchone()
    assert row is not None
    return int(row[0])


async def test_resume_across_disconnect_while_events_keep_coming(api: Api, dsn: str) -> None:
    rid = await a_request(api)
    start = (await event_ids(api.db, rid))[-1]
    done = trio.Event()

    async def writer(conn_no: int) -> None:
        # small transactions from several connections: commits interleave with ids
        for _ in range(25):
            await write_events(api.db, rid, 4)
            await trio.lowlevel.checkpoint()

    received: list[int] = []
    async with trio.open_nursery() as nursery:

        async def writers() -> None:
            async with trio.open_nursery() as inner:
                for i in range(3):
                    inner.start_soon(writer, i)
            done.set()

        nursery.start_soon(writers)
        after = start
        sessions = 0
        while True:
            sessions += 1
            async with stream(api, after=after, request_id=str(rid)) as ws:
                # read a few, then drop the connection mid-flow
                with trio.move_on_after(5):
                    for _ in range(40):
                        received.append((await next_event(ws))["id"])
                        if done.is_set() and received[-1] == (await event_ids(api.db, rid))[-1]:
                            break
            after = received[-1] if received else after
            if done.is_set() and received and received[-1] == (await event_ids(api.db, rid))[-1]:
                break
            assert sessions < 50
    expected = await event_ids(api.db, rid, start)
    assert len(expected) == 300
    assert received == expected  # every event once, in id order, across the reconnects
    assert sessions >= 3


async def test_many_concurrent_clients(api: Api) -> None:
    rid = await a_request(api)
    start = (await event_ids(api.db, rid))[-1]
    results: dict[int, list[int]] = {}

    async def client(i: int, expected_last: list[int]) -> None:
        async with stream(api, after=start, request_id=str(rid)) as ws:
            ids: list[int] = []
            await ready.wait()
            results[i] = await collect(ws, expected_last[0], seen=ids)

    ready = trio.Event()
    expected_last: list[int] = [0]
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(client, i, expected_last)
            await wait_subscribers(api, 20)
            for _ in range(5):
                await write_events(api.db, rid, 10)
            expected = await event_ids(api.db, rid, start)
            expected_last[0] = expected[-1]
            ready.set()
    assert len(results) == 20
    for ids in results.values():
        assert ids == expected


async def test_commits_in_reverse_id_order_arrive_in_id_order(api: Api, dsn: str) -> None:
    """Ten transactions take ids 1..10 (relative) and commit 10..1; the stream shows 1..10."""
    rid = await a_request(api)
    start = (await event_ids(api.db, rid))[-1]
    conns = [await trio.to_thread.run_sync(psycopg.connect, dsn) for _ in range(10)]
    try:
        async with stream(api, after=start, request_id=str(rid)) as ws:
            ids = [await trio.to_thread.run_sync(_insert_one, c, rid) for c in conns]
            assert ids == sorted(ids)
            for conn in reversed(conns):
                await trio.to_thread.run_sync(conn.commit)
            assert await collect(ws, ids[-1]) == ids
    finally:
        for conn in conns:
            await trio.to_thread.run_sync(conn.close)
