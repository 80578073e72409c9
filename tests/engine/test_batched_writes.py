"""Issue 29: the one-row writes of a transaction that moves several movements on
(an observer batch's outcomes) go out as one statement per kind
(qtg.db.deferred), with every movement's own writes in their order. Real
PostgreSQL: the event rows' ids show the statements' order."""

from __future__ import annotations

from typing import Any

from qtg.db import Query
from qtg.services import progress
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes

from .helpers import Q, movement, node, states, template

LOCK = Query(
    "tests/lock_requests",
    "SELECT id FROM movement_requests WHERE id = ANY(%(rids)s) ORDER BY id FOR NO KEY UPDATE",
)
NODES = Query("tests/nodes", "SELECT * FROM movement_request_nodes WHERE request_id = %(rid)s")

WATCH = [node("watch", "destination_chain_receive_observe", "observe")]
FAN_OUT = [
    node("watch", "destination_chain_receive_observe", "observe"),
    node("b", "cex_withdrawal"),
    node("c", "cex_withdrawal"),
    node("d", "cex_withdrawal"),
]


async def _observing(svc: ServiceContext, template_key: str, count: int) -> list[Any]:
    ids = [(await movement(svc, template_key))["id"] for _ in range(count)]
    while await dispatch_ready_nodes(svc):
        pass
    for rid in ids:
        assert (await svc.db.fetchrow(Q["node"], {"rid": rid, "key": "watch"}))[
            "node_state"
        ] == "OBSERVING"
    return ids


async def _complete_watch_nodes(svc: ServiceContext, ids: list[Any]) -> None:
    """What the observer's mixed path does for a batch: one transaction, the
    requests locked and read, then each outcome written on its request's
    snapshot (deferred: sent with the commit)."""
    async with svc.db.transaction() as tx:
        await tx.fetch(LOCK, {"rids": sorted(ids)})
        snaps = await progress.load_snapshots(tx, ids)
        for rid in ids:
            snap = snaps[rid]
            await progress.complete_node(tx, snap, snap.node("watch"), {"seen": str(rid)})


async def test_completions_of_several_movements_are_one_statement_per_kind(
    svc: ServiceContext,
) -> None:
    await template(svc, "watch_only", WATCH, [])
    ids = await _observing(svc, "watch_only", 3)

    await _complete_watch_nodes(svc, ids)

    events: list[dict[str, Any]] = []
    for rid in ids:
        request = await svc.db.fetchrow(Q["request"], {"rid": rid})
        assert request["request_state"] == "COMPLETED"
        assert request["current_frontier"] == []  # '{}', not NULL
        watch = await svc.db.fetchrow(Q["node"], {"rid": rid, "key": "watch"})
        assert watch["node_state"] == "COMPLETED"
        assert watch["provider_refs"]["seen"] == str(rid)  # each row its own values
        mine = await svc.db.fetch(Q["events"], {"rid": rid})
        last = [(e["event_type"], e["to_state"]) for e in mine][-3:]
        # each movement's own writes in their order: node, frontier, request
        assert last == [
            ("node_state_changed", "COMPLETED"),
            ("frontier_advanced", None),
            ("request_state_changed", "COMPLETED"),
        ]
        events.extend(mine[-3:])
    # one statement per kind: the three node completions were written before any
    # frontier, and every frontier before any request state (one UPDATE each,
    # in the order first queued), where one UPDATE per write interleaves them
    by_id = sorted(events, key=lambda e: e["id"])
    assert [e["event_type"] for e in by_id] == ["node_state_changed"] * 3 + [
        "frontier_advanced"
    ] * 3 + ["request_state_changed"] * 3
    assert len({e["xact_id"] for e in events}) == 1


async def test_a_fan_out_releases_its_successors_and_keeps_the_frontier_order(
    svc: ServiceContext,
) -> None:
    await template(svc, "fan_out", FAN_OUT, [["watch", "b"], ["watch", "c"], ["watch", "d"]])
    ids = await _observing(svc, "fan_out", 2)

    await _complete_watch_nodes(svc, ids)

    written: list[dict[str, Any]] = []
    for rid in ids:
        request = await svc.db.fetchrow(Q["request"], {"rid": rid})
        assert request["current_frontier"] == ["b", "c", "d"]  # plan order, as derived
        nodes = await svc.db.fetch(NODES, {"rid": rid})
        assert states({"nodes": nodes}) == {
            "watch": "COMPLETED", "b": "READY", "c": "READY", "d": "READY",
        }  # fmt: skip
        frontiers = [
            e["payload"]["frontier"]
            for e in await svc.db.fetch(Q["events"], {"rid": rid})
            if e["event_type"] == "frontier_advanced"
        ]
        assert frontiers[-1] == ["b", "c", "d"]
        written.extend((await svc.db.fetch(Q["events"], {"rid": rid}))[-5:])
    # both movements' six releases in one statement (their node keys are the same)
    assert [(e["event_type"], e["to_state"]) for e in sorted(written, key=lambda e: e["id"])] == [
        ("node_state_changed", "COMPLETED")
    ] * 2 + [("node_state_changed", "READY")] * 6 + [("frontier_advanced", None)] * 2


async def test_a_dispatch_batch_starts_its_observe_nodes_in_one_statement(
    svc: ServiceContext,
) -> None:
    # An observe node has no side effect: the dispatcher moves it straight to
    # OBSERVING (sql/dispatch/start_observing.sql), one row of one statement for
    # the whole batch, after each movement's own move to EXECUTING.
    await template(svc, "watch_only", WATCH, [])
    ids = await _observing(svc, "watch_only", 3)

    started = {("request_state_changed", "EXECUTING"), ("node_state_changed", "OBSERVING")}
    events: list[dict[str, Any]] = []
    for rid in ids:
        mine = [
            e
            for e in await svc.db.fetch(Q["events"], {"rid": rid})
            if (e["event_type"], e["to_state"]) in started
        ]
        # each movement's own writes in their order: request, then node
        assert [(e["event_type"], e["to_state"]) for e in mine] == [
            ("request_state_changed", "EXECUTING"),
            ("node_state_changed", "OBSERVING"),
        ]
        events.extend(mine)
    assert len({e["xact_id"] for e in events}) == 1  # one dispatch batch
    # one statement per kind: every request moved before any node started
    by_id = sorted(events, key=lambda e: e["id"])
    assert [e["event_type"] for e in by_id] == ["request_state_changed"] * 3 + [
        "node_state_changed"
    ] * 3
