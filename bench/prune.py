"""`python -m bench.prune [REQUESTS]`: how fast `qtg prune` empties a year's backlog.

Builds REQUESTS movements 100 days old (half finished, half live), ten events
each, a sent callback per finished movement, on statistics of the empty schema
(ANALYZE before the burst, as a server with autovacuum off or lagging has them),
then times one prune of outboxes and events at the default batch size. Runs on
the server at --admin-dsn (default: the local one tests use); the database it
creates is dropped at the end. Not part of `python -m bench`: retention runs
from cron, off the hot path; this is its throughput, not a latency.
"""

from __future__ import annotations

import argparse
import time
import uuid

import psycopg
import trio
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from qtg.db import Database
from qtg.db.migrate import migrate
from qtg.services.retention import RetentionPolicy, prune

BURST = """
SET session_replication_role = replica;
INSERT INTO movement_templates (id, template_key, name)
VALUES ('00000000-0000-0000-0000-000000000001', 'burst', 'burst');
INSERT INTO template_versions (id, template_id, version, graph, graph_hash, created_by)
VALUES ('00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-000000000001', 1,
        '{"nodes": [], "edges": []}', 'h', 't');
INSERT INTO movement_requests (network_class, template_id, template_version_id,
    compiled_plan_hash, intent, idempotency_key, request_fingerprint, created_by,
    request_state, created_at, state_entered_at)
SELECT 'default', '00000000-0000-0000-0000-000000000001',
       '00000000-0000-0000-0000-000000000002', 'h', '{}', 'burst-' || i, 'f', 'c',
       CASE WHEN i %% 2 = 0 THEN 'COMPLETED' ELSE 'EXECUTING' END,
       now() - interval '100 days' + i * interval '10 ms',
       now() - interval '100 days' + i * interval '10 ms'
FROM generate_series(1, %(requests)s) i;
INSERT INTO movement_events (request_id, event_type, created_at)
SELECT r.id, 'e', r.created_at + j * interval '1 ms'
FROM movement_requests r CROSS JOIN generate_series(1, 10) j
ORDER BY r.created_at, j;
INSERT INTO movement_callback_outbox (request_id, event_id, event_type, callback_url, payload,
    status, updated_at)
SELECT e.request_id, max(e.id), 'e', 'http://127.0.0.1:9/cb', '{}', 'sent',
       now() - interval '40 days'
FROM movement_events e JOIN movement_requests r ON r.id = e.request_id
WHERE r.request_state = 'COMPLETED'
GROUP BY e.request_id;
SET session_replication_role = DEFAULT;
"""


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.prune")
    parser.add_argument("requests", type=int, nargs="?", default=10_000)
    parser.add_argument("--admin-dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--batch-size", type=int, default=1_000)
    args = parser.parse_args()
    name = f"qtg_bench_prune_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo(**{**conninfo_to_dict(args.admin_dsn), "dbname": name})
    try:
        migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE")  # statistics of the empty schema
            with conn.transaction():
                for statement in BURST.split(";\n"):
                    if statement.strip():
                        params = {"requests": args.requests} if "%(" in statement else None
                        conn.execute(
                            statement.replace("%%", "%") if params is None else statement, params
                        )  # type: ignore[arg-type]
            row = conn.execute("SELECT count(*) FROM movement_events").fetchone()
        events = row[0] if row else 0
        trio.run(_run, dsn, events, args.batch_size)
    finally:
        with psycopg.connect(args.admin_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


async def _run(dsn: str, events: int, batch_size: int) -> None:
    policy = RetentionPolicy(
        events_days=90,
        outbox_days=30,
        heartbeat_seconds=7 * 86_400.0,
        audit_days=365,
        batch_size=batch_size,
    )
    async with Database(dsn, min_size=1, max_size=2) as db:
        started = time.perf_counter()
        report = await prune(db, policy, keys=None, parts=("outboxes", "events"))
        elapsed = time.perf_counter() - started
    removed = report.counts["movement_events"]
    print(
        f"{events} events, {removed} of finished movements removed "
        f"(+{report.counts['movement_callback_outbox']} sent callbacks) in {elapsed:.2f} s: "
        f"{removed / elapsed:,.0f} events/s, batch {batch_size}"
    )


if __name__ == "__main__":
    main()
