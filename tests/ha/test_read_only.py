"""Issue 27, item 1: nothing is written to a read-only server.

A database made read-only (`default_transaction_read_only`, what a standby's
sessions are) stands in for a standby: with qtg's default
target_session_attrs=read-write the pool refuses to connect to it at all; with
a DSN that asks for `any` server, a write that meets read-only is turned into
a lost connection (`ReadOnlyServer`, an OperationalError: workers back off and
retry, dispatch leaves SUBMITTING for recovery) and the connection is closed,
never handed out again.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from qtg.db import Database, PoolTimeout, Query, ReadOnlyServer, session_params

CREATE = Query("t/ro_create", "CREATE TABLE t_ro (n integer)")
INSERT = Query("t/ro_insert", "INSERT INTO t_ro VALUES (%(n)s)")
PING = Query("t/ro_ping", "SELECT 1 AS one")


def read_only(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        name = conn.info.dbname
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(
                sql.Identifier(name)
            )
        )


def test_session_params_ask_for_a_read_write_server_unless_the_dsn_says() -> None:
    assert session_params("host=a,b port=1,2")["target_session_attrs"] == "read-write"
    assert "target_session_attrs" not in session_params("host=a target_session_attrs=any")
    assert session_params("host=a")["tcp_user_timeout"] > 0


async def test_the_pool_does_not_connect_to_a_read_only_server(dsn: str) -> None:
    read_only(dsn)
    db = Database(dsn, min_size=1, max_size=2, connect_timeout=3)
    with pytest.raises(PoolTimeout, match=r"read-only|read-write"):
        await db.open()


async def test_a_write_meeting_a_read_only_server_is_a_lost_connection(dsn: str) -> None:
    async with Database(dsn, min_size=1, max_size=1) as setup:
        await setup.execute(CREATE)
    read_only(dsn)
    async with Database(dsn + " target_session_attrs=any", min_size=1, max_size=1) as db:
        assert await db.fetchval(PING) == 1  # reads work on a read-only server
        for attempt in range(2):
            with pytest.raises(ReadOnlyServer) as raised:
                async with db.transaction() as tx:
                    await tx.execute(INSERT, {"n": attempt})
            assert isinstance(raised.value, psycopg.OperationalError)
            assert db.stats()["pool_size"] == 0  # closed, not handed out again
        with pytest.raises(ReadOnlyServer):
            await db.execute(INSERT, {"n": 9})
        assert db.stats()["pool_size"] == 0
