"""The settle sweep, bounded (issue 44 item 5): it aggregated the nodes of every
EXECUTING request of the class after every recovery pass. Now each pass reads
a window of SETTLE_SCAN requests after where the last one stopped, so a lost
settle far down the list is still found — within a few passes — and no pass
reads more than its window."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from qtg.db import Query
from qtg.services import node_attention
from qtg.services.context import ServiceContext
from qtg.services.node_attention import settle_unsettled

from .helpers import movement, node, template, with_settings

REQUESTS = 7
SCAN = 3
STATE = Query("tests/state", "SELECT request_state FROM movement_requests WHERE id = %(rid)s")
#: All requests EXECUTING (as after their first dispatch), their nodes' last
#: change past the grace; the last one's node FAILED, its settle lost.
LOST_SETTLE = """
SET session_replication_role = replica;
UPDATE movement_requests SET request_state = 'EXECUTING' WHERE id = ANY(%(all)s);
UPDATE movement_request_nodes SET updated_at = now() - interval '1 hour'
WHERE request_id = ANY(%(all)s);
UPDATE movement_request_nodes SET node_state = 'FAILED', error_code = 'SUBMIT_REJECTED'
WHERE request_id = %(lost)s;
SET session_replication_role = DEFAULT;
"""


async def test_a_lost_settle_past_the_first_window_is_settled_within_the_round(
    svc: ServiceContext, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_attention, "SETTLE_SCAN", SCAN)
    await template(svc, "one", [node("x", "cex_withdrawal")], [])
    made = [(await movement(svc, "one", key=f"w{i}"))["id"] for i in range(REQUESTS)]
    lost = made[-1]  # the newest: the last window
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        for statement in LOST_SETTLE.strip().split(";\n"):
            conn.execute(statement, {"all": made, "lost": lost})
    created = {
        r["id"]: r["created_at"]
        for r in await svc.db.fetch(
            Query("tests/created", "SELECT id, created_at FROM movement_requests")
        )
    }
    ctx = with_settings(svc, node_settle_grace_seconds=1.0)
    windows: list[Any] = []
    for _ in range(3):
        windows.append((await settle_unsettled(ctx), ctx.settle_cursor.after))
    assert windows == [
        (0, (created[made[SCAN - 1]], made[SCAN - 1])),  # the first three, nothing to do
        (0, (created[made[2 * SCAN - 1]], made[2 * SCAN - 1])),
        (1, None),  # the last window: settled, and the round starts again
    ]
    assert await svc.db.fetchval(STATE, {"rid": lost}) == "FAILED"
    assert {await svc.db.fetchval(STATE, {"rid": rid}) for rid in made[:-1]} == {"EXECUTING"}
