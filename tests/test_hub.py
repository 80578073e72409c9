"""The LISTEN hub: coalescing wake-ups, recovery after its backend dies (DESIGN §3)."""

from __future__ import annotations

import psycopg
import pytest
import trio

from qtg.db import CHANNELS, ListenHub, Wakeup


def _notify_many(dsn: str, channel: str, count: int) -> None:
    """`count` notifications, each in its own transaction (PostgreSQL folds them otherwise)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(count):
            conn.execute("SELECT pg_notify(%s, %s)", (channel, str(i)))


async def test_a_hundred_notifies_coalesce_into_one_wakeup(dsn: str, hub: ListenHub) -> None:
    wakeup = hub.subscribe("qtg_dispatch")
    other = hub.subscribe("qtg_observe")
    seen: list[str] = []
    all_seen = trio.Event()

    def listener(channel: str, payload: str) -> None:
        seen.append(payload)
        if len(seen) == 100:
            all_seen.set()

    hub.add_listener(listener)
    before = hub.notifications

    await trio.to_thread.run_sync(_notify_many, dsn, "qtg_dispatch", 100)
    with trio.fail_after(10):
        await all_seen.wait()

    assert hub.notifications == before + 100  # every one was received ...
    assert seen == [str(i) for i in range(100)]  # ... in order, payloads intact
    assert 1 <= wakeup.sets <= 3  # ... but the busy subscriber is woken a bounded number
    assert wakeup.is_set()
    with trio.fail_after(1):
        await wakeup.wait()  # returns at once: the wake-up waited for the subscriber
    assert not other.is_set() and other.sets == 0  # another channel was not disturbed


async def test_wakeup_rearms_after_clear(dsn: str, hub: ListenHub) -> None:
    wakeup = hub.subscribe("qtg_callback")
    for round_no in range(1, 4):
        await trio.to_thread.run_sync(_notify_many, dsn, "qtg_callback", 1)
        with trio.fail_after(5):
            await wakeup.wait()
        assert wakeup.sets == round_no
        wakeup.clear()
    assert not wakeup.is_set()


async def test_hub_reconnects_after_its_backend_is_killed(dsn: str, hub: ListenHub) -> None:
    wakeups: dict[str, list[Wakeup]] = {
        channel: [hub.subscribe(channel), hub.subscribe(channel)] for channel in CHANNELS
    }
    assert hub.connections == 1 and hub.connected
    old_pid = hub.backend_pid
    assert old_pid is not None

    def kill() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT pg_terminate_backend(%s)", (old_pid,)).fetchone()
            assert row == (True,)

    await trio.to_thread.run_sync(kill)
    # Notifications sent while it was away are lost, so once back it wakes everyone.
    with trio.fail_after(10):
        for subscribers in wakeups.values():
            for wakeup in subscribers:
                await wakeup.wait()
    assert hub.connections == 2 and hub.connected
    assert hub.backend_pid not in (None, old_pid)
    assert all(w.sets == 1 for subscribers in wakeups.values() for w in subscribers)

    # And it listens again: a new notify reaches its subscribers.
    for subscribers in wakeups.values():
        for wakeup in subscribers:
            wakeup.clear()
    await trio.to_thread.run_sync(_notify_many, dsn, "qtg_recover", 1)
    with trio.fail_after(5):
        for wakeup in wakeups["qtg_recover"]:
            await wakeup.wait()
    assert not any(w.is_set() for w in wakeups["qtg_dispatch"])
    assert hub.connections == 2


def test_unknown_channel_is_refused() -> None:
    hub = ListenHub("postgresql://unused")
    with pytest.raises(ValueError, match="qtg_nope"):
        hub.subscribe("qtg_nope")


def test_wake_sets_only_this_channels_subscribers_without_a_notify() -> None:
    hub = ListenHub("postgresql://unused")  # never run: wake() needs no connection
    dispatch, observe = hub.subscribe("qtg_dispatch"), hub.subscribe("qtg_observe")
    hub.wake("qtg_dispatch")
    assert dispatch.is_set() and not observe.is_set()
    assert hub.notifications == 0
