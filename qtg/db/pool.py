"""The database edge: a trio-native connection pool, transactions and savepoints.

Connections are `TrioConnection`s (qtg/db/connection.py): psycopg's protocol
generators driven by trio, so a statement is one socket round trip and no
thread hop, and checkout waits on a trio semaphore, never parked in a thread.

Round trips (issue 15). Pooled connections are in psycopg's autocommit mode
and `Tx` writes its own BEGIN and COMMIT, so that they travel with the
statements beside them instead of each costing a round trip of its own
(psycopg's implicit BEGIN is sent, and in pipeline mode synced, alone):
- a single-statement convenience (`Database.fetch` …) is one round trip: a
  statement outside a transaction block is its own transaction — exactly as
  atomic, and committed (triggers, NOTIFY) when it returns;
- a transaction's first statement goes in one pipeline with its BEGIN and the
  writes deferred before it; a later one with the writes deferred since;
- the commit goes in one pipeline with the deferred writes (a transaction of
  deferred writes only — BEGIN, writes, COMMIT — is one round trip).
What this relies on in psycopg (pinned exactly; `tests/test_pool.py` pins
the behaviour): in autocommit mode it sends no BEGIN of its own; `rollback()`
and `commit()` end a transaction opened by our BEGIN (they look at the
server's transaction status, not at the autocommit flag); in pipeline mode a
cursor's results are attached at the pipeline's sync, and a failed statement
raises there, after which the rest of that pipeline is not executed.
That is also what isolates the API from the workers (issue 17): each
`Database` is its own pool with its own size and checkout timeout, and nothing
is shared between pools — not connections, not threads — so a flood of API
requests that exhausts the API pool cannot delay a worker's checkout.

Everything above this module speaks `Database` and `Tx`, so the mechanism can
change without touching a service.

Guarantees the tests pin (tests/test_pool.py):
- a connection goes back to the pool idle, or is closed — never mid-query or
  mid-transaction, whatever happens to the task (a cancelled statement is
  cancelled on the server and drained, shielded and bounded);
- a connection the server has dropped (restart, terminated backend) is not
  handed out: an idle connection whose socket has anything to read is
  discarded on checkout, without a round trip;
- the commit and the rollback run shielded, so a cancellation that lands on
  them neither leaks the connection nor leaves the transaction open.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Hashable, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeVar

import msgspec
import psycopg
import trio
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb, set_json_dumps, set_json_loads

from qtg.db.connection import TrioConnection, socket_has_data, take_if_free
from qtg.db.deferred import Deferred, Params
from qtg.db.queries import Query

__all__ = ["Database", "Jsonb", "PoolTimeout", "ReadOnlyServer", "Tx", "session_params"]

T = TypeVar("T")

# Transaction-control statements (not queries, so they do not live in sql/).
_BEGIN = "BEGIN"
_COMMIT = "COMMIT"
_SAVEPOINT = "SAVEPOINT {}"
_RELEASE = "RELEASE SAVEPOINT {}"
_ROLLBACK_TO = "ROLLBACK TO SAVEPOINT {}"

_IDLE = pq.TransactionStatus.IDLE

#: TCP keepalives on every pooled connection, so a peer that vanished without
#: closing (a partition, a dead host) is noticed in seconds, not hours; and
#: tcp_user_timeout, so data sent to a dead primary and never acknowledged
#: fails the connection after that many ms instead of retransmitting for ~15 min.
_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 3,
    "keepalives_count": 3,
    "tcp_user_timeout": 15_000,
}

#: How long (s) a connection above min_size may sit idle before it is closed,
#: so a pool that grew during a burst shrinks back.
MAX_IDLE_SECONDS = 30.0

#: Bound on a shielded commit or rollback (s): statement_timeout bounds the
#: server; this bounds a network that stops answering.
_FINISH_TIMEOUT_SECONDS = 30.0


class PoolTimeout(psycopg.OperationalError):
    """No connection became free within the checkout timeout (the API maps it to 503)."""


class ReadOnlyServer(psycopg.OperationalError):
    """A statement met a read-only server (a standby, or a primary demoted under
    us): the connection is closed, never reused, and the error is a lost
    connection to every caller — nothing was written; the next checkout connects
    anew, and libpq's target_session_attrs=read-write only accepts a primary."""


def session_params(dsn: str) -> dict[str, Any]:
    """Connection parameters every qtg connection adds to `dsn` (issue 27): only a
    read-write server is accepted, unless the DSN says otherwise (libpq tries
    each host of a multi-host DSN in turn, so after a failover it finds the new
    primary); TCP keepalives and tcp_user_timeout notice a dead peer."""
    params: dict[str, Any] = dict(_KEEPALIVES)
    try:
        named = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        named = {}  # unparsable: connecting reports it, naming the setting (runtime open_pool)
    if "target_session_attrs" not in named:
        params["target_session_attrs"] = "read-write"
    return params


def _read_only_refused(conn: TrioConnection, exc: BaseException) -> ReadOnlyServer:
    """A read-only server's refusal as a lost connection (`ReadOnlyServer`): the
    connection is closed first, so it is never handed out again."""
    _close(conn)
    return ReadOnlyServer(f"the server is read-only (a standby?): {exc}")


#: Planner settings of every pooled connection (issue 44 item 4). A connection
#: keeps the generic plan of each statement it runs often (psycopg prepares it
#: at its fifth call); made while a table is empty — the first minutes of any
#: deployment — that plan is a sequential scan (an empty table is cheaper to
#: read whole), and nothing makes it again as the table grows unless its
#: statistics change (autovacuum off, or lagging a burst). On a fresh database
#: 34 of the runtime's statements kept such a plan through a 10k-request burst
#: (sql/observe/take_lease.sql among them: 144 of 190 active samples in the
#: issue's waiting run); an ANALYZE after the burst re-planned all but 9, but
#: only once it ran. With sequential and bitmap scans disabled (a cost penalty,
#: not a ban: a table no index serves is still read whole) the plan made on
#: never-analyzed empty tables is the index walk or probe each statement is
#: written for; statistics that say "empty" are left to
#: qtg.services.statistics. tests/test_plans_growth.py prepares every query on
#: empty tables, grows them, and checks the plan each keeps.
PLANNER_SETTINGS: dict[str, str] = {"enable_seqscan": "off", "enable_bitmapscan": "off"}


def connection_options(
    *, statement_timeout_ms: int, callback_max_attempts: int, synchronous_commit: str | None = None
) -> str:
    """libpq `options` applied to every pooled connection."""
    options = (
        f"-c statement_timeout={int(statement_timeout_ms)}"
        f" -c qtg.callback_max_attempts={int(callback_max_attempts)}"
    )
    for name, value in PLANNER_SETTINGS.items():
        options += f" -c {name}={value}"
    if synchronous_commit is not None:
        options += f" -c synchronous_commit={synchronous_commit}"
    return options


class Database:
    """A trio-native pool of connections to one PostgreSQL database.

    `max_size` bounds the connections; `checkout_timeout` bounds how long a
    transaction waits for one (then `PoolTimeout`). Connections are opened on
    demand, up to `max_size`; `min_size` are opened by `open()` and kept.
    """

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
        checkout_timeout: float | None = None,
        synchronous_commit: str | None = None,
        pgbouncer: bool = False,
    ) -> None:
        if min_size > max_size:
            raise ValueError(f"min_size {min_size} is larger than max_size {max_size}")
        self.dsn = dsn
        self.connect_timeout = connect_timeout
        self.checkout_timeout = connect_timeout if checkout_timeout is None else checkout_timeout
        self.min_size = min_size
        self.max_size = max_size
        self.pgbouncer = pgbouncer
        self._connect_kwargs: dict[str, Any] = {
            **session_params(dsn),
            "autocommit": True,  # Tx sends BEGIN/COMMIT itself (module docstring)
            "row_factory": dict_row,
            "application_name": application_name,
            "connect_timeout": max(1, round(connect_timeout)),
        }
        if pgbouncer:
            # Transaction pooling: consecutive transactions may run on different
            # server connections, so nothing prepared server-side survives, and
            # pgbouncer refuses the startup `options` (the role's settings apply:
            # docs/operations/deployment.md).
            self._connect_kwargs["prepare_threshold"] = None
        else:
            self._connect_kwargs["options"] = connection_options(
                statement_timeout_ms=statement_timeout_ms,
                callback_max_attempts=callback_max_attempts,
                synchronous_commit=synchronous_commit,
            )
        # Lazily created: a Database may be built outside trio (tests, the CLI).
        self._slots: trio.Semaphore | None = None
        self._idle: deque[tuple[TrioConnection, float]] = deque()
        self._out = 0
        self._waiting = 0
        self._opened = False
        self._closed = False

    # ------------------------------------------------------------ lifecycle
    async def open(self, *, wait: bool = True) -> None:
        """Open the pool: connect `min_size` connections (with `wait`, failing
        with `PoolTimeout` if the server does not answer in time)."""
        if self._opened:
            return
        self._slots = self._slots or trio.Semaphore(self.max_size)
        self._closed = False
        self._opened = True
        if not wait:
            return
        try:
            with trio.fail_after(self.connect_timeout):
                conns = [await self._connect() for _ in range(self.min_size - len(self._idle))]
        except (trio.TooSlowError, psycopg.OperationalError) as exc:
            self._opened = False
            raise PoolTimeout(
                f"could not open {self.min_size} connection(s) within "
                f"{self.connect_timeout:g} s: {exc}"
            ) from exc
        now = time.monotonic()
        self._idle.extend((c, now) for c in conns)

    async def close(self) -> None:
        """Close every idle connection; the ones in use close when given back."""
        self._closed = True
        self._opened = False
        while self._idle:
            conn, _ = self._idle.popleft()
            _close(conn)

    async def __aenter__(self) -> Database:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------ checkout
    async def _connect(self) -> TrioConnection:
        conn = await TrioConnection.connect(self.dsn, **self._connect_kwargs)
        _configure(conn)
        return conn

    async def getconn(self) -> TrioConnection:
        """A live connection, waiting at most `checkout_timeout` for a free slot."""
        if not self._opened:
            await self.open()
        assert self._slots is not None
        if not await take_if_free(self._slots):  # a free slot: no scheduling point
            await self._wait_for_slot()
        try:
            conn = self._take_idle()
            if conn is None:
                with trio.fail_after(self.connect_timeout):
                    conn = await self._connect()
        except BaseException:
            self._slots.release()
            raise
        self._out += 1
        return conn

    async def _wait_for_slot(self) -> None:
        assert self._slots is not None
        self._waiting += 1
        try:
            with trio.move_on_after(self.checkout_timeout) as waited:
                await self._slots.acquire()
        finally:
            self._waiting -= 1
        if waited.cancelled_caught:
            raise PoolTimeout(
                f"no database connection free within {self.checkout_timeout:g} s "
                f"({self.max_size} in use)"
            )

    def _take_idle(self) -> TrioConnection | None:
        """The most recently used idle connection that is still alive (LIFO keeps
        the working set warm and lets the rest age out)."""
        while self._idle:
            conn, _ = self._idle.pop()
            if _usable(conn):
                return conn
            _close(conn)
        return None

    def putconn(self, conn: TrioConnection) -> None:
        """Give a connection back: idle if it is clean, else closed."""
        assert self._slots is not None
        self._out -= 1
        try:
            if self._closed or not _usable(conn):
                _close(conn)
            else:
                now = time.monotonic()
                self._idle.append((conn, now))
                self._trim(now)
        finally:
            self._slots.release()

    def _trim(self, now: float) -> None:
        while len(self._idle) > self.min_size and now - self._idle[0][1] > MAX_IDLE_SECONDS:
            conn, _ = self._idle.popleft()
            _close(conn)

    def stats(self) -> dict[str, int]:
        """psycopg_pool-style figures: connections open, idle, and tasks waiting."""
        return {
            "pool_min": self.min_size,
            "pool_max": self.max_size,
            "pool_size": self._out + len(self._idle),
            "pool_available": len(self._idle),
            "requests_waiting": self._waiting,
        }

    # ------------------------------------------------------------ transactions
    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Tx]:
        """One transaction on one pooled connection: commit on success, else roll back.

        The connection is taken at the first statement (a transaction of
        deferred writes only takes it at commit), and given back after the
        commit or rollback, which run shielded.
        """
        tx = Tx(self)
        try:
            yield tx
            # A cancellation already pending means "stop": roll back, do not commit.
            await trio.lowlevel.checkpoint_if_cancelled()
            with trio.CancelScope(shield=True):
                await tx._finish(commit=True)
        except BaseException:
            with trio.CancelScope(shield=True):
                await tx._finish(commit=False)  # a no-op once finished
            raise

    # Single-statement conveniences: one statement outside a transaction block,
    # which PostgreSQL runs as a transaction of its own — one round trip.
    @asynccontextmanager
    async def _statement(self, query: Query, params: Params) -> AsyncIterator[Any]:
        conn = await self.getconn()
        try:
            async with conn.cursor() as cur:
                try:
                    await cur.execute(query.text, params)  # type: ignore[arg-type]
                except psycopg.errors.ReadOnlySqlTransaction as exc:
                    raise _read_only_refused(conn, exc) from exc
                yield cur
        finally:
            self.putconn(conn)  # closed instead if a cancellation left it unclean

    async def execute(self, query: Query, params: Params = None) -> int:
        async with self._statement(query, params) as cur:
            return int(cur.rowcount)

    async def fetch(self, query: Query, params: Params = None) -> list[dict[str, Any]]:
        async with self._statement(query, params) as cur:
            return await cur.fetchall() if _has_rows(cur) else []

    async def fetchrow(self, query: Query, params: Params = None) -> dict[str, Any] | None:
        async with self._statement(query, params) as cur:
            return await cur.fetchone() if _has_rows(cur) else None

    async def fetchval(self, query: Query, params: Params = None) -> Any:
        row = await self.fetchrow(query, params)
        if row is None:
            return None
        return next(iter(row.values()))


def _configure(conn: TrioConnection) -> None:
    # jsonb in and out through msgspec: faster than the stdlib, and Decimal
    # amounts are written as strings, never floats.
    set_json_dumps(msgspec.json.encode, conn)
    set_json_loads(msgspec.json.decode, conn)


_TUPLES_OK = pq.ExecStatus.TUPLES_OK


def _has_rows(cur: Any) -> bool:
    """Whether the statement returned rows (a SELECT, a RETURNING). Not
    `cur.description`, which builds a Column object per column on every call
    (~65 µs for a wide claim row, measured)."""
    result = cur.pgresult
    return result is not None and result.status == _TUPLES_OK


def _usable(conn: TrioConnection) -> bool:
    return (
        not conn.closed
        and not conn.broken
        and conn.pgconn.status == pq.ConnStatus.OK
        and conn.pgconn.transaction_status == _IDLE
        # A cancellation while a pipeline waited for its sync leaves the
        # connection in pipeline mode with results on their way ("cannot exit
        # pipeline mode while busy"), though it looks idle: the next transaction
        # on it would read them ("unexpected result status from query:
        # PIPELINE_SYNC").
        and conn.pgconn.pipeline_status == pq.PipelineStatus.OFF
        and not socket_has_data(conn)
    )


def _close(conn: TrioConnection) -> None:
    with suppress(Exception):
        conn.pgconn.finish()


class Tx:
    """A transaction in progress. Methods take a `Query` (never a string) and params.

    `defer()` queues a write whose result nobody reads; queued writes are sent,
    in order and pipelined, with the next statement or the commit. An error
    in one surfaces there and rolls the whole transaction back, as it would
    have at its own call. BEGIN travels with the first statement (or with the
    commit of a transaction of deferred writes only): see the module docstring.
    """

    __slots__ = ("_before", "_begun", "_committed", "_conn", "_db", "_pending", "_savepoints")

    def __init__(self, db: Database) -> None:
        self._db = db
        self._conn: TrioConnection | None = None
        self._begun = False  # BEGIN sent on _conn
        self._pending = Deferred()
        self._before: list[tuple[Query, Params]] = []
        self._savepoints = itertools.count(1)
        self._committed = False  # by fetch_each(commit=True): nothing may follow

    def defer(self, query: Query, params: Params = None) -> None:
        """Queue a write to be sent with the next statement or the commit."""
        self._check_open()
        self._pending.statement(query, params)

    def defer_row(
        self, query: Query, row: Mapping[str, Any], *, unit: Hashable, row_id: Hashable
    ) -> None:
        """Queue one row of a write written over arrays (`query`: each parameter
        a list, one element per row), sent like `defer`'s writes: the rows of one
        query go out as one statement where no write of the same `unit` lies
        between them and no row is written twice (qtg.db.deferred)."""
        self._check_open()
        self._pending.row(query, row, unit=unit, row_id=row_id)

    def defer_before(self, query: Query, params: Params = None) -> None:
        """Queue a write to run in a transaction of its OWN, committed before
        this transaction begins, yet sent in the same round trip as its BEGIN
        (BEGIN, the write, COMMIT, then this transaction's BEGIN, in one
        pipeline). Only before the first statement. Its failure raises where
        the BEGIN is sent, and nothing after it in that pipeline runs."""
        self._check_open()
        if self._begun:
            raise RuntimeError("defer_before() after the transaction began")
        self._before.append((query, params))

    @asynccontextmanager
    async def _run(self, text: str, params: Params = None) -> AsyncIterator[Any]:
        """Run one statement of the transaction; its cursor. The BEGIN (first
        statement) and the writes deferred so far go in the same round trip."""
        self._check_open()
        if self._conn is None:
            self._conn = await self._db.getconn()
        conn = self._conn
        async with conn.cursor() as cur:
            try:
                if self._begun and not self._pending:
                    await cur.execute(text, params)  # type: ignore[arg-type]
                else:
                    async with _pipeline(conn):
                        await self._send_queued(conn)
                        await cur.execute(text, params)  # type: ignore[arg-type]
                    # the pipeline's sync (one round trip) brought every result back
            except psycopg.errors.ReadOnlySqlTransaction as exc:
                raise _read_only_refused(conn, exc) from exc
            yield cur

    async def _send_queued(self, conn: TrioConnection) -> None:
        """Queue BEGIN (if not yet sent) and the deferred writes on `conn`'s
        pipeline; they are sent with what follows, at the pipeline's sync."""
        pending = self._pending.take()
        before, self._before = self._before, []
        async with conn.cursor() as cur:
            for query, params in before:  # each committed in its own transaction
                await cur.execute(_BEGIN)
                await cur.execute(query.text, params)  # type: ignore[arg-type]
                await cur.execute(_COMMIT)
            if not self._begun:
                self._begun = True
                await cur.execute(_BEGIN)
            for query, params in pending:
                await cur.execute(query.text, params)  # type: ignore[arg-type]

    async def execute(self, query: Query, params: Params = None) -> int:
        async with self._run(query.text, params) as cur:
            return int(cur.rowcount)

    async def fetch(self, query: Query, params: Params = None) -> list[dict[str, Any]]:
        async with self._run(query.text, params) as cur:
            return await cur.fetchall() if _has_rows(cur) else []

    async def fetchrow(self, query: Query, params: Params = None) -> dict[str, Any] | None:
        async with self._run(query.text, params) as cur:
            return await cur.fetchone() if _has_rows(cur) else None

    async def fetchval(self, query: Query, params: Params = None) -> Any:
        row = await self.fetchrow(query, params)
        if row is None:
            return None
        return next(iter(row.values()))

    async def fetch_each(
        self, *statements: tuple[Query, Params], commit: bool = False
    ) -> list[list[dict[str, Any]]]:
        """Run `statements` in ONE round trip (one pipeline, with the BEGIN and
        the writes deferred so far); the rows of each, in order. Each is still
        a statement of its own — its own snapshot, taken when the one before
        it has finished — so a later one sees the earlier ones' effects (a
        lock taken, a transaction-local setting written). A failing statement
        raises, and the ones after it were not executed.

        `commit`: the COMMIT goes in the same pipeline, after the statements —
        a whole transaction in one round trip (the observer's claim and lease).
        It is then over: another statement or deferred write raises
        RuntimeError; the block's end only gives the connection back. A failed
        COMMIT raises here, and the block's end rolls back."""
        self._check_open()
        if self._conn is None:
            self._conn = await self._db.getconn()
        conn = self._conn
        cursors = [conn.cursor() for _ in statements]
        try:
            try:
                async with _pipeline(conn):
                    await self._send_queued(conn)
                    for cur, (query, params) in zip(cursors, statements, strict=True):
                        await cur.execute(query.text, params)  # type: ignore[arg-type]
                    if commit:
                        async with conn.cursor() as cur:
                            await cur.execute(_COMMIT)
            except psycopg.errors.ReadOnlySqlTransaction as exc:
                raise _read_only_refused(conn, exc) from exc
            if commit:
                self._committed, self._begun = True, False
            return [await cur.fetchall() if _has_rows(cur) else [] for cur in cursors]
        finally:
            for cur in cursors:
                await cur.close()

    def _check_open(self) -> None:
        if self._committed:
            raise RuntimeError("the transaction was committed by fetch_each(commit=True)")

    async def claim(self, query: Query, params: Params = None) -> dict[str, Any] | None:
        """Run a claim query under a savepoint: on a miss roll the savepoint back,
        which releases any partial lock the skipped attempt took (the reference's
        miss-only savepoint); on a hit release it and keep the locks."""
        name = f"qtg_sp_{next(self._savepoints)}"
        async with self._run(_SAVEPOINT.format(name)):
            pass
        conn = self._conn
        assert conn is not None
        try:
            row = await self.fetchrow(query, params)
        except BaseException:
            with trio.CancelScope(shield=True):
                await _rollback_to(conn, name)
            raise
        if row is None:
            await _rollback_to(conn, name)
        else:
            await conn.execute(_RELEASE.format(name))  # type: ignore[arg-type]
        return row

    async def _finish(self, *, commit: bool) -> None:
        """Commit (sending BEGIN and the deferred writes with it when they are
        still queued) or roll back; always give the connection back. A failed
        commit rolls back and raises."""
        if commit and (self._pending or self._before) and self._conn is None:
            self._conn = await self._db.getconn()  # deferred writes only
        conn, self._conn = self._conn, None
        if conn is None:
            self._pending.clear()
            self._before = []
            return
        try:
            with trio.fail_after(_FINISH_TIMEOUT_SECONDS):
                if not commit:
                    await _rollback_quietly(conn)
                elif self._pending or self._before:
                    try:
                        async with _pipeline(conn):
                            await self._send_queued(conn)
                            async with conn.cursor() as cur:
                                await cur.execute(_COMMIT)
                    except psycopg.errors.ReadOnlySqlTransaction as exc:
                        raise _read_only_refused(conn, exc) from exc
                elif self._begun:
                    await conn.execute(_COMMIT)
        except BaseException:
            with trio.move_on_after(_FINISH_TIMEOUT_SECONDS):
                await _rollback_quietly(conn)
            raise
        finally:
            self._pending.clear()
            self._before = []
            self._db.putconn(conn)


@asynccontextmanager
async def _pipeline(conn: TrioConnection) -> AsyncIterator[None]:
    """`conn.pipeline()`, except that a cancellation inside it closes `conn`.

    Cancelled while the pipeline waits for its sync, psycopg cannot finish it:
    the results are still on their way ("cannot exit pipeline mode while busy"),
    and whatever tidies up afterwards (a rollback) can leave the connection
    looking idle with a result still queued — the next transaction on it failed
    with "unexpected result status from query: PIPELINE_SYNC". Closed, it is
    never pooled again, and the server rolls its transaction back.
    """
    try:
        async with conn.pipeline():
            yield
    except BaseException as exc:
        # trio.Cancelled (or an interrupt), or a deadline (TooSlowError) around it
        if not isinstance(exc, Exception) or isinstance(exc, trio.TooSlowError):
            _close(conn)
        raise


async def _rollback_quietly(conn: TrioConnection) -> None:
    if conn.closed:
        return
    with suppress(psycopg.Error):  # a broken connection is closed by putconn
        await conn.rollback()


async def _rollback_to(conn: TrioConnection, name: str) -> None:
    await conn.execute(_ROLLBACK_TO.format(name))  # type: ignore[arg-type]
    await conn.execute(_RELEASE.format(name))  # type: ignore[arg-type]
