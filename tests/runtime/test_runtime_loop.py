"""run_loop's timing rules, on trio's mock clock (no real sleeps).

Every test records the (virtual) time of each pass and compares it with what
the reference and DESIGN §3 say the loop must do.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import trio

from qtg.db.hub import Wakeup
from qtg.runtime.heartbeats import Beat, Heartbeat
from qtg.runtime.loop import (
    MAX_BACKOFF_SECONDS,
    MAX_CONSECUTIVE_ERRORS,
    MIN_WAIT_SECONDS,
    backoff_seconds,
    run_loop,
)


class Script:
    """A pass function that follows a script: ints are returned, exceptions raised."""

    def __init__(self, *steps: int | Exception, then: int | Exception = 0) -> None:
        self.steps = list(steps)
        self.then = then
        self.times: list[float] = []
        self.during: Callable[[], None] | None = None

    async def __call__(self) -> int:
        self.times.append(trio.current_time())
        if self.during is not None:
            self.during()
        await trio.lowlevel.checkpoint()  # a real pass awaits something
        step = self.steps.pop(0) if self.steps else self.then
        if isinstance(step, Exception):
            raise step
        return step


def rel(times: list[float]) -> list[float]:
    return [round(t - times[0], 3) for t in times]


async def run_for(seconds: float, *args, **kwargs) -> None:
    with trio.move_on_after(seconds):
        await run_loop(*args, **kwargs)


async def test_polls_at_the_interval(autojump_clock: trio.testing.MockClock) -> None:
    s = Script()
    await run_for(10.5, "w", s, 2.0)
    assert rel(s.times) == [0, 2, 4, 6, 8, 10]


async def test_jitter_stays_within_bounds_and_minimum(autojump_clock) -> None:
    s = Script()
    await run_for(200, "w", s, 2.0, 0.5, rng=random.Random(7))
    gaps = [b - a for a, b in zip(s.times, s.times[1:], strict=False)]
    assert len(gaps) > 50
    assert all(1.5 - 1e-9 <= g <= 2.5 + 1e-9 for g in gaps)
    assert max(gaps) - min(gaps) > 0.5  # it really jitters

    tiny = Script()
    await run_for(1.05, "w", tiny, 0.01, 0.005)
    gaps = [b - a for a, b in zip(tiny.times, tiny.times[1:], strict=False)]
    assert gaps and all(abs(g - MIN_WAIT_SECONDS) < 1e-9 for g in gaps)


async def test_drains_at_once_after_items_then_waits(autojump_clock) -> None:
    s = Script(3, 2, 1, 0)
    await run_for(5.5, "w", s, 5.0)
    assert rel(s.times) == [0, 0, 0, 0, 5]


async def test_a_probe_declared_without_drain_waits_after_items(autojump_clock) -> None:
    s = Script(3, 2, 1, 0)
    await run_for(6.5, "w", s, 2.0, drain=False)
    assert rel(s.times) == [0, 2, 4, 6]


async def test_no_drain_when_not_reactive(autojump_clock) -> None:
    s = Script(3, 2, 1, 0)
    await run_for(6.5, "w", s, 2.0, reactive=False)
    assert rel(s.times) == [0, 2, 4, 6]


async def test_wakeup_ends_the_wait_early(autojump_clock) -> None:
    wake = Wakeup()
    s = Script()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: run_for(15, "w", s, 10.0, wakeup=wake))
        await trio.sleep(3)
        wake.set()
        await trio.sleep(1)
        wake.set()
    assert rel(s.times) == [0, 3, 4, 14]


async def test_a_coalescing_worker_passes_once_a_beat_after_the_first_wakeup(
    autojump_clock,
) -> None:
    """coalesce: the pass comes `coalesce` after the first wake-up (not at once,
    not after the last), a burst inside that beat is that one pass, and the
    fallback interval is neither lengthened nor shortened by it."""
    wake = Wakeup()
    s = Script()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: run_for(25, "w", s, 10.0, wakeup=wake, coalesce=0.5))
        await trio.sleep(3)
        for _ in range(3):  # 3.0, 3.2, 3.4: one burst
            wake.set()
            await trio.sleep(0.2)
    assert rel(s.times) == [0, 3.5, 13.5, 23.5]
    assert wake.sets == 1


async def test_wakeups_ignored_when_not_reactive(autojump_clock) -> None:
    wake = Wakeup()
    s = Script()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: run_for(12, "w", s, 10.0, wakeup=wake, reactive=False))
        await trio.sleep(3)
        wake.set()
    assert rel(s.times) == [0, 10]


async def test_wakeup_during_a_pass_gives_exactly_one_more_pass(autojump_clock) -> None:
    """Cleared before the pass: a notify during it is seen; a hundred are seen once."""
    wake = Wakeup()
    s = Script()
    calls = {"n": 0}

    def storm() -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            for _ in range(100):
                wake.set()

    s.during = storm
    await run_for(12, "w", s, 10.0, wakeup=wake)
    assert rel(s.times) == [0, 0, 10]
    assert wake.sets == 1


async def test_wakeup_set_before_start_is_not_lost(autojump_clock) -> None:
    wake = Wakeup()
    wake.set()
    s = Script()
    await run_for(5, "w", s, 10.0, wakeup=wake)
    assert rel(s.times) == [0]  # the pass at start covers it (cleared first)


async def test_consecutive_errors_back_off_and_reset(autojump_clock, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="qtg.runtime.loop")
    boom = RuntimeError("boom")
    s = Script(*([boom] * 7), 0, boom, then=0)
    await run_for(200, "w", s, 1.0)
    gaps = [round(b - a, 3) for a, b in zip(s.times, s.times[1:], strict=False)]
    # errors 1-4 wait the interval; 5 → 2**5=32 s; 6 → 60 (capped); 7 → 60;
    # then a success resets the count, so the next error waits the interval again.
    assert gaps[:9] == [1, 1, 1, 1, 32, 60, 60, 1, 1]
    assert backoff_seconds(MAX_CONSECUTIVE_ERRORS - 1) is None
    assert backoff_seconds(MAX_CONSECUTIVE_ERRORS) == 2**MAX_CONSECUTIVE_ERRORS
    assert backoff_seconds(40) == MAX_BACKOFF_SECONDS
    failures = [r for r in caplog.records if r.getMessage().startswith("worker w pass failed")]
    assert len(failures) == 8
    assert all(r.worker == "w" and r.error == "RuntimeError: boom" for r in failures)
    assert "backing off 32 s" in failures[4].getMessage()


async def test_wakeups_ignored_during_error_backoff(autojump_clock) -> None:
    wake = Wakeup()
    boom = RuntimeError("db down")
    s = Script(*([boom] * 5), then=0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: run_for(40, "w", s, 1.0, wakeup=wake))
        await trio.sleep(4.5)  # the 5th failure at t=4 started a 32 s backoff
        for _ in range(10):
            wake.set()
            await trio.sleep(1)
    assert rel(s.times)[:6] == [0, 1, 2, 3, 4, 36]


async def test_the_database_answering_again_ends_an_error_backoff(autojump_clock) -> None:
    """Issue 27: after a failover the hub reconnects (`restore`); a worker in its
    32 s backoff passes at once instead of half a minute later."""
    wake = Wakeup()
    boom = RuntimeError("db down")
    s = Script(*([boom] * 5), then=0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: run_for(40, "w", s, 1.0, wakeup=wake))
        await trio.sleep(4.5)  # the 5th failure at t=4 started a 32 s backoff
        wake.set()  # an ordinary wake-up: still ignored
        await trio.sleep(2)
        wake.restore()  # the database is back (t=6.5)
    assert rel(s.times)[:7] == [0, 1, 2, 3, 4, 6.5, 7.5]


async def test_a_restore_is_not_a_wakeup_in_pure_polling(autojump_clock) -> None:
    wake = Wakeup()
    s = Script(*([RuntimeError("db down")] * 5), then=0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: run_for(40, "w", s, 1.0, wakeup=wake, reactive=False))
        await trio.sleep(4.5)
        wake.restore()
    assert rel(s.times)[:6] == [0, 1, 2, 3, 4, 36]


async def test_wakeups_honoured_below_the_error_threshold(autojump_clock) -> None:
    """One failed pass (e.g. a broken pooled connection) does not make the worker deaf."""
    wake = Wakeup()
    s = Script(RuntimeError("connection lost"), then=0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: run_for(12.5, "w", s, 10.0, wakeup=wake))
        await trio.sleep(2)
        wake.set()
    assert rel(s.times) == [0, 2, 12]


async def test_sleeps_until_the_earliest_due_time(autojump_clock) -> None:
    s = Script()
    dues = [0.3, 30.0, None, -5.0]

    async def next_due() -> datetime | None:
        step = dues.pop(0) if dues else None
        return None if step is None else datetime.now(UTC) + timedelta(seconds=step)

    await run_for(12, "w", s, 5.0, next_due=next_due)
    # due in 0.3 s → 0.3; due in 30 s → the interval (5); none → 5; overdue → 0.1
    gaps = [round(b - a, 2) for a, b in zip(s.times, s.times[1:], strict=False)]
    assert gaps[:4] == [0.3, 5.0, 5.0, MIN_WAIT_SECONDS]


async def test_next_due_not_consulted_after_items_or_when_polling(autojump_clock) -> None:
    asked: list[float] = []

    async def next_due() -> datetime | None:
        asked.append(trio.current_time())
        return datetime.now(UTC) + timedelta(seconds=0.5)

    s = Script(2, then=0)
    await run_for(0.7, "w", s, 5.0, next_due=next_due)
    assert rel(s.times) == [0, 0, 0.5]
    assert len(asked) == 2  # after each empty pass, not after the one with items

    asked.clear()
    p = Script()
    await run_for(6, "w", p, 5.0, next_due=next_due, reactive=False)
    assert asked == [] and rel(p.times) == [0, 5]


async def test_next_due_failure_counts_as_a_failed_pass(autojump_clock) -> None:
    async def next_due() -> datetime | None:
        raise RuntimeError("due query failed")

    beats: list[Beat] = []

    async def writer(beat: Beat) -> None:
        beats.append(beat)

    hb = Heartbeat("w", writer, min_interval=0.01)
    s = Script()
    await run_for(2.5, "w", s, 1.0, next_due=next_due, heartbeat=hb)
    assert rel(s.times) == [0, 1, 2]
    assert beats[0].consecutive_errors == 1
    assert beats[0].last_error == "RuntimeError: due query failed"


async def test_cancellation_ends_the_loop_quietly(autojump_clock, caplog) -> None:
    caplog.set_level(logging.WARNING)

    async def slow() -> int:
        await trio.sleep(100)
        return 0

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_loop, "w", slow, 1.0)
            await trio.sleep(5)
            scope.cancel()
    assert scope.cancelled_caught
    assert not [r for r in caplog.records if "failed" in r.getMessage()]


async def test_exception_log_carries_no_dsn_password(autojump_clock, caplog) -> None:
    from qtg.runtime.logs import RedactingFilter

    caplog.handler.addFilter(RedactingFilter())
    s = Script(RuntimeError("cannot reach postgresql://qtg:hunter2@db:5432/qtg"), then=0)
    await run_for(0.5, "w", s, 1.0)
    text = caplog.text
    assert "hunter2" not in text
    assert "postgresql://qtg:***@db" in text


@pytest.mark.parametrize("count", [0, 5])
async def test_heartbeat_counts(autojump_clock, count: int) -> None:
    beats: list[Beat] = []

    async def writer(beat: Beat) -> None:
        beats.append(beat)

    hb = Heartbeat("w", writer, min_interval=0.5)
    s = Script(count, then=0)
    await run_for(3.2, "w", s, 1.0, heartbeat=hb)
    assert sum(b.iterations for b in beats) == len(s.times)
    assert sum(b.items for b in beats) == count
    assert beats[-1].status == "stopped"
