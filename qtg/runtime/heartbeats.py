"""A worker's heartbeat: counters kept in memory, written at a bounded rate.

run_loop reports every pass here with plain method calls (no I/O); a small
flusher task beside the loop writes the accumulated beat through a `writer`
(in the runtime: `qtg.services.heartbeats.write_beat`). The rate is bounded
both ways:

- at most one write per `min_interval` seconds per worker, however busy it is,
  so a worker draining thousands of items a second is not a write storm on
  `worker_heartbeats` (the peers' "heartbeat UPDATE contention");
- at least one write per pass: a loop passes at least once per fallback
  interval even while it sleeps reactively, so the beat is never older than
  about one interval (plus `min_interval`) while the worker is alive.

A heartbeat write must never take a worker down: a failed write is logged
(once per failure streak), its counters are kept for the next write, and the
worker goes on. Counters are written as *increments*, so two processes that
run the same worker on one database add up instead of overwriting each other.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import trio

from qtg.domain.redaction import describe_error
from qtg.services.heartbeats import Beat

log = logging.getLogger("qtg.runtime.heartbeats")

#: How long a final ("stopped") write may hold up shutdown.
FINAL_WRITE_SECONDS = 2.0


Writer = Callable[[Beat], Awaitable[None]]


class Heartbeat:
    def __init__(self, worker: str, writer: Writer, *, min_interval: float) -> None:
        self.worker = worker
        self.writer = writer
        self.min_interval = min_interval
        self.writes = 0  # successful writes so far (tests and diagnostics)
        self._status = "running"
        self._iterations = 0
        self._items = 0
        self._consecutive_errors = 0
        self._last_success_at: datetime | None = None
        self._last_error: str | None = None
        self._last_write = -math.inf
        self._write_failing = False
        self._dirty = trio.Event()

    # ---- reported by run_loop (no I/O)
    def record_success(self, items: int) -> None:
        self._iterations += 1
        self._items += items
        self._consecutive_errors = 0
        self._last_success_at = datetime.now(UTC)
        self._status = "running"
        self._dirty.set()

    def record_failure(
        self, exc: BaseException, consecutive_errors: int, backing_off: bool
    ) -> None:
        self._iterations += 1
        self._consecutive_errors = consecutive_errors
        self._last_error = describe_error(exc)
        self._status = "backoff" if backing_off else "running"
        self._dirty.set()

    @property
    def pending(self) -> bool:
        return self._dirty.is_set()

    # ---- writing
    def _take(self, status: str | None = None) -> Beat:
        beat = Beat(
            worker=self.worker,
            status=status or self._status,
            iterations=self._iterations,
            items=self._items,
            consecutive_errors=self._consecutive_errors,
            last_success_at=self._last_success_at,
            last_error=self._last_error,
        )
        self._iterations = 0
        self._items = 0
        self._last_success_at = None
        self._last_error = None
        self._dirty = trio.Event()
        return beat

    def _give_back(self, beat: Beat) -> None:
        """A write failed: fold its increments back in so nothing is lost."""
        self._iterations += beat.iterations
        self._items += beat.items
        if self._last_success_at is None:
            self._last_success_at = beat.last_success_at
        if self._last_error is None:
            self._last_error = beat.last_error
        self._dirty.set()

    async def flush(self, status: str | None = None) -> bool:
        """Write what has accumulated now; never raises an Exception."""
        beat = self._take(status)
        self._last_write = trio.current_time()
        try:
            await self.writer(beat)
        except Exception as exc:
            self._give_back(beat)
            if not self._write_failing:
                log.warning(
                    "heartbeat write failed; the worker goes on",
                    extra={"worker": self.worker, "error": describe_error(exc)},
                )
            self._write_failing = True
            return False
        if self._write_failing:
            log.info("heartbeat writes work again", extra={"worker": self.worker})
        self._write_failing = False
        self.writes += 1
        return True

    async def run(self) -> None:
        """Write whenever something accumulated, at most once per `min_interval`.

        Runs beside the loop in run_loop's nursery; when the loop ends it is
        cancelled, and writes the final beat with status `stopped` (bounded,
        and skipped while writes are failing: the database is likely gone and
        shutdown must not wait for it).
        """
        try:
            while True:
                await self._dirty.wait()
                await trio.sleep_until(self._last_write + self.min_interval)
                await self.flush()
        finally:
            if not self._write_failing:
                with trio.move_on_after(FINAL_WRITE_SECONDS, shield=True):
                    await self.flush("stopped")
