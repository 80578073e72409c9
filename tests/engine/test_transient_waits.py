"""Issue 24 item 5 at the service level: a RetryLater before any side effect leaves
the node READY with a next-attempt time that every dispatcher honours, a backoff that
doubles up to MG_NODE_TRANSIENT_RETRY_MAX_SECONDS, and a due time the dispatcher's
loop sleeps until; once the fault clears the node runs, one submission in all.
(The same against anvil and a real runtime: tests/evm/test_transient_and_lanes.py.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from qtg.db import Query
from qtg.domain.context import ExecutionContext
from qtg.domain.faults import transient_retry_seconds
from qtg.providers.base import RetryLater
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes, next_dispatch_due

from .helpers import Q, WrappedExecutor, drive, movement, node, template, with_settings

NODE = Query(
    "tests/transient-node", "SELECT * FROM movement_request_nodes WHERE request_id = %(rid)s"
)
#: the wait is over (a test cannot sleep in place of a condition: it moves the clock)
MAKE_DUE = Query(
    "tests/transient-make-due",
    "UPDATE movement_request_nodes SET dispatch_not_before = now() - interval '1 s'"
    " WHERE request_id = %(rid)s AND dispatch_not_before IS NOT NULL",
)


class FlakyExecutor(WrappedExecutor):
    """The sandbox, except that preflight raises RetryLater while `down` is set."""

    key = "flaky"

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.down = True
        self.preflights = 0

    async def preflight(self, ctx: ExecutionContext) -> None:
        self.preflights += 1
        if self.down:
            raise RetryLater("rpc down", code="TEST_RPC_DOWN", retry_after_seconds=0.2)
        await self._inner.preflight(ctx)


def test_the_backoff_doubles_from_the_hint_up_to_the_cap() -> None:
    assert [transient_retry_seconds(n, 2.0, 60.0) for n in range(7)] == [
        2.0,
        4.0,
        8.0,
        16.0,
        32.0,
        60.0,
        60.0,
    ]
    assert transient_retry_seconds(0, 90.0, 60.0) == 90.0  # never below the provider's hint
    assert transient_retry_seconds(10_000, 1.0, 5.0) == 5.0


async def test_a_transient_fault_waits_ready_and_runs_once_it_clears(svc: ServiceContext) -> None:
    flaky = FlakyExecutor(svc.providers.executor_for("cex_withdrawal"))
    svc.providers.add_executor(flaky)
    svc = with_settings(svc, node_transient_retry_max_seconds=0.4)
    await template(svc, "flaky", [{**node("x", "cex_withdrawal"), "executor_key": "flaky"}], [])
    m = await movement(svc, "flaky")

    assert await dispatch_ready_nodes(svc) == 1  # claimed, preflight said "later"
    row = await svc.db.fetchrow(NODE, {"rid": m["id"]})
    assert (row["node_state"], row["error_code"]) == ("READY", "TEST_RPC_DOWN")
    assert row["transient_tries"] == 1 and row["dispatch_not_before"] is not None
    # every dispatcher honours the wait: nothing to claim until it is due
    assert await dispatch_ready_nodes(svc) == 0
    assert flaky.preflights == 1
    # and the dispatcher's loop knows when to come back
    assert await next_dispatch_due(svc) == row["dispatch_not_before"]
    first_wait = row["dispatch_not_before"]

    # due again: tried again, failed again, a longer wait (0.2 s, then 0.4 s: the cap)
    await svc.db.execute(MAKE_DUE, {"rid": m["id"]})
    # the clock moved for the row: the loop's reading after its sleep sees it due
    # (a pass goes by the last one: qtg.services.known_waits)
    assert await next_dispatch_due(svc) <= datetime.now(UTC)
    assert await dispatch_ready_nodes(svc) == 1
    row = await svc.db.fetchrow(NODE, {"rid": m["id"]})
    assert row["node_state"] == "READY" and row["transient_tries"] == 2
    assert row["dispatch_not_before"] - row["updated_at"] >= timedelta(seconds=0.35)
    assert row["dispatch_not_before"] > first_wait

    flaky.down = False
    await svc.db.execute(MAKE_DUE, {"rid": m["id"]})
    done = await drive(svc, m["id"])
    assert done["request_state"] == "COMPLETED"
    row = await svc.db.fetchrow(NODE, {"rid": m["id"]})
    assert (row["transient_tries"], row["dispatch_not_before"], row["error_code"]) == (
        0,
        None,
        None,
    )
    subs = await svc.db.fetch(Q["submissions"])
    assert [(s["attempt_no"], s["duplicate_submits"]) for s in subs] == [(1, 0)]


class DatabaseDownExecutor(WrappedExecutor):
    """The sandbox, except that prepare's own database work (an evm nonce reservation)
    meets a database that refuses connections while `down` is set: a real psycopg
    connection to a port nothing listens on."""

    key = "dbdown"

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.down = True

    async def prepare(self, ctx: ExecutionContext) -> Any:
        if self.down:
            import psycopg

            psycopg.connect("host=127.0.0.1 port=1 dbname=x connect_timeout=2").close()
        return await self._inner.prepare(ctx)


async def test_a_database_refusing_connections_in_prepare_is_a_wait(svc: ServiceContext) -> None:
    """Issue 43 item 6: 16 movements ended FAILED PREPARE_ERROR in 6 s of refused
    connections inside the nonce reservation, with nothing paid."""
    down = DatabaseDownExecutor(svc.providers.executor_for("cex_withdrawal"))
    svc.providers.add_executor(down)
    svc = with_settings(svc, node_transient_retry_max_seconds=0.4)
    await template(svc, "dbdown", [{**node("x", "cex_withdrawal"), "executor_key": "dbdown"}], [])
    m = await movement(svc, "dbdown")
    assert await dispatch_ready_nodes(svc) == 1
    row = await svc.db.fetchrow(NODE, {"rid": m["id"]})
    assert (row["node_state"], row["error_code"]) == ("READY", "DATABASE_UNAVAILABLE")
    assert row["dispatch_not_before"] is not None
    down.down = False
    await svc.db.execute(MAKE_DUE, {"rid": m["id"]})
    done = await drive(svc, m["id"])
    assert done["request_state"] == "COMPLETED"
    subs = await svc.db.fetch(Q["submissions"])
    assert [(s["attempt_no"], s["duplicate_submits"]) for s in subs] == [(1, 0)]
