"""The database driver past 1,024 file descriptors (issue 26).

`select.select` refuses any descriptor >= 1024 (FD_SETSIZE). An API holding
~1,000 client sockets gets its database sockets numbered above that, so the
driver must never use it: every pipeline sync waits "read or write" and every
checkout asks whether an idle socket has data. These tests open enough dummy
descriptors that the database sockets land above 1,024, then do real work.
"""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Iterator

import pytest
import trio
from psycopg.waiting import Ready, Wait

from qtg.db import Database, Query
from qtg.db.connection import _wait_fd, socket_has_data

HIGH = 1100  # the lowest free descriptor once the dummies are open
BACKEND = Query("t/backend", "SELECT pg_backend_pid() AS pid")
CREATE = Query("t/create_fds", "CREATE TABLE IF NOT EXISTS t_fds (n integer NOT NULL)")
INSERT = Query("t/insert_fds", "INSERT INTO t_fds (n) VALUES (%(n)s)")
ROWS = Query("t/rows_fds", "SELECT n FROM t_fds ORDER BY n")


@pytest.fixture
def many_fds() -> Iterator[None]:
    """Raise the soft RLIMIT_NOFILE if needed and fill descriptors 0..HIGH-1,
    so that every descriptor opened from now on is numbered above 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = HIGH + 256
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"the hard RLIMIT_NOFILE ({hard}) is below {wanted}")
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    dummies: list[int] = []
    try:
        probe = os.open(os.devnull, os.O_RDONLY)
        dummies.append(probe)
        while dummies[-1] < HIGH - 1:
            dummies.append(os.dup(probe))
        yield
    finally:
        for fd in dummies:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_statements_pipelines_and_checkouts_work_on_sockets_above_1024(
    many_fds: None, dsn: str
) -> None:
    async with Database(dsn, min_size=1, max_size=1, connect_timeout=5) as db:
        with trio.fail_after(10):
            first = await db.fetchval(BACKEND)
            await db.execute(CREATE)
            async with db.transaction() as tx:  # deferred writes: a pipeline, waits read-or-write
                for n in (3, 1, 2):
                    tx.defer(INSERT, {"n": n})
                await tx.execute(INSERT, {"n": 0})
                assert tx._conn is not None and tx._conn.pgconn.socket >= 1024
                await tx.execute(Query("t/del_fds", "DELETE FROM t_fds WHERE n = 0"))
                assert [r["n"] for r in await tx.fetch(ROWS)] == [1, 2, 3]
            assert [r["n"] for r in await db.fetch(ROWS)] == [1, 2, 3]
            # The idle connection was checked (socket_has_data) and handed out
            # again: the same backend, not a fresh connection per checkout.
            assert await db.fetchval(BACKEND) == first


async def test_the_read_or_write_wait_and_the_idle_check_take_high_descriptors(
    many_fds: None,
) -> None:
    left, right = socket.socketpair()
    try:
        assert left.fileno() >= 1024
        with trio.fail_after(5):
            ready = await _wait_fd(left.fileno(), Wait.RW)
        assert ready & Ready.W and not ready & Ready.R  # writable, nothing to read yet
        right.send(b"x")
        with trio.fail_after(5):
            assert await _wait_fd(left.fileno(), Wait.RW) & Ready.R

        class _Conn:  # what socket_has_data reads: conn.pgconn.socket
            class pgconn:
                socket = left.fileno()

        assert socket_has_data(_Conn()) is True  # type: ignore[arg-type]
        left.recv(1)
        assert socket_has_data(_Conn()) is False  # type: ignore[arg-type]
    finally:
        left.close()
        right.close()
