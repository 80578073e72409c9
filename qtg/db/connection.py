"""A psycopg connection that runs on trio, with no threads.

psycopg implements the PostgreSQL protocol as generators that yield "wait
until the socket is readable/writable" and are sent back "it is" (DESIGN §9).
`psycopg.AsyncConnection` drives them with asyncio; `TrioConnection` drives
the same generators with `trio.lowlevel.wait_readable`/`wait_writable`, so a
statement costs one socket round trip and no thread hop, and a cancelled task
stops waiting at once.

What this relies on, and how an upgrade would break it (psycopg is pinned
exactly in pyproject.toml for that reason):
- `AsyncConnection.wait(gen, interval, timeout)` is the one method through
  which every statement, commit, rollback and pipeline sync of the async
  connection, cursor and pipeline waits. Overriding it is the whole trick.
- `AsyncConnection._connect_gen(conninfo)` (generator yielding `(fd, Wait)`)
  and `_get_connection_params` build a connection; `connect()` is rewritten
  here because psycopg's does DNS through asyncio.
- `psycopg._conninfo_attempts.conninfo_attempts` (sync DNS), `Wait`/`Ready`
  from `psycopg.waiting`, `psycopg.errors._WaitTimeout`.
- `self.lock` is used only as `async with self.lock`; it is replaced by a
  `ConnectionLock` (an `asyncio.Lock` must never be contended under trio).
If a psycopg release renames any of these, `tests/test_pool.py` fails at once
(every test opens a connection through this class).
"""

from __future__ import annotations

import select
from contextlib import nullcontext
from typing import Any

import psycopg
import trio
from psycopg import errors as e
from psycopg import pq
from psycopg._conninfo_attempts import conninfo_attempts
from psycopg.conninfo import make_conninfo, timeout_from_conninfo
from psycopg.waiting import Ready, Wait

__all__ = ["ConnectionLock", "TrioConnection", "socket_has_data", "take_if_free"]

_ACTIVE = pq.TransactionStatus.ACTIVE
_CANCEL_GRACE_SECONDS = 5.0

#: A thread is used for one thing only: resolving a host name while connecting
#: (libpq's and the stdlib's resolvers block). Its own limiter, so connecting
#: never waits behind other uses of trio's default thread limiter.
_DNS_LIMITER = trio.CapacityLimiter(4)


_BROKEN = select.POLLERR | select.POLLHUP | select.POLLNVAL


def _poll_now(fileno: int, events: int) -> tuple[bool, bool]:
    """(readable, writable) for `fileno` right now, without blocking.

    `poll`, never `select`: `select.select` refuses any descriptor >= 1024
    (FD_SETSIZE) with ValueError, and a process with many sockets open (an
    API with ~1,000 clients) gets its database sockets numbered above that
    (issue 26). An error or hang-up counts as readable and writable: the
    caller's next read or write is what reports it.
    """
    poller = select.poll()
    poller.register(fileno, events)
    revents = 0
    for _, got in poller.poll(0):
        revents |= got
    broken = bool(revents & _BROKEN)
    return bool(revents & select.POLLIN) or broken, bool(revents & select.POLLOUT) or broken


async def _wait_fd(fileno: int, wait: Wait) -> Ready:
    """Wait until `fileno` is ready as `wait` asks; which readiness it is."""
    if wait == Wait.R:
        await trio.lowlevel.wait_readable(fileno)
        return Ready.R
    if wait == Wait.W:
        await trio.lowlevel.wait_writable(fileno)
        return Ready.W
    # Read-or-write (every pipeline sync waits so). Poll first; only if
    # neither is ready park on both and take whichever comes first.
    readable, writable = _poll_now(fileno, select.POLLIN | select.POLLOUT)
    if readable or writable:
        return Ready((Ready.R if readable else 0) | (Ready.W if writable else 0))
    ready = Ready.NONE

    async def one(kind: Ready, waiter: Any, scope: trio.CancelScope) -> None:
        nonlocal ready
        await waiter(fileno)
        ready = Ready(ready | kind)
        scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, Ready.R, trio.lowlevel.wait_readable, nursery.cancel_scope)
        nursery.start_soon(one, Ready.W, trio.lowlevel.wait_writable, nursery.cancel_scope)
    return ready


async def _drive(
    gen: Any, fileno: int, seconds: float | None, pending: list[Wait] | None = None
) -> Any:
    """Run a psycopg generator to completion on trio; its return value.

    `pending`, when given, always holds what the generator is waiting for, so
    that a driver interrupted by a cancellation can be resumed (pass the same
    list again) exactly where it stopped: a psycopg generator must be sent a
    `Ready`, and restarting it with `next()` would send it None.
    """
    holder: list[Wait] = pending if pending is not None else []
    try:
        wait = holder[0] if holder else next(gen)
        with trio.fail_after(seconds) if seconds else nullcontext():
            while True:
                holder[:] = [wait]
                wait = gen.send(await _wait_fd(fileno, wait))
    except StopIteration as done:
        return done.value
    except trio.TooSlowError:
        raise e._WaitTimeout("wait timeout expired") from None


async def _drive_conn(gen: Any, seconds: float | None) -> Any:
    """Like `_drive` for a connection generator, whose socket may change."""
    try:
        fileno, wait = next(gen)
        with trio.fail_after(seconds) if seconds else nullcontext():
            while True:
                fileno, wait = gen.send(await _wait_fd(fileno, wait))
    except StopIteration as done:
        return done.value
    except trio.TooSlowError:
        raise e._WaitTimeout("wait timeout expired") from None


def socket_has_data(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection's socket has something to read.

    An idle pooled connection (no LISTEN) is sent nothing by the server except
    its death notice: a restart's FATAL "terminating connection" and EOF, or
    just EOF when the backend was killed. One non-blocking `poll` finds that
    before the connection is handed out, without a round trip.
    """
    try:
        readable, _ = _poll_now(conn.pgconn.socket, select.POLLIN)
    except (OSError, ValueError, psycopg.OperationalError):
        return True
    return bool(readable)


async def take_if_free(primitive: trio.Lock | trio.Semaphore) -> bool:
    """Take `primitive` at once if it is free, with no scheduling point; whether
    it was taken. For what every statement takes (ConnectionLock, the pool's
    slots), where `acquire` always yields to the run loop (issue 29).

    What `acquire` guaranteed still holds: a task already cancelled is stopped
    here (`checkpoint_if_cancelled` yields only then), before anything is sent;
    and `acquire_nowait` refuses while a task is queued, so a free lock or slot
    never goes past a waiter. When it returns False the caller waits its turn.
    """
    await trio.lowlevel.checkpoint_if_cancelled()
    try:
        primitive.acquire_nowait()
    except trio.WouldBlock:
        return False
    return True


class ConnectionLock:
    """psycopg's per-connection lock (`async with conn.lock` around every
    statement, fetch and pipeline step), taken without a scheduling point when it
    is free — which, a connection being one task's at a time, it nearly always is.

    `trio.Lock.acquire` always yields to the scheduler: one pass of trio's run
    loop (and an epoll call) per statement and per fetch, a dozen per transaction
    of three statements, where the socket waits themselves are two. Taken with
    `acquire_nowait` when free, a transaction of three statements cost 338 µs
    against 405 (issue 29; 2,000 transactions on this machine's PostgreSQL,
    2026-12-07). Contended, it waits on the `trio.Lock` in FIFO order, as
    before (`take_if_free` says what else still holds).
    """

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = trio.Lock()

    async def __aenter__(self) -> None:
        if not await take_if_free(self._lock):
            await self._lock.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self._lock.release()


class TrioConnection(psycopg.AsyncConnection[Any]):
    """`psycopg.AsyncConnection` whose waiting is done by trio (see module doc)."""

    def __init__(self, pgconn: Any, row_factory: Any = None) -> None:
        if row_factory is None:
            super().__init__(pgconn)
        else:
            super().__init__(pgconn, row_factory)
        self.lock = ConnectionLock()  # type: ignore[assignment]

    @classmethod
    async def connect(  # type: ignore[override]
        cls,
        conninfo: str = "",
        *,
        autocommit: bool = False,
        prepare_threshold: int | None = 5,
        row_factory: Any = None,
        **kwargs: Any,
    ) -> TrioConnection:
        params = await cls._get_connection_params(conninfo, **kwargs)
        timeout = timeout_from_conninfo(params)
        attempts = await trio.to_thread.run_sync(conninfo_attempts, params, limiter=_DNS_LIMITER)
        errors: list[e.Error] = []
        for attempt in attempts:
            try:
                conn = await _drive_conn(
                    cls._connect_gen(make_conninfo("", **attempt)), timeout or None
                )
            except e._WaitTimeout:
                errors.append(e.ConnectionTimeout("connection timeout expired"))
            except e.Error as exc:
                errors.append(exc)
            else:
                break
        else:
            if not errors:
                raise e.OperationalError("no host to connect to")
            raise errors[-1].with_traceback(None)
        assert isinstance(conn, TrioConnection)
        conn._autocommit = bool(autocommit)
        if row_factory is not None:
            conn.row_factory = row_factory
        conn.prepare_threshold = prepare_threshold
        return conn

    async def wait(  # type: ignore[override]
        self,
        gen: Any,
        interval: float = 0.0,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Any:
        """Drive `gen` on trio. A cancellation while a statement runs asks the
        server to cancel it and waits (shielded, bounded) for the connection to
        be idle again; if it is not, the connection is closed. Either way the
        connection is never left mid-query for the next user."""
        pending: list[Wait] = []
        try:
            return await _drive(gen, self.pgconn.socket, timeout, pending)
        except trio.Cancelled:
            if self.pgconn.transaction_status == _ACTIVE:
                with trio.CancelScope(shield=True):
                    await self._cancel_and_drain(gen, pending)
            raise

    async def _cancel_and_drain(self, gen: Any, pending: list[Wait]) -> None:
        with trio.move_on_after(_CANCEL_GRACE_SECONDS) as scope:
            try:
                await trio.to_thread.run_sync(self.cancel, limiter=_DNS_LIMITER)
                if pending:
                    await _drive(gen, self.pgconn.socket, None, pending)
            except (psycopg.Error, StopIteration):
                pass  # QueryCanceled, as expected, or the connection went
        if scope.cancelled_caught or self.pgconn.transaction_status == _ACTIVE:
            self.pgconn.finish()
