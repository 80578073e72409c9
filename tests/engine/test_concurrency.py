"""Concurrency proof (reference "Concurrency guarantees", cf. its
test_dispatch_pickup_concurrency.py): several processes and connections race
dispatch, observe and recover over the same rows. Every node is submitted
exactly once, nothing deadlocks, and a missed claim leaves no lock behind."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg
import trio

from qtg.db import Database, Query
from qtg.services.context import ServiceContext
from qtg.services.dispatch import SQL as DISPATCH_SQL
from qtg.services.dispatch import claim_ready_node, dispatch_ready_nodes

from .helpers import Q, movement, node, template

WORKER = Path(__file__).with_name("race_worker.py")
FINISHED = Query(
    "tests/finished",
    "SELECT request_state, count(*) AS n FROM movement_requests GROUP BY request_state",
)
DEADLOCKS = Query(
    "tests/deadlocks",
    "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
)


async def test_racing_processes_submit_every_node_exactly_once(
    svc: ServiceContext, dsn: str
) -> None:
    await template(
        svc,
        "race",
        [
            node("withdraw", "cex_withdrawal"),
            node("receive", "destination_chain_receive_observe", "observe"),
            node("mint", "cctp_mint"),
        ],
        [["withdraw", "receive"], ["receive", "mint"]],
    )
    movements = 150
    for i in range(movements):
        await movement(svc, "race", key=f"race-{i}")
    deadlocks_before = await svc.db.fetchval(DEADLOCKS)

    codes: list[int] = []

    async def process() -> None:
        proc = await trio.run_process(
            [sys.executable, str(WORKER), dsn, "90"], check=False, capture_stderr=True
        )
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        codes.append(proc.returncode)

    async def in_process() -> None:
        # a second kind of racer: same process as the test, its own pool
        from race_worker import main  # type: ignore[import-not-found]

        codes.append(await main(dsn, 90))

    sys.path.insert(0, str(WORKER.parent))
    try:
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(process)
            for _ in range(2):
                nursery.start_soon(in_process)
    finally:
        sys.path.remove(str(WORKER.parent))

    assert codes == [0] * 5
    assert {r["request_state"]: r["n"] for r in await svc.db.fetch(FINISHED)} == {
        "COMPLETED": movements
    }
    subs = await svc.db.fetch(Q["submissions"])
    assert len(subs) == 2 * movements  # two action nodes each
    assert len({s["request_node_id"] for s in subs}) == 2 * movements
    assert sum(s["duplicate_submits"] for s in subs) == 0
    assert await svc.db.fetchval(DEADLOCKS) == deadlocks_before


LOCK_REQUEST = Query("tests/lock-request", "SELECT id FROM movement_requests FOR UPDATE")
NODE_IDS = Query("tests/node-ids", "SELECT id FROM movement_request_nodes")


def _node_lockable(dsn: str, node_id: object) -> bool:
    """Can a third connection lock the node right now (NOWAIT)?"""
    with psycopg.connect(dsn) as conn:
        try:
            conn.execute(
                "SELECT id FROM movement_request_nodes WHERE id = %s FOR UPDATE NOWAIT",
                (node_id,),
            )
            return True
        except psycopg.errors.LockNotAvailable:
            return False


async def test_a_missed_claim_leaves_no_lock_behind(svc: ServiceContext, dsn: str) -> None:
    await template(svc, "one", [node("withdraw", "cex_withdrawal")], [])
    await movement(svc, "one")
    (ready,) = await svc.db.fetch(NODE_IDS)
    other = Database(dsn, max_size=2)
    await other.open()
    try:
        async with other.transaction() as holder:
            await holder.fetch(LOCK_REQUEST)  # another worker holds the request
            async with svc.db.transaction() as tx:
                assert await claim_ready_node(tx, "default") is None  # the candidate was skipped
                # ...and this still-open transaction holds no lock on the node
                assert await trio.to_thread.run_sync(_node_lockable, dsn, ready["id"])

            # Control: the same joined claim without the savepoint rollback keeps
            # the node locked after skipping the request — what the savepoint is for.
            async with svc.db.transaction() as tx:
                row = await tx.fetchrow(
                    DISPATCH_SQL.claim_candidate,
                    {"candidate_id": ready["id"], "network_class": "default"},
                )
                assert row is None
                assert not await trio.to_thread.run_sync(_node_lockable, dsn, ready["id"])
    finally:
        await other.close()

    # with the request free again, the claim succeeds
    async with svc.db.transaction() as tx:
        claimed = await claim_ready_node(tx, "default")
        assert claimed is not None and claimed["id"] == ready["id"]


async def test_concurrent_dispatch_in_one_pass_submits_each_node_once(
    svc: ServiceContext,
) -> None:
    wide = ServiceContext(svc.db, svc.settings.replace(node_dispatch_concurrency=8), svc.providers)
    await template(wide, "wide", [node("withdraw", "cex_withdrawal")], [])
    for i in range(40):
        await movement(wide, "wide", key=f"wide-{i}")
    passes = []
    while dispatched := await dispatch_ready_nodes(wide):
        passes.append(dispatched)
    assert sum(passes) == 40
    assert max(passes) > 1  # the pass really dispatched side by side
    subs = await wide.db.fetch(Q["submissions"])
    assert len({s["request_node_id"] for s in subs}) == len(subs) == 40
    assert sum(s["duplicate_submits"] for s in subs) == 0
