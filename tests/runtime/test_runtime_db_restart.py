"""Survive the database: a private PostgreSQL is stopped and started again under a
running `bin/qtg-runtime`; workers back off, the hub reconnects, work resumes by
itself, and nothing is submitted twice."""

from __future__ import annotations

import signal

import pytest
import trio

from qtg.db import Database
from qtg.db.embedded import EmbeddedPostgres
from qtg.services.templates import create_template
from runtime.rt_procs import (
    RuntimeProcess,
    base_env,
    private_dir,
    query,
    terminate_all,
    wait_until,
)
from runtime.rt_procs import request_states as states
from runtime.test_runtime_end_to_end import CHAIN, POOL, create_and_approve, submissions

pytestmark = pytest.mark.slow

SLOW = "restart.slow_chain"  # in flight for a few seconds: the outage hits it mid-way
_BEHAVIOUR = {
    "sandbox": {"latency_ms": 100, "observations_to_complete": 4, "retry_after_seconds": 0.3}
}
SLOW_GRAPH = {
    "nodes": [
        {"key": "send", "kind": "action", "action_type": "ccip_send", "config": _BEHAVIOUR},
        {"key": "deliver", "kind": "observe", "action_type": "ccip_delivery", "config": _BEHAVIOUR},
        {
            "key": "withdraw",
            "kind": "action",
            "action_type": "cex_withdrawal",
            "config": _BEHAVIOUR,
        },
    ],
    "edges": [["send", "deliver"], ["deliver", "withdraw"]],
}
TERMINAL = {"COMPLETED", "FAILED", "MANUAL_INTERVENTION", "CANCELLED", "REJECTED", "EXPIRED"}


def add_slow_template(dsn: str) -> None:
    async def run() -> None:
        async with Database(dsn, min_size=1, max_size=1) as db:
            await create_template(
                db, template_key=SLOW, name="slow", graph=SLOW_GRAPH, actor="admin"
            )

    trio.run(run)


def message(text: str):
    return lambda r: r.get("msg") == text


@pytest.fixture
def server():
    with private_dir("qtg-rt-restart-") as path:
        pg = EmbeddedPostgres(path / "private-pg")
        pg.start()
        try:
            yield pg
        finally:
            pg.stop()


def test_runtime_survives_a_database_restart(server: EmbeddedPostgres) -> None:
    dsn = server.ensure_database("qtg")
    proc = RuntimeProcess.launcher(
        base_env(
            MG_DATABASE_URL=dsn,
            MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS="1",
            MG_NODE_RECOVERY_INTERVAL_SECONDS="2",
            # An observation the outage cuts off leaves its nodes leased (not due)
            # until the lease runs out: at the default 60 s that alone could use up
            # the 60 s the test gives the caught movements to settle.
            MG_NODE_OBSERVE_LEASE_SECONDS="5",
            **POOL,
        ),
        "--migrate",
        "--seed-demo",
    )
    try:
        proc.wait_ready(30)
        add_slow_template(dsn)
        before = create_and_approve(dsn, CHAIN, 5, batch="before")
        wait_until(lambda: set(states(dsn, before).values()) == {"COMPLETED"}, 10, "warm-up")

        in_flight = create_and_approve(dsn, SLOW, 5, batch="in-flight")
        wait_until(lambda: submissions(dsn)[0] >= 5, 10, "the slow movements to be submitted")

        server.stop()
        proc.wait_for(message("listen connection lost"), 15)
        # workers notice too: their passes fail while the database is away
        proc.wait_for(lambda r: r.get("msg", "").endswith("pass failed"), 30)
        assert proc.proc.poll() is None

        server.start()
        assert server.ensure_database("qtg") == dsn  # same socket: the runtime's DSN works
        proc.wait_for(message("listen connection restored; waking every worker"), 30)

        after = create_and_approve(dsn, CHAIN, 5, batch="after")
        wait_until(
            lambda: set(states(dsn, after).values()) == {"COMPLETED"},
            60,
            "work after the restart to complete by itself",
        )
        wait_until(
            lambda: set(states(dsn, in_flight).values()) <= TERMINAL,
            60,
            "the movements caught by the outage to settle",
        )

        total, nodes, duplicates = submissions(dsn)
        assert duplicates == 0 and total == nodes  # nothing submitted twice
        # Caught mid-way, a node either completed or, when its submit never
        # happened, failed with the recovery's NOT_SUBMITTED: never half-done.
        failed = query(
            dsn,
            "SELECT n.node_key, n.error_code FROM movement_request_nodes n"
            " WHERE n.request_id = ANY(%s::uuid[]) AND n.node_state = 'FAILED'",
            (in_flight,),
        )
        assert all(code == "NOT_SUBMITTED" for _key, code in failed), failed
        stuck = query(
            dsn,
            "SELECT count(*) FROM movement_request_nodes WHERE node_state IN"
            " ('READY', 'SUBMITTING', 'SUBMITTED', 'OBSERVING', 'UNKNOWN')",
        )
        assert stuck == [(0,)]

        heartbeats = dict(query(dsn, "SELECT worker_name, status FROM worker_heartbeats"))
        assert heartbeats["node_dispatcher"] == "running"
        assert proc.proc.poll() is None  # never exited
        proc.send(signal.SIGTERM)
        assert proc.wait_exit(10) == 0
    finally:
        terminate_all([proc])
