"""`qtg prune`'s batches keep their index walks on tables grown after the last ANALYZE
(issue 29 items 2 and 4): each batch walks movement_events (or the outbox, or
audit_events) by primary key from its cursor and stops at its LIMIT; requests are
read by primary key; the callback foreign key is checked through
movement_callback_outbox_event (migration 0024), not by scanning the outbox once
per deleted event. The plan is read from EXPLAIN (ANALYZE, FORMAT JSON), rolled back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from qtg.services.retention import DAY_SECONDS, EVENTS_PRUNABLE_STATES, SQL

REQUESTS = 10_000
EVENTS_PER_REQUEST = 10
BATCH = 1_000
#: Generous: a batch of 1,000 deletes runs in tens of milliseconds here.
BOUND_MS = 2_000.0

BURST = """
SET session_replication_role = replica;  -- a direct insert: no triggers
INSERT INTO movement_templates (id, template_key, name)
VALUES ('00000000-0000-0000-0000-000000000001', 'burst', 'burst');
INSERT INTO template_versions (id, template_id, version, graph, graph_hash, created_by)
VALUES ('00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-000000000001', 1,
        '{"nodes": [], "edges": []}', 'h', 't');
-- 10k requests 100 days old: every other one finished then, the others still live
INSERT INTO movement_requests (network_class, template_id, template_version_id,
    compiled_plan_hash, intent, idempotency_key, request_fingerprint, created_by,
    request_state, created_at, state_entered_at)
SELECT 'default', '00000000-0000-0000-0000-000000000001',
       '00000000-0000-0000-0000-000000000002', 'h', '{}', 'burst-' || i, 'f', 'c',
       CASE WHEN i % 2 = 0 THEN 'COMPLETED' ELSE 'EXECUTING' END,
       now() - interval '100 days' + i * interval '10 ms',
       now() - interval '100 days' + i * interval '10 ms'
FROM generate_series(1, {requests}) i;
-- ten events each, in creation order
INSERT INTO movement_events (request_id, event_type, created_at)
SELECT r.id, 'e', r.created_at + j * interval '1 ms'
FROM movement_requests r CROSS JOIN generate_series(1, {events}) j
ORDER BY r.created_at, j;
-- a sent callback for every finished request's last event, 40 days old
INSERT INTO movement_callback_outbox (request_id, event_id, event_type, callback_url, payload,
    status, updated_at)
SELECT e.request_id, max(e.id), 'e', 'http://127.0.0.1:9/cb', '{}', 'sent',
       now() - interval '40 days'
FROM movement_events e JOIN movement_requests r ON r.id = e.request_id
WHERE r.request_state = 'COMPLETED'
GROUP BY e.request_id;
-- 10k audit rows (not a valid chain: only the walk is looked at here)
INSERT INTO audit_events (outbox_id, actor, action, object_type, object_id, detail,
    occurred_at, prev_hash, row_hash)
SELECT i, 'a', 'x', 't', i::text, '{}', now() - interval '400 days', 'p' || i, 'h' || i
FROM generate_series(1, {requests}) i;
INSERT INTO audit_archives (head_id, head_hash, count, head_chain_version, checkpoint,
    archive_file, archive_sha256, rows_archived)
VALUES ({requests}, 'h', {requests}, 1, '{}', 'f', 's', {requests});
SET session_replication_role = DEFAULT;
"""


@pytest.fixture(scope="module")
def burst_dsn(admin_dsn: str, template_db: str) -> Iterator[str]:
    from conftest import create_database, drop_database, with_dbname

    name = create_database(admin_dsn, template_db)
    dsn = with_dbname(admin_dsn, name)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE")  # statistics of the empty schema
            burst = BURST.replace("{requests}", str(REQUESTS))
            with conn.transaction():
                conn.execute(burst.replace("{events}", str(EVENTS_PER_REQUEST)).encode())
        yield dsn
    finally:
        drop_database(admin_dsn, name)


def _scans(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _scans(child)


def _explain(dsn: str, text: str, params: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN ANALYZE one batch as the prune runs it (its planner settings, and
    leave to delete archived audit rows), rolled back."""
    with psycopg.connect(dsn) as conn:
        conn.execute(SQL.walk_plans.text)
        conn.execute(SQL.allow_audit_delete.text)
        row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + text, params).fetchone()
        assert row is not None
        conn.rollback()
    out = row[0]
    return (json.loads(out) if isinstance(out, str) else out)[0]


def _walks(explained: dict[str, Any]) -> dict[str, set[tuple[str, str | None]]]:
    """relation -> {(scan kind, index)} of every scan in the plan."""
    seen: dict[str, set[tuple[str, str | None]]] = {}
    for scan in _scans(explained["Plan"]):
        relation = scan.get("Relation Name")
        if relation and scan["Node Type"] != "ModifyTable":
            seen.setdefault(relation, set()).add((scan["Node Type"], scan.get("Index Name")))
    return seen


def test_an_events_batch_walks_the_primary_key_and_checks_callbacks_by_index(
    burst_dsn: str,
) -> None:
    explained = _explain(
        burst_dsn,
        SQL.delete_events.text,
        {
            "after_id": 0,
            "bound_id": 10**12,
            "older_than_seconds": 90 * DAY_SECONDS,
            "states": list(EVENTS_PRUNABLE_STATES),
            "batch_size": BATCH,
        },
    )
    walks = _walks(explained)
    assert walks["movement_events"] <= {
        ("Index Scan", "movement_events_pkey"),
        ("Index Only Scan", "movement_events_pkey"),
    }, walks
    assert walks["movement_requests"] == {("Index Scan", "movement_requests_pkey")}, walks
    assert walks["movement_callback_outbox"] <= {
        ("Index Scan", "movement_callback_outbox_event"),
        ("Index Only Scan", "movement_callback_outbox_event"),
    }, walks
    deleted = [s for s in _scans(explained["Plan"]) if s["Node Type"] == "ModifyTable"]
    assert deleted and deleted[0]["Actual Rows"] == BATCH  # a full batch (then rolled back)
    # the foreign key check of each deleted event (an index probe, not a scan of the outbox)
    triggers = {t["Trigger Name"]: t for t in explained.get("Triggers", [])}
    fk = [t for name, t in triggers.items() if name.startswith("RI_ConstraintTrigger")]
    assert fk and fk[0]["Calls"] == BATCH, triggers
    assert explained["Execution Time"] < BOUND_MS, explained["Execution Time"]


@pytest.mark.parametrize(
    ("query", "table", "index"),
    [
        ("delete_callbacks", "movement_callback_outbox", "movement_callback_outbox_pkey"),
        ("delete_audit", "audit_events", "audit_events_pkey"),
    ],
)
def test_outbox_and_audit_batches_walk_their_primary_key(
    burst_dsn: str, query: str, table: str, index: str
) -> None:
    explained = _explain(
        burst_dsn,
        getattr(SQL, query).text,
        {
            "after_id": 0,
            "up_to_id": 10**12,
            "older_than_seconds": 30 * DAY_SECONDS,
            "batch_size": BATCH,
        },
    )
    walks = _walks(explained)
    assert walks[table] <= {("Index Scan", index), ("Index Only Scan", index)}, walks
    assert explained["Execution Time"] < BOUND_MS, explained["Execution Time"]
