"""The LISTEN hub: one listening connection per process, shared by every worker.

Triggers `pg_notify` on commit (migrations/0002_triggers.sql); the hub turns
notifications into per-subscriber *coalescing* wake-ups: a hundred notifies
while a worker is busy mean one more pass, not a hundred.

No thread is involved while listening: the hub waits for the socket with
`trio.lowlevel.wait_readable` and drains with `notifies(timeout=0)`, which
never blocks (DESIGN §9). Only the hub's own task touches its connection.

When the connection is lost (database restart, `pg_terminate_backend`,
network drop caught by TCP keepalives or the idle ping) the hub reconnects
with exponential backoff and then wakes *every* subscriber once, because
notifications sent while it was away are gone. Interval polling in run_loop
covers the gap meanwhile.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import psycopg
import trio
from psycopg import sql

from qtg.db.pool import session_params
from qtg.db.queries import sql_family

log = logging.getLogger("qtg.db.hub")

CHANNELS: tuple[str, ...] = (
    "qtg_dispatch",
    "qtg_observe",
    "qtg_recover",
    "qtg_callback",
    "qtg_audit",
    "qtg_expire",
    "qtg_events",
    "qtg_notification",
    "qtg_evm_reaper",
)

SQL = sql_family("db", "ping")

_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
}


class Wakeup:
    """A coalescing wake-up for one subscriber: set many times, seen once.

    `wait()` returns as soon as the wake-up is set (immediately if it already
    is); `clear()` re-arms it. `sets` counts how many times it went from
    clear to set, which is what coalescing bounds.
    """

    __slots__ = ("_event", "_restored", "sets")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._restored = trio.Event()
        self.sets = 0

    def set(self) -> None:
        if not self._event.is_set():
            self.sets += 1
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def clear(self) -> None:
        if self._event.is_set():
            self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()

    def restore(self) -> None:
        """The database answers again (the hub reconnected): a wake-up that also
        ends a worker's error backoff (`wait_restored`), which ordinary wake-ups
        do not — after a failover the workers resume when the database does,
        not up to a minute later."""
        self._restored.set()
        self.set()

    async def wait_restored(self) -> None:
        """Return once `restore()` was called (at once if it was since the last
        return), and re-arm."""
        await self._restored.wait()
        self._restored = trio.Event()


PayloadListener = Callable[[str, str], None]


class ListenHub:
    def __init__(
        self,
        dsn: str,
        channels: Iterable[str] = CHANNELS,
        *,
        reconnect_min_seconds: float = 0.05,
        reconnect_max_seconds: float = 5.0,
        ping_interval_seconds: float = 15.0,
    ) -> None:
        self.dsn = dsn
        self.channels = tuple(channels)
        self.reconnect_min_seconds = reconnect_min_seconds
        self.reconnect_max_seconds = reconnect_max_seconds
        self.ping_interval_seconds = ping_interval_seconds
        self._wakeups: dict[str, list[Wakeup]] = defaultdict(list)
        self._listeners: list[PayloadListener] = []
        self._connected = trio.Event()
        self.connected = False
        self.connections = 0  # successful (re)connections so far
        self.notifications = 0  # notifications received so far
        self.backend_pid: int | None = None

    # ---- subscribers
    def subscribe(self, channel: str) -> Wakeup:
        if channel not in self.channels:
            raise ValueError(f"unknown channel {channel!r}; the hub listens on {self.channels}")
        wakeup = Wakeup()
        self._wakeups[channel].append(wakeup)
        return wakeup

    def unsubscribe(self, channel: str, wakeup: Wakeup) -> None:
        subscribers = self._wakeups.get(channel, [])
        if wakeup in subscribers:
            subscribers.remove(wakeup)

    def add_listener(self, listener: PayloadListener) -> None:
        """Call `listener(channel, payload)` for every notification (no coalescing)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: PayloadListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def wake(self, channel: str) -> None:
        """Wake this process's subscribers of `channel` now, without the NOTIFY
        round trip (issue 15): for a commit that made work this very process
        can take. The trigger's NOTIFY still goes to every other process (and
        comes back here too: one more, coalesced, pass at most)."""
        for wakeup in self._wakeups.get(channel, ()):
            wakeup.set()

    def wake_all(self) -> None:
        for subscribers in self._wakeups.values():
            for wakeup in subscribers:
                wakeup.set()

    def restore_all(self) -> None:
        """Wake every subscriber and end their error backoffs (`Wakeup.restore`)."""
        for subscribers in self._wakeups.values():
            for wakeup in subscribers:
                wakeup.restore()

    async def wait_connected(self) -> None:
        await self._connected.wait()

    # ---- the listening task
    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen forever; `nursery.start(hub.run)` returns once first connected."""
        backoff = self.reconnect_min_seconds
        started = False
        while True:
            try:
                conn = await trio.to_thread.run_sync(self._connect)
            except psycopg.Error as exc:
                log.warning(
                    "listen connection failed; retrying",
                    extra={"retry_in_s": backoff, "error": _first_line(exc)},
                )
                await trio.sleep(backoff)
                backoff = min(backoff * 2, self.reconnect_max_seconds)
                continue
            backoff = self.reconnect_min_seconds
            self.connected = True
            self.connections += 1
            self.backend_pid = conn.info.backend_pid
            self._connected.set()
            if self.connections > 1:
                log.info("listen connection restored; waking every worker")
                self.restore_all()  # the database is back: backoffs end too
            else:
                self.wake_all()
            if not started:
                started = True
                task_status.started()
            try:
                await self._listen(conn)
            except psycopg.Error as exc:
                log.warning("listen connection lost", extra={"error": _first_line(exc)})
            finally:
                self.connected = False
                self._connected = trio.Event()
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(conn.close)

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(
            self.dsn,
            autocommit=True,
            application_name="qtg-listen",
            connect_timeout=10,  # a black-holed host must not hang the reconnect loop
            # a multi-host DSN: only the read-write server, so after a failover the
            # hub listens on the new primary, where the workers' commits notify
            **{**session_params(self.dsn), **_KEEPALIVES},
        )
        try:
            for channel in self.channels:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except BaseException:
            conn.close()
            raise
        return conn

    async def _listen(self, conn: psycopg.Connection[Any]) -> None:
        fd = conn.fileno()
        while True:
            with trio.move_on_after(self.ping_interval_seconds) as idle:
                await trio.lowlevel.wait_readable(fd)
            if idle.cancelled_caught:
                # Idle for a while: prove the connection still works. Anything
                # that arrives during the ping is kept by psycopg's backlog and
                # delivered by the drain below.
                await trio.to_thread.run_sync(conn.execute, SQL.ping.text)
            self._drain(conn)
            if conn.broken or conn.closed:
                raise psycopg.OperationalError("listen connection closed")

    def _drain(self, conn: psycopg.Connection[Any]) -> None:
        for notify in conn.notifies(timeout=0):
            self.notifications += 1
            for wakeup in self._wakeups.get(notify.channel, ()):
                wakeup.set()
            for listener in self._listeners:
                listener(notify.channel, notify.payload)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
