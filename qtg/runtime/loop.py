"""run_loop: the one loop every worker runs (reference: "loop_runner pattern").

The reference's contract, kept exactly:

- `func()` is one pass; it returns how many items it processed;
- a success resets `consecutive_errors`;
- between passes the loop waits `interval + uniform(-jitter, jitter)` seconds,
  at least 0.1 s;
- `trio.Cancelled` ends the worker (shutdown); any other exception is logged
  with the worker's name and survived;
- once `consecutive_errors >= MAX_CONSECUTIVE_ERRORS` (5) the wait becomes
  `min(2 ** consecutive_errors, MAX_BACKOFF_SECONDS)` (60) seconds;
- a fresh connection per iteration: a pass opens its own `db.transaction()`,
  so nothing (no broken connection, no aborted transaction) outlives a pass.

What DESIGN §3 adds (`reactive=True`, the default; `MG_REACTIVE=false` turns
all of it off, which is the reference's pure polling):

- the wait ends at the earlier of a wake-up on the worker's channel and the
  fallback interval; the wake-up is cleared *before* each pass, so a notify
  that arrives during a pass causes exactly one more pass — never a lost
  wake-up, never one pass per notify;
- after a pass that processed items the loop goes round again at once
  (drain), so a backlog is not worked off one item per interval;
- a deadline-driven worker (`next_due`) sleeps until the earliest due time it
  knows of when that is sooner than the interval (still at least 0.1 s);
- a worker off the money path may `coalesce`: after a wake-up it waits that
  long before its pass, so the commit that woke it and the dispatcher does
  not have both compete for the one trio thread at once (the claim goes
  first), and the notifies of a burst are one pass;
- during an error backoff wake-ups are ignored, so a failing worker cannot
  spin on a notify storm. Below the backoff threshold a failed pass waits like
  any other, wake-ups included: after a database restart the first pass often
  fails on a dead pooled connection, and the hub's "wake everyone" must still
  bring the worker straight back. One signal does end a backoff: the hub's
  reconnection after it lost its connection (`Wakeup.restore`) — the database
  answers again, so after a failover or a long restart the workers resume
  with it instead of up to MAX_BACKOFF_SECONDS later (issue 27).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import trio

from qtg.db.hub import Wakeup
from qtg.domain.redaction import describe_error
from qtg.runtime.heartbeats import Heartbeat
from qtg.services.metrics import WorkerMetrics

log = logging.getLogger("qtg.runtime.loop")

MAX_CONSECUTIVE_ERRORS = 5
MAX_BACKOFF_SECONDS = 60.0
MIN_WAIT_SECONDS = 0.1

PassFn = Callable[[], Awaitable[int]]
NextDueFn = Callable[[], Awaitable[datetime | None]]


def backoff_seconds(consecutive_errors: int) -> float | None:
    """The error backoff after this many consecutive errors, or None below the threshold."""
    if consecutive_errors < MAX_CONSECUTIVE_ERRORS:
        return None
    return min(2.0**consecutive_errors, MAX_BACKOFF_SECONDS)


def fallback_wait(interval: float, jitter: float, rng: random.Random) -> float:
    """The reference's wait: `interval ± jitter`, at least MIN_WAIT_SECONDS."""
    return max(MIN_WAIT_SECONDS, interval + rng.uniform(-jitter, jitter))


def seconds_until(due: datetime, now: datetime | None = None) -> float:
    return (due - (now or datetime.now(UTC))).total_seconds()


async def run_loop(
    name: str,
    func: PassFn,
    interval: float,
    jitter: float = 0.0,
    *,
    wakeup: Wakeup | None = None,
    next_due: NextDueFn | None = None,
    reactive: bool = True,
    heartbeat: Heartbeat | None = None,
    rng: random.Random | None = None,
    drain: bool = True,
    metrics: WorkerMetrics | None = None,
    coalesce: float = 0.0,
) -> None:
    """Run `func` forever as worker `name`; returns only by cancellation.

    `drain=False` is for periodic probes (executor_health): their count says
    how much they looked at, not that more work is waiting, so a productive
    pass is followed by the normal wait instead of another pass at once.

    `func` and `next_due` take no arguments: the registry binds the worker's
    ServiceContext to them. `heartbeat`, when given, is fed after every pass
    and flushed by its own task beside the loop.
    """
    if heartbeat is None:
        await _loop(
            name,
            func,
            interval,
            jitter,
            wakeup,
            next_due,
            reactive,
            None,
            rng,
            drain,
            metrics,
            coalesce,
        )
        return
    async with trio.open_nursery() as nursery:
        nursery.start_soon(heartbeat.run)
        try:
            await _loop(
                name,
                func,
                interval,
                jitter,
                wakeup,
                next_due,
                reactive,
                heartbeat,
                rng,
                drain,
                metrics,
                coalesce,
            )
        finally:
            nursery.cancel_scope.cancel()


async def _loop(
    name: str,
    func: PassFn,
    interval: float,
    jitter: float,
    wakeup: Wakeup | None,
    next_due: NextDueFn | None,
    reactive: bool,
    heartbeat: Heartbeat | None,
    rng: random.Random | None,
    drain: bool = True,
    metrics: WorkerMetrics | None = None,
    coalesce: float = 0.0,
) -> None:
    rng = rng or random.Random()
    listen = wakeup if reactive else None
    consecutive_errors = 0
    while True:
        if listen is not None:
            listen.clear()  # before the pass: a notify during it means one more pass
        due: datetime | None = None
        started = trio.current_time()
        try:
            count = await func()
            if reactive and count == 0 and next_due is not None:
                due = await next_due()
        except Exception as exc:
            consecutive_errors += 1
            backoff = backoff_seconds(consecutive_errors)
            _log_failure(name, exc, consecutive_errors, backoff)
            if metrics is not None:
                metrics.failed(trio.current_time() - started, backoff is not None)
            if heartbeat is not None:
                heartbeat.record_failure(exc, consecutive_errors, backoff is not None)
            if backoff is not None:
                # Ordinary wake-ups are ignored on purpose (a failing worker must
                # not spin on notifies); the hub's reconnection after a database
                # outage (a restart, a failover) ends the backoff.
                with trio.move_on_after(backoff):
                    if listen is None:
                        await trio.sleep_forever()
                    else:
                        await listen.wait_restored()
            else:
                await _wait(fallback_wait(interval, jitter, rng), listen, coalesce)
            continue
        if consecutive_errors:
            log.info(
                "worker recovered",
                extra={"worker": name, "after_errors": consecutive_errors},
            )
        consecutive_errors = 0
        if metrics is not None:
            metrics.succeeded(count, trio.current_time() - started)
        if heartbeat is not None:
            heartbeat.record_success(count)
        if count > 0 and log.isEnabledFor(logging.DEBUG):
            log.debug("pass", extra={"worker": name, "items": count})
        if reactive and drain and count > 0:
            await trio.lowlevel.checkpoint()  # drain, but let others run
            continue
        delay = fallback_wait(interval, jitter, rng)
        if due is not None:
            delay = min(delay, max(MIN_WAIT_SECONDS, seconds_until(due)))
        await _wait(delay, listen, coalesce)


async def _wait(delay: float, wakeup: Wakeup | None, coalesce: float = 0.0) -> None:
    """Sleep `delay` seconds, or less if `wakeup` is (or becomes) set — then,
    when woken, `coalesce` seconds more (never past `delay`)."""
    deadline = trio.current_time() + delay
    with trio.move_on_at(deadline):
        if wakeup is None:
            await trio.sleep_forever()
        else:
            await wakeup.wait()
    if coalesce > 0:
        await trio.sleep_until(min(deadline, trio.current_time() + coalesce))


def _log_failure(name: str, exc: Exception, consecutive_errors: int, backoff: float | None) -> None:
    extra = {
        "worker": name,
        "consecutive_errors": consecutive_errors,
        "error": describe_error(exc),
    }
    if backoff is not None:
        extra["backoff_s"] = backoff
    # The traceback once per failure streak; later failures in a row get one line.
    log.warning(
        f"worker {name} pass failed" + (f"; backing off {backoff:g} s" if backoff else ""),
        extra=extra,
        exc_info=exc if consecutive_errors == 1 else None,
    )
