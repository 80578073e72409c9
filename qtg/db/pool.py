"""The database edge: a psycopg pool driven from trio, transactions and savepoints.

psycopg's async API is asyncio-only, so qtg uses the sync `ConnectionPool` and
runs each statement through `trio.to_thread.run_sync` (DESIGN §9). Everything
above this module speaks `Database` and `Tx`, so the mechanism can change
without touching a service.

Cancellation: trio cannot interrupt a statement running in a thread, so a
thread call is never abandoned (the connection would be returned to the pool
mid-query); every statement is bounded by `statement_timeout` instead, and
rollback and release run shielded.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import msgspec
import psycopg
import trio
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb, set_json_dumps, set_json_loads
from psycopg_pool import ConnectionPool

from qtg.db.queries import Query

__all__ = ["Database", "Jsonb", "Savepoint", "Tx"]

Params = Mapping[str, Any] | Sequence[Any] | None

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
        """One transaction on one pooled connection: commit on success, else roll back."""
        if not self._opened:  # a pool created for later use (e.g. a provider's own)
            await self.open()
        conn = await trio.to_thread.run_sync(
            lambda: self._pool.getconn(timeout=self.connect_timeout)
        )
        tx = Tx(conn)
        try:
            yield tx
            await trio.to_thread.run_sync(conn.commit)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_rollback_quietly, conn)
            raise
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._pool.putconn, conn)

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
    """A transaction in progress. Methods take a `Query` (never a string) and params."""

    __slots__ = ("_conn", "_savepoints")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self._savepoints = itertools.count(1)

    async def execute(self, query: Query, params: Params = None) -> int:
        return await trio.to_thread.run_sync(self._execute, query, params)

    async def fetch(self, query: Query, params: Params = None) -> list[dict[str, Any]]:
        return await trio.to_thread.run_sync(self._fetch, query, params)

    async def fetchrow(self, query: Query, params: Params = None) -> dict[str, Any] | None:
        return await trio.to_thread.run_sync(self._fetchrow, query, params)

    async def fetchval(self, query: Query, params: Params = None) -> Any:
        row = await self.fetchrow(query, params)
        if row is None:
            return None
        return next(iter(row.values()))

    async def executemany(self, query: Query, params_seq: Sequence[Params]) -> None:
        def run() -> None:
            with self._conn.cursor() as cur:
                cur.executemany(query.text, params_seq)  # type: ignore[arg-type]

        await trio.to_thread.run_sync(run)

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[Savepoint]:
        """A savepoint: released on success, rolled back on exception or `rollback()`.

        This is the reference's miss-only savepoint: a claim that misses calls
        `rollback()`, which releases any partial locks the skipped attempt took,
        while the outer transaction and its other locks go on.
        """
        sp = Savepoint(self, f"qtg_sp_{next(self._savepoints)}")
        await sp._begin()
        try:
            yield sp
        except BaseException:
            if not sp.done:
                with trio.CancelScope(shield=True):
                    await sp.rollback()
            raise
        if not sp.done:
            await sp.release()

    # -- thread side
    def _execute(self, query: Query, params: Params) -> int:
        with self._conn.cursor() as cur:
            cur.execute(query.text, params)  # type: ignore[arg-type]
            return cur.rowcount

    def _fetch(self, query: Query, params: Params) -> list[dict[str, Any]]:
        with self._conn.cursor() as cur:
            cur.execute(query.text, params)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def _fetchrow(self, query: Query, params: Params) -> dict[str, Any] | None:
        with self._conn.cursor() as cur:
            cur.execute(query.text, params)  # type: ignore[arg-type]
            return cur.fetchone() if cur.description else None

    def _control(self, statement: str) -> None:
        self._conn.execute(statement)  # type: ignore[arg-type]


class Savepoint:
    __slots__ = ("done", "name", "tx")

    def __init__(self, tx: Tx, name: str) -> None:
        self.tx = tx
        self.name = name
        self.done = False

    async def _begin(self) -> None:
        await trio.to_thread.run_sync(self.tx._control, _SAVEPOINT.format(self.name))

    async def rollback(self) -> None:
        """Undo everything since the savepoint, including row locks, and end it."""
        self.done = True
        await trio.to_thread.run_sync(self.tx._control, _ROLLBACK_TO.format(self.name))
        await trio.to_thread.run_sync(self.tx._control, _RELEASE.format(self.name))

    async def release(self) -> None:
        self.done = True
        await trio.to_thread.run_sync(self.tx._control, _RELEASE.format(self.name))
