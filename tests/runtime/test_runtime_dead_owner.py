"""Dead owners are noticed in seconds (issue 43 item 7), with real runtimes.

Runtime A writes a node ahead and is inside its submit (the sandbox records the
submission, then takes 60 s to answer: MG_SANDBOX_LATENCY_MS) when it is killed
with SIGKILL. Runtime B, already running, must take the node over well before
the 120 s SUBMITTING grace: A's liveness row stops, B's recovery wakes at the
moment A counts as gone (MG_NODE_RECOVERY_DEAD_OWNER_SECONDS, 5 s by default),
asks recover() — which finds A's submission — and the movement completes, at
default settings, within 10 s of the kill, with the side effect made once.
"""

from __future__ import annotations

import time
from typing import Any

import trio

from qtg.config import Settings
from qtg.db import Database
from qtg.services.templates import create_template
from runtime.rt_procs import all_completed, query, wait_until
from runtime.test_runtime_end_to_end import create_and_approve, launch, submissions

TEMPLATE = "dead-owner"
RESUME_BOUND_S = 10.0


def _template(dsn: str) -> None:
    async def run() -> None:
        async with Database(dsn, min_size=1, max_size=2) as db:
            await create_template(
                db,
                template_key=TEMPLATE,
                name=TEMPLATE,
                graph={"nodes": [{"key": "x", "kind": "action", "action_type": "evm_transfer"}],
                       "edges": []},
                actor="admin",
            )  # fmt: skip

    trio.run(run)


def _node(dsn: str, rid: str) -> tuple[Any, ...]:
    [row] = query(
        dsn,
        "SELECT node_state, submitting_owner FROM movement_request_nodes WHERE request_id = %s",
        (rid,),
    )
    return row


def test_a_node_left_submitting_by_a_killed_runtime_resumes_within_seconds(dsn, procs) -> None:
    assert Settings.from_env({}).node_recovery_submitting_grace_seconds == 120.0  # the default
    _template(dsn)
    a = launch(procs, dsn, MG_SANDBOX_LATENCY_MS="60000")
    a.wait_ready()
    [rid] = create_and_approve(dsn, TEMPLATE)
    # A wrote the node ahead and is inside its submit: the submission recorded,
    # the answer 60 s away, the node row held by A's submit transaction
    wait_until(lambda: submissions(dsn)[0] == 1, 20, "A's submission")
    state, owner = _node(dsn, rid)
    assert state == "SUBMITTING" and owner is not None

    b = launch(procs, dsn)  # default settings
    b.wait_ready()
    assert _node(dsn, rid)[0] == "SUBMITTING"  # B cannot take a node whose submit is in flight

    a.kill()  # SIGKILL: no cleanup; its sessions end, its liveness row stops
    killed_at = time.monotonic()
    wait_until(lambda: all_completed(dsn, [rid]), 30, "B to finish the movement")
    resumed_in = time.monotonic() - killed_at
    assert resumed_in <= RESUME_BOUND_S, f"resumed {resumed_in:.1f} s after the kill"
    assert submissions(dsn) == (1, 1, 0)  # the side effect once: recovered, never re-sent
    [(detail,)] = query(
        dsn,
        "SELECT count(*) FROM movement_events WHERE request_id = %s"
        " AND event_type = 'node_state_changed' AND to_state = 'READY' AND from_state <> 'BLOCKED'",
        (rid,),
    )
    assert detail == 0  # no new attempt: recover() found A's submission
