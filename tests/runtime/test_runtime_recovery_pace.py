"""Issue 10 item 1, end to end: a node whose provider cannot tell what happened
is asked again at a measured pace by a real runtime, and `GET /v3/workers`
shows node_recovery's passes staying few (it once made 313 recover() calls in
2 s with a 60 s interval)."""

from __future__ import annotations

import signal

import httpx
import pytest
import trio

from qtg.db import Database
from qtg.services.templates import create_template
from runtime.rt_procs import query, wait_until
from runtime.test_runtime_balances import token
from runtime.test_runtime_end_to_end import create_and_approve, launch

pytestmark = pytest.mark.slow

KEY = "pace.undecided"
GRAPH = {
    "nodes": [
        {
            "key": "withdraw",
            "kind": "action",
            "action_type": "cex_withdrawal",
            # the side effect happens, submit then crashes: UNKNOWN, and recover()
            # answers "cannot tell yet" every time
            "config": {"sandbox": {"fail": "submit_crash_after", "recover": "undecided"}},
        }
    ],
    "edges": [],
}
ATTEMPTS = (
    "SELECT recover_attempts FROM movement_request_nodes n"
    " JOIN movement_requests r ON r.id = n.request_id WHERE r.id = %s"
)


def add_template(dsn: str) -> None:
    async def run() -> None:
        async with Database(dsn, min_size=1, max_size=1) as db:
            await create_template(db, template_key=KEY, name="undecided", graph=GRAPH, actor="t")

    trio.run(run)


def test_an_undecidable_node_is_asked_at_a_measured_pace(dsn, procs) -> None:
    proc = launch(
        procs,
        dsn,
        MG_NODE_RECOVERY_RETRY_BASE_SECONDS="0.5",
        MG_NODE_RECOVERY_RETRY_MAX_SECONDS="60",
    )
    proc.wait_ready()
    url = proc.wait_for(lambda r: r.get("msg") == "API listening")["url"]
    add_template(dsn)
    [rid] = create_and_approve(dsn, KEY)
    # asked at ~0, 0.5, 1.5, 3.5 s: wait for the fourth question
    wait_until(lambda: query(dsn, ATTEMPTS, (rid,))[0][0] >= 4, 30, "four recovery attempts")
    viewer = token(dsn, "ops", "viewer")
    reply = httpx.get(
        f"{url}/v3/workers", headers={"Authorization": f"Bearer {viewer}"}, timeout=10
    )
    assert reply.status_code == 200, reply.text
    [recovery] = [w for w in reply.json()["items"] if w["worker_name"] == "node_recovery"]
    # a handful of passes (start-up, one per due time, a few wake-ups), never hundreds
    assert 1 <= recovery["iterations"] <= 20, recovery
    [(state,)] = query(
        dsn, "SELECT node_state FROM movement_request_nodes WHERE request_id = %s", (rid,)
    )
    assert state == "UNKNOWN"  # never guessed
    proc.send(signal.SIGINT)
    assert proc.wait_exit(10) == 0
