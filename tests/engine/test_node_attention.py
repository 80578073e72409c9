"""Nothing stuck silently (issue 25 items 1 and 2).

- A node recovery cannot decide pages after MG_NODE_UNKNOWN_ATTENTION_SECONDS, once
  per EXECUTING episode (again a bound after an operator's resume or resolve):
  the movement goes to MANUAL_INTERVENTION (request_attention event, critical
  notification, callback row) — also when a hung submit holds the node row.
- A request whose settle failed after its node's outcome committed (the
  dispatcher's second transaction, failed on purpose here: another connection
  holds the request and the dispatcher's statements time out) does not stay
  EXECUTING with nothing in flight: node_recovery's sweep settles it.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
import trio

from qtg.db import Database, Query
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.movements import resume_movement
from qtg.services.observe import observe_active_nodes
from qtg.services.recover import recover_unknown_nodes

from .helpers import Q, eventually, movement, node, template, with_settings, write_ahead_only

COUNT_EVENTS = Query(
    "tests/attention-events",
    "SELECT count(*) FROM movement_events WHERE request_id = %(rid)s AND event_type = %(type)s",
)
NOTIFICATIONS = Query(
    "tests/attention-notifications",
    "SELECT kind, severity, occurrences, resolved_at FROM notifications"
    " WHERE request_id = %(rid)s ORDER BY id",
)
CALLBACKS = Query(
    "tests/attention-callbacks",
    "SELECT count(*) FROM movement_callback_outbox WHERE request_id = %(rid)s"
    " AND event_type = %(type)s",
)
PAGE_NODES = Query(
    "tests/attention-page-nodes",
    "SELECT body, links -> 'node_keys' AS node_keys FROM notifications"
    " WHERE request_id = %(rid)s AND kind = 'request_attention'",
)
LOCK_REQUEST = Query(
    "tests/attention-lock-request",
    "SELECT id FROM movement_requests WHERE id = %(rid)s FOR NO KEY UPDATE",
)
LOCK_NODE = Query(
    "tests/attention-lock-node",
    "SELECT id FROM movement_request_nodes WHERE id = %(nid)s FOR NO KEY UPDATE",
)


async def _state(svc: ServiceContext, rid: Any) -> str:
    return (await svc.db.fetchrow(Q["request"], {"rid": rid}))["request_state"]


async def _node(svc: ServiceContext, rid: Any, key: str = "x") -> dict[str, Any]:
    row = await svc.db.fetchrow(Q["node"], {"rid": rid, "key": key})
    assert row is not None
    return row


UNDECIDED = {"fail": "submit_crash_after", "recover": "undecided"}


async def _undecided_movement(svc: ServiceContext) -> dict[str, Any]:
    """A movement whose only node is UNKNOWN and whose recover() never decides."""
    await template(
        svc, "undecided",
        [node("x", "evm_transfer", sandbox=UNDECIDED)],
        [],
    )  # fmt: skip
    m = await movement(svc, "undecided", callback_url="http://127.0.0.1:9/cb")
    while await dispatch_ready_nodes(svc):
        pass
    assert (await _node(svc, m["id"]))["node_state"] == "UNKNOWN"
    return m


async def test_an_undecided_node_pages_once(svc: ServiceContext) -> None:
    m = await _undecided_movement(svc)
    rid = m["id"]
    # recovery asks, cannot tell: within the attention window nothing pages
    assert await recover_unknown_nodes(svc) == 0
    assert await _state(svc, rid) == "EXECUTING"
    assert await svc.db.fetchval(COUNT_EVENTS, {"rid": rid, "type": "request_attention"}) == 0

    # past MG_NODE_UNKNOWN_ATTENTION_SECONDS: the movement is put in front of a person
    impatient = with_settings(svc, node_unknown_attention_seconds=0.001)
    assert await recover_unknown_nodes(impatient) == 1
    assert await _state(svc, rid) == "MANUAL_INTERVENTION"
    assert await svc.db.fetchval(COUNT_EVENTS, {"rid": rid, "type": "request_attention"}) == 1
    assert await svc.db.fetchval(CALLBACKS, {"rid": rid, "type": "request_attention"}) == 1
    [page] = await svc.db.fetch(NOTIFICATIONS, {"rid": rid})
    assert (page["kind"], page["severity"], page["resolved_at"]) == (
        "request_attention", "critical", None,
    )  # fmt: skip

    # an operator resumes (recovery gets another go): no page again within the bound...
    await resume_movement(svc.db, rid, actor="carol")
    for _ in range(3):
        await recover_unknown_nodes(svc)
    assert await _state(svc, rid) == "EXECUTING"
    assert await svc.db.fetchval(COUNT_EVENTS, {"rid": rid, "type": "request_attention"}) == 1
    # ...but a node still undecided a bound after the resume pages again, once
    assert await recover_unknown_nodes(impatient) == 1
    await recover_unknown_nodes(impatient)
    assert await _state(svc, rid) == "MANUAL_INTERVENTION"
    assert await svc.db.fetchval(COUNT_EVENTS, {"rid": rid, "type": "request_attention"}) == 2


async def test_a_second_undecided_node_pages_again_after_its_sibling_is_resolved(
    svc: ServiceContext,
) -> None:
    """Two undecided nodes page together; operators settle one FAILED (four-eyes), which
    puts the movement back to EXECUTING with the other still UNKNOWN: that one must not
    wait silently, it pages again a bound later."""
    from qtg.services.node_attention import resolve_node

    await template(
        svc, "two",
        [node(k, "evm_transfer", sandbox=UNDECIDED) for k in "xy"],
        [],
    )  # fmt: skip
    m = await movement(svc, "two")
    rid = m["id"]
    while await dispatch_ready_nodes(svc):
        pass
    assert {(await _node(svc, rid, k))["node_state"] for k in "xy"} == {"UNKNOWN"}
    impatient = with_settings(svc, node_unknown_attention_seconds=0.001)
    assert await recover_unknown_nodes(impatient) == 1
    assert await _state(svc, rid) == "MANUAL_INTERVENTION"
    for actor in ("carol", "dave"):
        await resolve_node(
            svc.db, svc.settings, rid, "x", actor=actor, outcome="FAILED",
            evidence="the signer's nonce was never used",
        )  # fmt: skip
    assert (await _node(svc, rid, "x"))["node_state"] == "FAILED"
    assert await _state(svc, rid) == "EXECUTING"  # y still undecided: nothing derives yet
    await recover_unknown_nodes(svc)  # within the bound: quiet
    assert await svc.db.fetchval(COUNT_EVENTS, {"rid": rid, "type": "request_attention"}) == 1
    assert await recover_unknown_nodes(impatient) == 1
    assert await _state(svc, rid) == "MANUAL_INTERVENTION"
    assert await svc.db.fetchval(COUNT_EVENTS, {"rid": rid, "type": "request_attention"}) == 2


async def test_a_hung_submit_pages_without_waiting_for_its_node(svc: ServiceContext) -> None:
    """A SUBMITTING node past its grace whose row a worker still holds (a submit
    that never returns): recovery skips it, the attention sweep still pages —
    and does not wait for the held row."""
    await template(svc, "hung", [node("x", "evm_transfer")], [])
    m = await movement(svc, "hung")
    sub = await write_ahead_only(svc)
    assert (await _node(svc, m["id"]))["node_state"] == "SUBMITTING"
    impatient = with_settings(
        svc,
        node_recovery_submitting_grace_seconds=0.001,
        node_unknown_attention_seconds=0.001,
    )
    async with svc.db.transaction() as holder:
        await holder.fetchrow(LOCK_NODE, {"nid": sub.node_id})
        with trio.fail_after(10):  # a wait on the held row would hang here
            await recover_unknown_nodes(impatient)
        assert await _state(svc, m["id"]) == "MANUAL_INTERVENTION"
    assert (await _node(svc, m["id"]))["node_state"] == "SUBMITTING"  # nothing guessed
    [page] = await svc.db.fetch(PAGE_NODES, {"rid": m["id"]})  # the page names the node
    assert page["node_keys"] == ["x"] and "x: SUBMITTING" in page["body"], page


class _Gated:
    """The sandbox provider with every submit held until `gate` is set (then the
    sandbox answers as it would): a test decides when the submit returns."""

    def __init__(self, inner: Any, gate: trio.Event) -> None:
        self._inner, self._gate = inner, gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def executor_for(self, *args: Any) -> Any:
        return _GatedExecutor(self._inner.executor_for(*args), self._gate)


class _GatedExecutor:
    def __init__(self, inner: Any, gate: trio.Event) -> None:
        self._inner, self._gate = inner, gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def submit(self, *args: Any) -> Any:
        await self._gate.wait()
        return await self._inner.submit(*args)


async def test_a_lost_settle_is_settled_by_the_sweep(svc: ServiceContext, dsn: str) -> None:
    """Fail the dispatcher's settle on purpose: while the submit is in flight,
    another connection takes the request; the submit is refused (FAILED,
    committed on the node row), and the dispatcher's settle times out behind
    the held request. The request is left EXECUTING with its only node FAILED;
    node_recovery's sweep settles it (FAILED, paged)."""
    await template(
        svc, "rejected", [node("x", "evm_transfer", sandbox={"fail": "submit_rejected"})], []
    )
    m = await movement(svc, "rejected")
    rid = m["id"]
    failure: list[BaseException] = []
    gate, held, release = trio.Event(), trio.Event(), trio.Event()

    async def hold_request() -> None:
        async with svc.db.transaction() as tx:
            await tx.fetchrow(LOCK_REQUEST, {"rid": rid})
            held.set()
            await release.wait()

    async with Database(dsn, max_size=4, statement_timeout_ms=500) as impatient_db:
        dispatcher = ServiceContext(impatient_db, svc.settings, _Gated(svc.providers, gate))

        async def dispatch() -> None:
            try:
                await dispatch_ready_nodes(dispatcher)
            except Exception as exc:  # the settle's statement timeout
                failure.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(dispatch)
            # the write-ahead commit happened; the submit call waits for the gate
            await eventually(lambda: _node_state_is(svc, rid, "SUBMITTING"), deadline=10)
            nursery.start_soon(hold_request)
            await held.wait()
            gate.set()
            await eventually(lambda: _node_state_is(svc, rid, "FAILED"), deadline=10)
            with trio.fail_after(10):
                while not failure:  # noqa: ASYNC110 - the dispatcher task's own outcome
                    await trio.sleep(0.02)
            release.set()
    assert isinstance(failure[0], psycopg.errors.QueryCanceled), failure
    # the gap: nothing in flight, yet EXECUTING
    assert await _state(svc, rid) == "EXECUTING"
    # within the settle grace the sweep leaves it to its own worker
    assert await recover_unknown_nodes(svc) == 0
    assert await _state(svc, rid) == "EXECUTING"
    sweeping = with_settings(svc, node_settle_grace_seconds=0.001)
    assert await recover_unknown_nodes(sweeping) == 1
    assert await _state(svc, rid) == "FAILED"
    assert [n["kind"] for n in await svc.db.fetch(NOTIFICATIONS, {"rid": rid})] == [
        "request_failed"
    ]
    assert await recover_unknown_nodes(sweeping) == 0  # settled once, nothing to go round for


async def _node_state_is(svc: ServiceContext, rid: Any, state: str) -> bool:
    return (await _node(svc, rid))["node_state"] == state


@pytest.mark.parametrize("held", [False, True])
async def test_the_settle_sweep_leaves_undecided_and_held_requests_alone(
    svc: ServiceContext, held: bool
) -> None:
    """An UNKNOWN node with no side effect is recovery's to decide (not listed), and
    a request a worker holds is skipped, never waited for."""
    m = await _undecided_movement(svc)
    sweeping = with_settings(svc, node_settle_grace_seconds=0.001)
    if held:
        async with svc.db.transaction() as holder:
            await holder.fetchrow(LOCK_REQUEST, {"rid": m["id"]})
            with trio.fail_after(10):
                assert await recover_unknown_nodes(sweeping) == 0
    else:
        assert await recover_unknown_nodes(sweeping) == 0
    assert await _state(svc, m["id"]) == "EXECUTING"


async def test_no_page_while_a_sibling_branch_has_money_in_flight(svc: ServiceContext) -> None:
    """Moving the request to MANUAL_INTERVENTION would stop the observer watching a
    sibling's transfer: the page waits until nothing else is in flight."""
    await template(
        svc, "par",
        [
            node("x", "evm_transfer", sandbox=UNDECIDED),
            node("y", "cex_withdrawal", sandbox={"observations_to_complete": 2,
                                                 "retry_after_seconds": 3600}),
        ],
        [],
    )  # fmt: skip
    m = await movement(svc, "par")
    while await dispatch_ready_nodes(svc):
        pass
    await observe_active_nodes(svc)  # y: pending, next look in an hour
    assert (await _node(svc, m["id"], "x"))["node_state"] == "UNKNOWN"
    assert (await _node(svc, m["id"], "y"))["node_state"] in ("SUBMITTED", "OBSERVING")
    impatient = with_settings(svc, node_unknown_attention_seconds=0.001)
    await recover_unknown_nodes(impatient)
    assert await _state(svc, m["id"]) == "EXECUTING"
    assert await svc.db.fetchval(COUNT_EVENTS, {"rid": m["id"], "type": "request_attention"}) == 0
