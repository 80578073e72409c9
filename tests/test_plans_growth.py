"""Plans that survive growth (issue 44 item 4): every statement the runtime may
prepare keeps an index path when its connection made the generic plan on
empty tables — the first minutes of any deployment — and the tables then grew
by a burst with no new statistics (autovacuum off, or lagging the burst).

tests/test_plans.py plans on tables already grown. Here each query of the
registry (qtg.db.queries, every module of qtg imported) is PREPAREd on the
empty schema on a connection set up as the pool sets up its own
(qtg.db.pool.connection_options), with plan_cache_mode = force_generic_plan,
and EXPLAINed once there, which makes and caches its generic plan; the burst of
tests/test_plans.py goes in from another connection, and the plan each
statement then has (the cached one, which nothing but the runtime's refresh re-plans) is
checked by shape, rows and buffers, never by time.

On a23afdb, with the same connection minus the pool's planner settings, 34
statements kept a sequential scan of a grown table (observe/take_lease's
`Seq Scan … Filter: id = ANY(…)` among them), and dispatch/claim_candidate,
observe/claim_node and node_attention/lock_request walked a state index
filtering by id.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import trio
from test_plans import BURST, BY_KEY, CASES, NODES_PKEY, REQUESTS, REQUESTS_PKEY, SIDECARS

import qtg
from qtg.db import Database
from qtg.db.pool import connection_options
from qtg.db.queries import Query, declared_queries, load_query
from qtg.services.statistics import refresh_statistics

#: Not preparable (utility statements), so never a cached plan.
UTILITY = {"dispatch/lease_commit", "embedded/create_database", "migrate/ensure_table"}

#: Statements that read a grown table whole by design: no index serves them
#: with any statistics (issue 44 lists them; they are not cached-plan hazards).
WHOLE_TABLE: dict[str, str] = {
    # `qtg prune --dry-run` counts what retention would delete: every row it counts
    "retention/count_callbacks": "movement_callback_outbox",
    "retention/count_notification_messages": "notification_messages",
}

#: The tables the burst grows.
GROWN = {
    "audit_events",
    "audit_outbox",
    "capital_transfer_requests",
    "movement_callback_outbox",
    "movement_request_nodes",
    "movement_requests",
    "notification_deliveries",
    "notification_messages",
    "notifications",
}

#: A table's live rows as the shared statistics count them.
COUNTED = Query(
    "tests/counted", "SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = %(table)s"
)
#: query -> the indexes of the grown tables through which its plan must go
#: (tests/test_plans.py's expectations); a primary key is allowed beside them
#: (a claim's UPDATE finds its rows again so, a node's request is reached so).
INTENDED: dict[str, set[str]] = {q: allowed for q, (_, allowed) in CASES.items()}
INTENDED |= BY_KEY | SIDECARS


def _all_queries() -> list[str]:
    for module in pkgutil.walk_packages(qtg.__path__, "qtg."):
        importlib.import_module(module.name)
    return sorted(declared_queries())


def _prepared(text: str) -> tuple[str, list[str]]:
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", text)))
    body = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m[1]) + 1}", text)
    return body.replace("%%", "%"), names


def _scans(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _scans(child)


def _plan(conn: psycopg.Connection[Any], statement: str, arity: int) -> dict[str, Any]:
    """The plan EXECUTE would run now: the cached generic one (parameters NULL:
    a generic plan does not depend on them, and nothing is executed)."""
    args = f"({', '.join(['NULL'] * arity)})" if arity else ""
    row = conn.execute(f"EXPLAIN (FORMAT JSON) EXECUTE {statement}{args}".encode()).fetchone()
    assert row is not None
    out = row[0]
    return dict((json.loads(out) if isinstance(out, str) else out)[0]["Plan"])


def _connect(dsn: str, *, runtime_settings: bool) -> psycopg.Connection[Any]:
    options = connection_options(statement_timeout_ms=60_000, callback_max_attempts=5)
    if not runtime_settings:
        kept = [o for o in re.findall(r"-c (\S+)", options) if "enable_" not in o]
        options = " ".join(f"-c {o}" for o in kept)
    conn = psycopg.connect(dsn, autocommit=True, options=options)
    conn.execute("SET plan_cache_mode = force_generic_plan")
    return conn


class Grown:
    """A connection that prepared (and planned) every query on the empty schema,
    after which the burst went in."""

    def __init__(self, conn: psycopg.Connection[Any], arity: dict[str, tuple[str, int]]) -> None:
        self.conn = conn
        self.arity = arity  # query -> (prepared statement's name, its parameter count)

    def plan(self, query: str) -> dict[str, Any]:
        name, arity = self.arity[query]
        return _plan(self.conn, name, arity)


def _refreshed(dsn: str) -> list[str]:
    """The runtime's statistics refresh (qtg.services.statistics), once the
    burst's rows are counted in pg_stat_user_tables (its writer's counts reach
    the shared statistics when that backend goes idle or exits)."""

    async def refresh() -> list[str]:
        db = Database(dsn, min_size=1, max_size=1)
        await db.open()
        try:
            with trio.fail_after(60):
                while True:
                    live = await db.fetchval(COUNTED, {"table": "movement_request_nodes"})
                    if live >= 3 * REQUESTS:
                        return await refresh_statistics(db)
                    await trio.sleep(0.1)
        finally:
            await db.close()

    return trio.run(refresh)


def _grown(
    admin_dsn: str, template_db: str, *, analyzed: bool, runtime_settings: bool
) -> Iterator[Grown]:
    from conftest import create_database, drop_database, with_dbname

    name = create_database(admin_dsn, template_db)
    dsn = with_dbname(admin_dsn, name)
    try:
        with psycopg.connect(dsn, autocommit=True) as setup:
            # Nothing may re-plan behind the test's back (an autovacuum ANALYZE of
            # a grown table invalidates the cached plans): set before preparing,
            # since ALTER TABLE itself invalidates them.
            for table in sorted(GROWN):
                setup.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)".encode())
            if analyzed:
                setup.execute("ANALYZE")  # statistics of the empty schema
        conn = _connect(dsn, runtime_settings=runtime_settings)
        arity: dict[str, tuple[str, int]] = {}
        unpreparable = set()
        for i, query in enumerate(_all_queries()):
            body, names = _prepared(load_query(*query.split("/")).text)
            try:
                conn.execute(f"PREPARE q{i} AS {body}".encode())
            except psycopg.errors.SyntaxError:
                unpreparable.add(query)
                continue
            arity[query] = (f"q{i}", len(names))
            _plan(conn, f"q{i}", len(names))  # made and cached on the empty tables
        assert unpreparable == UTILITY
        with psycopg.connect(dsn, autocommit=True) as other, other.transaction():
            other.execute(BURST.replace("{requests}", str(REQUESTS)).encode())
        # every statement ran its generic plan, made on the empty tables, once;
        # nothing invalidates it (autovacuum is off for the grown tables, the
        # burst changes no other table's statistics): the plan checked below is
        # that one, or, after the refresh, the one the refresh made again
        counts = dict(
            conn.execute("SELECT name, generic_plans FROM pg_prepared_statements").fetchall()
        )
        assert {counts[name] for name, _ in arity.values()} == {1}
        if analyzed and runtime_settings:
            # statistics that say "empty" make every path cost one row (a probe by
            # primary key came out as a walk of another index): the runtime's
            # refresh ANALYZEs the grown tables, which makes the plans again
            assert set(_refreshed(dsn)) == GROWN
        yield Grown(conn, arity)
        conn.close()
    finally:
        drop_database(admin_dsn, name)


@pytest.fixture(scope="module", params=["never analyzed", "analyzed empty, then refreshed"])
def grown(request: pytest.FixtureRequest, admin_dsn: str, template_db: str) -> Iterator[Grown]:
    yield from _grown(
        admin_dsn, template_db, analyzed=request.param != "never analyzed", runtime_settings=True
    )


def _seq_scanned(plan: dict[str, Any]) -> set[str]:
    return {
        str(s["Relation Name"])
        for s in _scans(plan)
        if s["Node Type"] == "Seq Scan" and s.get("Relation Name") in GROWN
    }


def test_no_statement_keeps_a_sequential_scan_of_a_grown_table(grown: Grown) -> None:
    seq = {q: _seq_scanned(grown.plan(q)) for q in grown.arity}
    seq = {q: tables for q, tables in seq.items() if tables}
    assert seq == {q: {table} for q, table in WHOLE_TABLE.items()}


@pytest.mark.parametrize("query", sorted(INTENDED))
def test_each_walk_and_probe_keeps_its_intended_index(grown: Grown, query: str) -> None:
    """The claims, due-time queries, per-node and batch statements and sidecar
    queues reach the grown tables through the index they are written for
    (tests/test_plans.py), not another that a plan costed on empty tables
    preferred (a state index filtered by id walks every row in that state)."""
    used = set()
    for scan in _scans(grown.plan(query)):
        index = scan.get("Index Name")
        if index is not None:
            used.add(str(index))
    grown_indexes = {i for i in used if i.startswith(tuple(GROWN))}
    assert used & INTENDED[query], (query, used)
    assert grown_indexes <= INTENDED[query] | {NODES_PKEY, REQUESTS_PKEY}, (query, used)


#: The observer's batch (the issue's measurement: take_lease on 64 ids).
BATCH = 64


def test_take_lease_probes_its_batch_by_primary_key_after_the_burst(grown: Grown) -> None:
    """Rows and buffers, not time: the lease reads its batch's nodes and little
    else. The burst's 30k nodes fill ~1,000 pages; a seq scan reads them all."""
    conn = grown.conn
    ids = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM movement_request_nodes WHERE node_state = 'OBSERVING' LIMIT %s",
            (BATCH,),
        )
    ]
    [[pages]] = conn.execute(
        "SELECT pg_relation_size('movement_request_nodes') / current_setting('block_size')::int"
    ).fetchall()
    name, _ = grown.arity["observe/take_lease"]
    cur = psycopg.ClientCursor(conn)
    with conn.transaction(force_rollback=True):
        cur.execute(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {name}(%s, 30.0, %s)",
            (uuid.uuid4(), ids),
        )
        row = cur.fetchone()
    assert row is not None
    plan = (json.loads(row[0]) if isinstance(row[0], str) else row[0])[0]["Plan"]
    [scan] = [
        s
        for s in _scans(plan)
        if s.get("Relation Name") == "movement_request_nodes" and s["Node Type"] != "ModifyTable"
    ]
    assert (scan["Node Type"], scan.get("Index Name")) == ("Index Scan", NODES_PKEY), scan
    assert scan["Actual Rows"] == BATCH
    read = scan["Shared Hit Blocks"] + scan["Shared Read Blocks"]
    assert read <= 5 * BATCH < pages, (read, pages)


#: The observer's second transaction (issue 25 item 5; issue 47 item 3): the
#: lease check and the re-lock, each on the table it probes.
RECHECK = {
    "observe/check_leases": ("movement_request_nodes", NODES_PKEY),
    "observe/relock_requests": ("movement_requests", REQUESTS_PKEY),
}


@pytest.mark.parametrize("query", sorted(RECHECK))
def test_the_observers_recheck_probes_its_batch_by_primary_key_after_the_burst(
    grown: Grown, query: str
) -> None:
    """The plan made on the empty tables, run on a batch of BATCH leased nodes
    after the burst: one primary-key probe per id, every one found, a few
    buffers each (a walk of the observable nodes or of the EXECUTING requests
    reads thousands)."""
    conn = grown.conn
    observing = conn.execute(
        "SELECT id, attempt_no, request_id FROM movement_request_nodes"
        " WHERE node_state = 'OBSERVING' LIMIT %s",
        (BATCH,),
    ).fetchall()
    values: dict[str, Any] = {
        "lease": uuid.uuid4(),
        "lease_seconds": 30.0,
        "node_ids": [r[0] for r in observing],
        "attempts": [r[1] for r in observing],
        "request_ids": [r[2] for r in observing],
    }
    _, names = _prepared(load_query(*query.split("/")).text)
    name, _ = grown.arity[query]
    cur = psycopg.ClientCursor(conn)
    with conn.transaction(force_rollback=True):
        conn.execute(load_query("observe", "take_lease").text, values)  # the lease it checks
        cur.execute(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {name}"
            f"({', '.join(['%s'] * len(names))})",
            [values[n] for n in names],
        )
        row = cur.fetchone()
    assert row is not None
    plan = (json.loads(row[0]) if isinstance(row[0], str) else row[0])[0]["Plan"]
    table, key = RECHECK[query]
    [scan] = [s for s in _scans(plan) if s.get("Relation Name") == table]
    assert (scan["Node Type"], scan.get("Index Name")) == ("Index Scan", key), scan
    assert scan["Actual Rows"] * scan["Actual Loops"] == BATCH
    assert plan["Actual Rows"] == BATCH
    read = scan["Shared Hit Blocks"] + scan["Shared Read Blocks"]
    assert read <= 5 * BATCH, read


def test_without_the_pool_settings_the_empty_tables_plan_is_kept(
    admin_dsn: str, template_db: str
) -> None:
    """The hazard is real (and this test could fail): the same connection without
    the pool's planner settings keeps take_lease's sequential scan through the burst."""
    for bare in _grown(admin_dsn, template_db, analyzed=False, runtime_settings=False):
        assert _seq_scanned(bare.plan("observe/take_lease")) == {"movement_request_nodes"}
        assert len([q for q in bare.arity if _seq_scanned(bare.plan(q))]) > 20
