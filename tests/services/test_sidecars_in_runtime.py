"""Done-when of issue 5: the five sidecars run inside a real `bin/qtg-runtime`
process, woken by their channels (or their deadlines), not by their intervals.

Every fallback interval is set to 60 s, so anything that happens within a
second can only be the wake-up or the next_due deadline at work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from receiver import Receiver
from runtime.rt_procs import RuntimeProcess, base_env
from sidecar_fixtures import ensure_template, make_settings, new_movement

from qtg.db import Database, Query
from qtg.services.proposals import create_proposal

pytestmark = pytest.mark.slow

SECRET = "runtime-callback-secret"
SLOW = "60"
ENV = {
    "MG_CALLBACK_SIGNING_SECRET": SECRET,
    "MG_CALLBACK_ALLOWED_HOSTS": "127.0.0.1",  # the receiver is on loopback
    "MG_CALLBACK_DISPATCH_INTERVAL_SECONDS": SLOW,
    "MG_EXPIRATION_CHECK_INTERVAL_SECONDS": SLOW,
    "MG_TEMPLATE_PROPOSAL_EXPIRATION_INTERVAL_SECONDS": SLOW,
    "MG_AUDIT_OUTBOX_PROMOTER_INTERVAL_SECONDS": SLOW,
    "MG_EXECUTOR_HEALTH_INTERVAL_SECONDS": SLOW,
    "MG_DB_POOL_MAX_SIZE": "10",
}

PROMOTED = Query(
    "test/promoted",
    "SELECT count(*) FROM audit_events WHERE action = 'movement.created' AND object_id = %(id)s",
)
EXPIRY_LATENESS = Query(
    "test/expiry_lateness",
    "SELECT extract(epoch FROM e.created_at - r.expires_at)::float8 AS late"
    " FROM movement_events e JOIN movement_requests r ON r.id = e.request_id"
    " WHERE e.request_id = %(id)s AND e.to_state = 'EXPIRED'",
)
PROPOSAL_LATENESS = Query(
    "test/proposal_lateness",
    "SELECT extract(epoch FROM updated_at - expires_at)::float8 AS late"
    " FROM template_proposals WHERE id = %(id)s AND proposal_state = 'EXPIRED'",
)
EXECUTORS = Query("test/executors", "SELECT count(*) FROM executors WHERE registered")
RETRIED = Query(
    "test/retried",
    "SELECT attempts = 2 AND status = 'pending' AND last_status_code = 500"
    " FROM movement_callback_outbox WHERE request_id = %(id)s",
)


async def poll(db: Database, query: Query, params: dict[str, Any], within: float) -> Any:
    """The first truthy value of `query`, polled for at most `within` seconds (then fail)."""
    with trio.fail_after(within):
        while True:
            value = await db.fetchval(query, params)
            if value:
                return value
            await trio.sleep(0.01)


async def test_sidecars_react_in_a_running_runtime(
    dsn: str, db: Database, tmp_path: Path, nursery: trio.Nursery, procs: list[RuntimeProcess]
) -> None:
    receiver = await nursery.start(Receiver(secret=SECRET.encode()).serve)
    receiver.behave("/flaky", 500)
    settings = make_settings(
        tmp_path,
        callback_signing_secret=SECRET,
        approval_ttl_seconds=1.0,
        template_proposal_ttl_seconds=1.0,
    )
    await ensure_template(db)
    proc = RuntimeProcess.launcher(base_env(MG_DATABASE_URL=dsn, **ENV))
    procs.append(proc)
    ready = await trio.to_thread.run_sync(proc.wait_ready)
    for worker in (
        "callback_dispatcher",
        "expiration_checker",
        "template_proposal_expiration",
        "executor_health",
        "audit_outbox_promoter",
    ):
        assert worker in ready["workers"]

    # executor_health: the first pass at start-up records the sandbox executors
    assert await poll(db, EXECUTORS, {}, 5)

    # callback_dispatcher, woken by qtg_callback on the commit that made the row
    movement = await new_movement(db, settings, callback_url=receiver.url("/hook"))
    committed = trio.current_time()
    with trio.fail_after(5):
        [got] = await receiver.wait_for("/hook")
    callback_latency = got.at - committed
    assert got.signature_ok
    assert callback_latency < 1.0, f"callback {callback_latency:.3f} s after commit"

    # audit_outbox_promoter, woken by qtg_audit
    await poll(db, PROMOTED, {"id": str(movement["id"])}, 1.0)

    # expiration_checker: sleeps until the earliest expires_at (1 s after creation)
    lateness = await poll(db, EXPIRY_LATENESS, {"id": movement["id"]}, 5)
    assert 0 <= lateness < 0.5, f"expired {lateness:.3f} s after expires_at"

    # template_proposal_expiration: the same, for a proposal's deadline
    proposal = await create_proposal(
        db,
        settings,
        template_key="proposed",
        name="proposed",
        graph={"nodes": [{"key": "x", "kind": "manual", "action_type": "manual_x"}]},
        actor="op:alice",
    )
    lateness = await poll(db, PROPOSAL_LATENESS, {"id": proposal["id"]}, 5)
    assert 0 <= lateness < 0.5, f"proposal expired {lateness:.3f} s after expires_at"

    # callback retry: the dispatcher wakes when the 2 s backoff ends, not at 60 s
    flaky = await new_movement(
        db, settings.replace(approval_ttl_seconds=300.0), callback_url=receiver.url("/flaky")
    )
    with trio.fail_after(6):
        first, second = await receiver.wait_for("/flaky", 2)
    gap = second.at - first.at
    assert 2.0 <= gap < 2.8, f"retry came {gap:.3f} s after the first attempt"
    assert (second.nonce, second.timestamp) == (first.nonce, first.timestamp)
    assert await poll(db, RETRIED, {"id": flaky["id"]}, 2)

    assert SECRET not in "\n".join(proc.lines)
