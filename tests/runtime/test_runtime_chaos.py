"""Done-when of issue 10: money keeps moving, exactly once, through crashes.

Two real `bin/qtg-runtime` processes drain 200 bridge movements (two side
effects each) on a private PostgreSQL while the test restarts that server 3
times and SIGKILLs a runtime 5 times (a fresh one takes its place each time).
Every movement must end COMPLETED — nothing FAILED because a restart or a
crash caught it before its submit — and the sandbox must hold exactly one
submission per action node.
"""

from __future__ import annotations

import pytest

from qtg.db.embedded import EmbeddedPostgres
from runtime.rt_procs import RuntimeProcess, base_env, query, terminate_all, wait_until
from runtime.rt_procs import request_states as states
from runtime.test_runtime_db_restart import server  # noqa: F401 - fixture: a private PostgreSQL
from runtime.test_runtime_end_to_end import CHAIN, POOL, create_and_approve

pytestmark = pytest.mark.slow

MOVEMENTS = 200
ACTIONS_PER_MOVEMENT = 2  # demo.cctp_bridge: burn and mint
ENV = {
    **POOL,
    "MG_SANDBOX_LATENCY_MS": "5",  # long enough for crashes to land mid-way
    "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS": "1",
    "MG_NODE_RECOVERY_INTERVAL_SECONDS": "1",
    "MG_NODE_RECOVERY_RETRY_BASE_SECONDS": "0.5",
    "MG_NODE_RECOVERY_RETRY_MAX_SECONDS": "2",
    "MG_DB_POOL_TIMEOUT_SECONDS": "5",
}
# kill, kill, restart, kill, restart, kill, restart, kill
EVENTS = ("kill", "kill", "restart", "kill", "restart", "kill", "restart", "kill")


def completed(dsn: str, ids: list[str]) -> int:
    return sum(1 for s in states(dsn, ids).values() if s == "COMPLETED")


def test_two_runtimes_drain_through_restarts_and_kills(server: EmbeddedPostgres) -> None:  # noqa: F811
    dsn = server.ensure_database("qtg")
    procs: list[RuntimeProcess] = []

    def start(*args: str) -> RuntimeProcess:
        proc = RuntimeProcess.launcher(base_env(MG_DATABASE_URL=dsn, **ENV), *args)
        procs.append(proc)
        return proc

    try:
        start("--migrate", "--seed-demo").wait_ready(30)
        start().wait_ready(30)
        ids = create_and_approve(dsn, CHAIN, MOVEMENTS, batch="chaos")
        live = list(procs)
        step = MOVEMENTS // (len(EVENTS) + 2)
        for number, event in enumerate(EVENTS, start=1):
            # progress first, so every event lands in the middle of the drain
            wait_until(lambda n=number: completed(dsn, ids) >= n * step, 120, "progress")
            if event == "kill":
                victim = live.pop(0)
                victim.kill()  # SIGKILL: no cleanup, whatever it was doing
                fresh = start()
                fresh.wait_ready(60)
                live.append(fresh)
            else:
                server.stop()
                server.start()
                assert server.ensure_database("qtg") == dsn
        wait_until(lambda: completed(dsn, ids) == MOVEMENTS, 240, "every movement to complete")

        final = states(dsn, ids)
        assert set(final.values()) == {"COMPLETED"}, {
            k: v for k, v in final.items() if v != "COMPLETED"
        }
        [(total, nodes, duplicates)] = query(
            dsn,
            "SELECT count(*), count(DISTINCT request_node_id),"
            " coalesce(sum(duplicate_submits), 0) FROM sandbox_submissions",
        )
        assert (total, nodes, duplicates) == (
            MOVEMENTS * ACTIONS_PER_MOVEMENT,
            MOVEMENTS * ACTIONS_PER_MOVEMENT,
            0,
        )
    finally:
        terminate_all(procs)
