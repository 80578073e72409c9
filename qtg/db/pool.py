"""The database edge: a psycopg pool driven from trio, transactions and savepoints.

psycopg's async API is asyncio-only, so qtg uses the sync `ConnectionPool` and
runs statements through `trio.to_thread.run_sync` (DESIGN §9). A thread hop
costs several times a short statement, so the API is shaped to need few: a
transaction takes its connection in its first hop and commits in its last;
`Tx.defer` queues writes that go pipelined with the next statement or the
commit; `Tx.batch` runs plain steps (a claim walk with its savepoints, the
reads after it) in one hop. Everything above this module speaks `Database`,
`Tx` and `Batch`, so the mechanism can change without touching a service.

Cancellation: trio cannot interrupt a statement running in a thread, so a
thread call is never abandoned (the connection would be returned to the pool
mid-query); every statement is bounded by `statement_timeout` instead, and
rollback and release run shielded.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeVar

import msgspec
import psycopg
import trio
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb, set_json_dumps, set_json_loads
from psycopg_pool import ConnectionPool

from qtg.db.queries import Query

__all__ = ["Batch", "Database", "Jsonb", "Tx"]

Params = Mapping[str, Any] | Sequence[Any] | None
T = TypeVar("T")

# Transaction-control statements (not queries, so they do not live in sql/).
_SAVEPOINT = "SAVEPOINT {}"
_RELEASE = "RELEASE SAVEPOINT {}"
_ROLLBACK_TO = "ROLLBACK TO SAVEPOINT {}"


def connection_options(*, statement_timeout_ms: int, callback_max_attempts: int) -> str:
    """libpq `options` applied to every pooled connection."""
    return (
        f"-c statement_timeout={int(statement_timeout_ms)}"
        f" -c qtg.callback_max_attempts={int(callback_max_attempts)}"
    )


class Database:
    """A pool of connections to one PostgreSQL database, usable from trio tasks."""

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        statement_timeout_ms: int = 30_000,
        callback_max_attempts: int = 5,
        application_name: str = "qtg",
        connect_timeout: float = 10.0,
    ) -> None:
        self.dsn = dsn
        self.connect_timeout = connect_timeout
        self._pool = ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            open=False,
            kwargs={
                "autocommit": False,
                "row_factory": dict_row,
                "application_name": application_name,
                "options": connection_options(
                    statement_timeout_ms=statement_timeout_ms,
                    callback_max_attempts=callback_max_attempts,
                ),
            },
            configure=_configure,
            # A background reconnect gives up at once; the next getconn grows the
            # pool again, so after a database restart the first pass that finds
            # the server back gets a fresh connection.
            reconnect_timeout=0,
            name=application_name,
        )
        self._opened = False
        self._open_lock: trio.Lock | None = None

    async def open(self, *, wait: bool = True) -> None:
        """Open the pool (once: later calls return at once)."""
        if self._opened:
            return
        if self._open_lock is None:
            self._open_lock = trio.Lock()
        async with self._open_lock:
            if not self._opened:
                await trio.to_thread.run_sync(
                    lambda: self._pool.open(wait=wait, timeout=self.connect_timeout)
                )
                self._opened = True

    async def close(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(lambda: self._pool.close(timeout=5.0))
        self._opened = False

    async def __aenter__(self) -> Database:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Tx]:
        """One transaction on one pooled connection: commit on success, else roll back.

        The connection is taken from the pool in the thread hop of the first
        statement, and the commit (with any deferred writes) and the return
        to the pool happen in one last hop, so a transaction of k statements
        costs about k + 1 thread hops, not k + 3.
        """
        if not self._opened:  # a pool created for later use (e.g. a provider's own)
            await self.open()
        tx = Tx(self._pool, self.connect_timeout)
        try:
            yield tx
            # A cancellation can land at this call's own checkpoint, before the
            # commit runs: the except below still gives the connection back.
            await trio.to_thread.run_sync(tx._finish, True)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(tx._finish, False)  # a no-op once finished
            raise

    # Single-statement conveniences, each in its own transaction.
    async def execute(self, query: Query, params: Params = None) -> int:
        async with self.transaction() as tx:
            return await tx.execute(query, params)

    async def fetch(self, query: Query, params: Params = None) -> list[dict[str, Any]]:
        async with self.transaction() as tx:
            return await tx.fetch(query, params)

    async def fetchrow(self, query: Query, params: Params = None) -> dict[str, Any] | None:
        async with self.transaction() as tx:
            return await tx.fetchrow(query, params)

    async def fetchval(self, query: Query, params: Params = None) -> Any:
        async with self.transaction() as tx:
            return await tx.fetchval(query, params)

    def stats(self) -> dict[str, int]:
        return self._pool.get_stats()


def _configure(conn: psycopg.Connection[Any]) -> None:
    # jsonb in and out through msgspec: faster than the stdlib, and Decimal
    # amounts are written as strings, never floats.
    set_json_dumps(msgspec.json.encode, conn)
    set_json_loads(msgspec.json.decode, conn)


def _rollback_quietly(conn: psycopg.Connection[Any]) -> None:
    if conn.closed:
        return
    with suppress(psycopg.Error):  # a broken connection is discarded by the pool on putconn
        conn.rollback()


class Tx:
    """A transaction in progress. Methods take a `Query` (never a string) and params.

    Every method runs in one thread hop. `defer()` queues a write whose result
    nobody reads; queued writes are sent, in order and pipelined, ahead of the
    next statement or the commit. An error in one surfaces there and rolls the
    whole transaction back, as it would have at its own call.
    """

    __slots__ = ("_conn", "_pending", "_pool", "_savepoints", "_timeout")

    def __init__(self, pool: ConnectionPool, timeout: float) -> None:
        self._pool = pool
        self._timeout = timeout
        self._conn: psycopg.Connection[Any] | None = None
        self._pending: list[tuple[Query, Params]] = []
        self._savepoints = itertools.count(1)

    def defer(self, query: Query, params: Params = None) -> None:
        """Queue a write to be sent with the next statement or the commit."""
        self._pending.append((query, params))

    async def execute(self, query: Query, params: Params = None) -> int:
        return await trio.to_thread.run_sync(self._run, _execute, query, params)

    async def fetch(self, query: Query, params: Params = None) -> list[dict[str, Any]]:
        return await trio.to_thread.run_sync(self._run, _fetch, query, params)

    async def fetchrow(self, query: Query, params: Params = None) -> dict[str, Any] | None:
        return await trio.to_thread.run_sync(self._run, _fetchrow, query, params)

    async def fetchval(self, query: Query, params: Params = None) -> Any:
        row = await self.fetchrow(query, params)
        if row is None:
            return None
        return next(iter(row.values()))

    async def batch(self, fn: Callable[[Batch], T]) -> T:
        """Run `fn` — plain, synchronous database steps — in one thread hop.

        For a sequence of statements with nothing but Python between them (a
        claim walk, a claim and the reads that follow it), this costs one hop
        instead of one per statement. `fn` must not block on anything else.
        """
        return await trio.to_thread.run_sync(
            self._run, lambda conn, _q, _p: fn(Batch(self, conn)), None, None
        )

    # -- thread side
    def _run(self, fn: Any, query: Any, params: Params) -> Any:
        if self._conn is None:
            self._conn = self._pool.getconn(timeout=self._timeout)
        self._flush(self._conn)
        return fn(self._conn, query, params)

    def _flush(self, conn: psycopg.Connection[Any]) -> None:
        pending, self._pending = self._pending, []
        if len(pending) == 1:
            _execute(conn, *pending[0])
        elif pending:
            with conn.pipeline(), conn.cursor() as cur:
                for query, params in pending:
                    cur.execute(query.text, params)  # type: ignore[arg-type]

    def _finish(self, commit: bool) -> None:
        """Commit (sending deferred writes first) or roll back; always give the
        connection back. A failed commit rolls back and raises."""
        if commit and self._pending and self._conn is None:  # deferred writes only
            self._conn = self._pool.getconn(timeout=self._timeout)
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if commit:
                self._flush(conn)
                conn.commit()
            else:
                _rollback_quietly(conn)
        except BaseException:
            _rollback_quietly(conn)
            raise
        finally:
            self._pending = []
            self._pool.putconn(conn)


def _execute(conn: psycopg.Connection[Any], query: Query, params: Params) -> int:
    with conn.cursor() as cur:
        cur.execute(query.text, params)  # type: ignore[arg-type]
        return cur.rowcount


def _fetch(conn: psycopg.Connection[Any], query: Query, params: Params) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(query.text, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def _fetchrow(conn: psycopg.Connection[Any], query: Query, params: Params) -> dict[str, Any] | None:
    with conn.cursor() as cur:
        cur.execute(query.text, params)  # type: ignore[arg-type]
        return cur.fetchone() if cur.description else None


def _rollback_to(conn: psycopg.Connection[Any], name: str) -> None:
    conn.execute(_ROLLBACK_TO.format(name))  # type: ignore[arg-type]
    conn.execute(_RELEASE.format(name))  # type: ignore[arg-type]


class Batch:
    """The thread side of a transaction, for `Tx.batch`: the same statements, run now."""

    __slots__ = ("_conn", "_tx")

    def __init__(self, tx: Tx, conn: psycopg.Connection[Any]) -> None:
        self._tx = tx
        self._conn = conn

    def execute(self, query: Query, params: Params = None) -> int:
        return _execute(self._conn, query, params)

    def fetch(self, query: Query, params: Params = None) -> list[dict[str, Any]]:
        return _fetch(self._conn, query, params)

    def fetchrow(self, query: Query, params: Params = None) -> dict[str, Any] | None:
        return _fetchrow(self._conn, query, params)

    def claim(self, query: Query, params: Params = None) -> dict[str, Any] | None:
        """Run a claim query under a savepoint: on a miss roll the savepoint back,
        which releases any partial lock the skipped attempt took (the reference's
        miss-only savepoint); on a hit release it and keep the locks."""
        name = f"qtg_sp_{next(self._tx._savepoints)}"
        self._conn.execute(_SAVEPOINT.format(name))  # type: ignore[arg-type]
        try:
            row = _fetchrow(self._conn, query, params)
        except BaseException:
            _rollback_to(self._conn, name)
            raise
        if row is None:
            _rollback_to(self._conn, name)
        else:
            self._conn.execute(_RELEASE.format(name))  # type: ignore[arg-type]
        return row
