"""One bad node never stops the others (issue 44 item 2).

A provider whose observe keeps raising is counted on its node, spaced out and
paged after MG_NODE_UNKNOWN_ATTENTION_SECONDS (and no longer silences an
UNKNOWN sibling's page); a NUL in one node's answer is stored cleaned, and an
answer the database cannot store at all costs only its own node the batch
write; a node whose recovery cannot be written is recorded on that node and
the pass's sweeps still page another movement's undecided node.

The provider is a real executor object registered next to the sandbox (its
answers chosen per node by the test); everything else is the real observer,
recovery and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import trio

from qtg.db import Query
from qtg.domain.context import ExecutionContext
from qtg.providers.base import (
    ObserveResult,
    ObserveStatus,
    PreparedAction,
    RecoverOutcome,
    RecoverResult,
    SubmitResult,
)
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.observe import observe_active_nodes
from qtg.services.recover import recover_unknown_nodes

from .helpers import Q, movement, node, template, with_settings

ACTION = "flaky_transfer"

NODE_ROW = Query(
    "tests/isolation-node",
    "SELECT n.id, n.node_state, n.observe_count, n.observe_errors, n.observe_failing_since,"
    " n.observe_paged_at, n.error_detail, n.provider_refs, n.recover_attempts,"
    " extract(epoch FROM n.next_observe_at - now()) AS due_in"
    " FROM movement_request_nodes n WHERE n.request_id = %(rid)s AND n.node_key = %(key)s",
)
MAKE_DUE = Query(
    "tests/isolation-make-due",
    "UPDATE movement_request_nodes SET next_observe_at = now()"
    " WHERE node_state IN ('SUBMITTED', 'OBSERVING')",
)
AGE_FAILING = Query(
    "tests/isolation-age-failing",
    "UPDATE movement_request_nodes SET observe_failing_since = now() - interval '2 hours'"
    " WHERE observe_failing_since IS NOT NULL",
)
PAGES = Query(
    "tests/isolation-pages",
    "SELECT kind, severity, resolved_at, occurrences FROM notifications"
    " WHERE request_id = %(rid)s ORDER BY id",
)
MAKE_RECOVERABLE = Query(
    "tests/isolation-recoverable",
    "UPDATE movement_request_nodes SET next_recover_at = now() WHERE node_state = 'UNKNOWN'",
)


class Flaky:
    """An executor whose observe/recover answer is chosen per node key by the test."""

    key = "flaky"
    action_types = frozenset({ACTION})

    def __init__(self) -> None:
        #: node_key or node id -> "raise" | "nul" | "unstorable" | "pending"
        self.observe_mode: dict[str, str] = {}
        #: node_key -> "unstorable" | "unknown"
        self.recover_mode: dict[str, str] = {}
        #: request ids whose prepared payload carries a NUL
        self.poison: set[str] = set()

    async def preflight(self, ctx: ExecutionContext) -> None:
        return None

    async def prepare(self, ctx: ExecutionContext) -> PreparedAction:
        payload = json.dumps({"node": ctx.request_node_id})
        if ctx.request_id in self.poison:
            payload += "\x00"
        return PreparedAction(
            action_type=ctx.action_type,
            payload_format="json",
            payload=payload,
            payload_hash=hashlib.sha256(payload.encode()).hexdigest(),
        )

    async def submit(
        self, ctx: ExecutionContext, prepared: PreparedAction, signature: str | None, key: str
    ) -> SubmitResult:
        if self.recover_mode.get(ctx.node_key):
            raise RuntimeError("connection reset after sending")  # UNKNOWN: recovery asks
        return SubmitResult(provider_refs={"ref": key})

    async def observe(self, ctx: ExecutionContext) -> ObserveResult:
        mode = self.observe_mode.get(
            ctx.request_node_id, self.observe_mode.get(ctx.node_key, "pending")
        )
        if mode == "raise":
            raise RuntimeError("provider status endpoint answered 502")
        if mode == "nul":
            return ObserveResult(status=ObserveStatus.PENDING, provider_refs={"memo\x00": "a\x00b"})
        if mode == "unstorable":
            return ObserveResult(status=ObserveStatus.PENDING, provider_refs={"x": object()})
        return ObserveResult(status=ObserveStatus.PENDING, provider_refs={"seen": True})

    async def recover(self, ctx: ExecutionContext) -> RecoverResult:
        if self.recover_mode.get(ctx.node_key) == "unstorable":
            return RecoverResult(outcome=RecoverOutcome.COMPLETED, artifacts={"x": object()})
        return RecoverResult(outcome=RecoverOutcome.UNKNOWN, error_detail="cannot tell yet")


def _flaky(svc: ServiceContext) -> Flaky:
    executor = Flaky()
    svc.providers.add_executor(executor)
    return executor


async def _row(svc: ServiceContext, rid: Any, key: str = "x") -> dict[str, Any]:
    row = await svc.db.fetchrow(NODE_ROW, {"rid": rid, "key": key})
    assert row is not None
    return row


async def _dispatch_all(svc: ServiceContext) -> None:
    while await dispatch_ready_nodes(svc):
        pass


async def test_an_observe_that_keeps_raising_is_counted_spaced_out_and_pages(
    svc: ServiceContext,
) -> None:
    flaky = _flaky(svc)
    flaky.observe_mode["x"] = "raise"
    await template(svc, "raising", [node("x", ACTION)], [])
    m = await movement(svc, "raising")
    rid = m["id"]
    await _dispatch_all(svc)

    dues = []
    for i in range(1, 4):
        await svc.db.execute(MAKE_DUE)
        assert await observe_active_nodes(svc) == 1
        row = await _row(svc, rid)
        assert row["node_state"] == "OBSERVING"  # still pending: the money may be out there
        assert row["observe_errors"] == i
        assert row["observe_failing_since"] is not None
        assert "provider status endpoint answered 502" in row["error_detail"]
        dues.append(row["due_in"])
    assert dues[0] < dues[1] < dues[2]  # spaced out, doubling

    # within the bound: no page
    await recover_unknown_nodes(svc)
    assert await svc.db.fetch(PAGES, {"rid": rid}) == []
    # past it: one critical page; the movement stays EXECUTING, still observed
    impatient = with_settings(svc, node_unknown_attention_seconds=0.001)
    await recover_unknown_nodes(impatient)
    await recover_unknown_nodes(impatient)
    [page] = await svc.db.fetch(PAGES, {"rid": rid})
    assert (page["kind"], page["severity"], page["resolved_at"], page["occurrences"]) == (
        "observe_failing", "critical", None, 1,
    )  # fmt: skip
    assert (await svc.db.fetchrow(Q["request"], {"rid": rid}))["request_state"] == "EXECUTING"

    # the provider answers again: the run ends, and the page resolves itself
    flaky.observe_mode["x"] = "pending"
    await svc.db.execute(MAKE_DUE)
    assert await observe_active_nodes(svc) == 1
    row = await _row(svc, rid)
    assert (row["observe_errors"], row["observe_failing_since"]) == (0, None)
    await recover_unknown_nodes(impatient)
    [page] = await svc.db.fetch(PAGES, {"rid": rid})
    assert page["resolved_at"] is not None
    assert (await _row(svc, rid))["observe_paged_at"] is None


async def test_a_failing_sibling_does_not_silence_an_unknown_node(svc: ServiceContext) -> None:
    """x's observations fail for hours; y is UNKNOWN and recovery cannot tell. The
    guard "money in flight on another branch" must not keep y from paging: x is
    not being watched."""
    flaky = _flaky(svc)
    flaky.observe_mode["x"] = "raise"
    flaky.recover_mode["y"] = "unknown"
    await template(svc, "sibling", [node("x", ACTION), node("y", ACTION)], [])
    m = await movement(svc, "sibling")
    rid = m["id"]
    await _dispatch_all(svc)
    assert (await _row(svc, rid, "y"))["node_state"] == "UNKNOWN"
    await observe_active_nodes(svc)
    assert (await _row(svc, rid, "x"))["observe_errors"] == 1

    impatient = with_settings(svc, node_unknown_attention_seconds=3600)
    await svc.db.execute(AGE_FAILING)
    # y has not been undecided for an hour yet: nothing pages for it
    await recover_unknown_nodes(impatient)
    assert (await svc.db.fetchrow(Q["request"], {"rid": rid}))["request_state"] == "EXECUTING"
    # y undecided past the bound (x failing for 2 h): y pages, the movement needs a person
    very = with_settings(svc, node_unknown_attention_seconds=0.001)
    await recover_unknown_nodes(very)
    assert (await svc.db.fetchrow(Q["request"], {"rid": rid}))["request_state"] == (
        "MANUAL_INTERVENTION"
    )


async def test_a_healthy_sibling_in_flight_still_holds_the_page(svc: ServiceContext) -> None:
    """The guard still holds for a sibling whose observations answer."""
    flaky = _flaky(svc)
    flaky.recover_mode["y"] = "unknown"
    await template(svc, "healthy", [node("x", ACTION), node("y", ACTION)], [])
    m = await movement(svc, "healthy")
    rid = m["id"]
    await _dispatch_all(svc)
    await observe_active_nodes(svc)
    assert (await _row(svc, rid, "x"))["observe_errors"] == 0
    await recover_unknown_nodes(with_settings(svc, node_unknown_attention_seconds=0.001))
    assert (await svc.db.fetchrow(Q["request"], {"rid": rid}))["request_state"] == "EXECUTING"


async def test_one_nodes_bad_answer_does_not_cost_the_batch_its_write(
    svc: ServiceContext,
) -> None:
    """Four nodes observed in one batch: one answers with NULs (stored, cleaned),
    one with a value the database cannot take at all. Every other node's
    observation is written; the unstorable one is recorded as a failed
    observation on its node, and spaced out behind the others."""
    flaky = _flaky(svc)
    await template(svc, "batch", [node("x", ACTION)], [])
    rids = [(await movement(svc, "batch", key=f"batch-{i}"))["id"] for i in range(4)]
    await _dispatch_all(svc)
    nul, unstorable = rids[0], rids[1]
    flaky.observe_mode[str((await _row(svc, nul))["id"])] = "nul"
    flaky.observe_mode[str((await _row(svc, unstorable))["id"])] = "unstorable"
    assert await observe_active_nodes(svc) == 4
    after = {rid: await _row(svc, rid) for rid in rids}
    for rid in rids:
        assert after[rid]["observe_count"] == 1, rid  # every node's observation written
    assert after[nul]["provider_refs"]["memo\ufffd"] == "a\ufffdb"
    assert after[nul]["observe_errors"] == 0
    assert after[unstorable]["observe_errors"] == 1
    assert "could not be stored" in after[unstorable]["error_detail"]
    assert "x" not in after[unstorable]["provider_refs"]
    others = [after[rid]["due_in"] for rid in rids if rid != unstorable]
    assert after[unstorable]["due_in"] > max(others) - 1  # not back first at once

    # again: the same, no batch ever lost
    await svc.db.execute(MAKE_DUE)
    assert await observe_active_nodes(svc) == 4
    again = {rid: await _row(svc, rid) for rid in rids}
    assert [again[rid]["observe_count"] for rid in rids] == [2, 2, 2, 2]
    assert again[unstorable]["observe_errors"] == 2


async def test_one_nodes_recovery_failure_does_not_stop_the_pass_nor_its_sweeps(
    svc: ServiceContext,
) -> None:
    """Node a's recover() answers something that cannot be written; node b, of
    another movement, is undecided past the bound. Every pass still pages b, and
    a's failure is recorded on a (paced), not raised out of the pass."""
    flaky = _flaky(svc)
    flaky.recover_mode["a"] = "unstorable"
    flaky.recover_mode["b"] = "unknown"
    await template(svc, "bad-recover", [node("a", ACTION)], [])
    await template(svc, "undecided-b", [node("b", ACTION)], [])
    bad = (await movement(svc, "bad-recover"))["id"]
    other = (await movement(svc, "undecided-b"))["id"]
    await _dispatch_all(svc)
    assert (await _row(svc, bad, "a"))["node_state"] == "UNKNOWN"
    assert (await _row(svc, other, "b"))["node_state"] == "UNKNOWN"

    impatient = with_settings(svc, node_unknown_attention_seconds=0.001)
    await svc.db.execute(MAKE_RECOVERABLE)
    with trio.fail_after(30):
        await recover_unknown_nodes(impatient)  # does not raise
    row = await _row(svc, bad, "a")
    assert row["node_state"] == "UNKNOWN"
    assert row["recover_attempts"] == 1
    assert "recovery of this node failed" in row["error_detail"]
    # b's movement was paged in the same pass
    assert (await svc.db.fetchrow(Q["request"], {"rid": other}))["request_state"] == (
        "MANUAL_INTERVENTION"
    )


class Blocking(Flaky):
    """recover() of node "slow" blocks until the test lets it go."""

    key = "blocking"
    action_types = frozenset({"blocking_transfer"})

    def __init__(self) -> None:
        super().__init__()
        self.entered = trio.Event()
        self.release = trio.Event()

    async def recover(self, ctx: ExecutionContext) -> RecoverResult:
        if ctx.node_key == "slow":
            self.entered.set()
            await self.release.wait()
            return RecoverResult(outcome=RecoverOutcome.COMPLETED, provider_refs={"late": 1})
        return await super().recover(ctx)


async def test_a_slow_recover_holds_no_lock_the_others_need(svc: ServiceContext) -> None:
    """While recover() of node slow blocks, its movement's other node is observed
    and written, and operators can propose a resolution of slow (no NODE_BUSY):
    recovery holds nothing across the call. The late answer is then written
    under its lease; after an operator's confirmed resolution it would be
    discarded (checked on a second round)."""
    from qtg.services.node_attention import resolve_node

    blocking = Blocking()
    svc.providers.add_executor(blocking)
    blocking.recover_mode["slow"] = "unknown"  # its submit raises: UNKNOWN
    await template(
        svc, "slow", [node("slow", "blocking_transfer"), node("other", "blocking_transfer")], []
    )
    rid = (await movement(svc, "slow"))["id"]
    await _dispatch_all(svc)
    assert (await _row(svc, rid, "slow"))["node_state"] == "UNKNOWN"
    assert (await _row(svc, rid, "other"))["node_state"] == "SUBMITTED"
    await svc.db.execute(MAKE_RECOVERABLE)

    result: list[int] = []

    async def recovery() -> None:
        result.append(await recover_unknown_nodes(svc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(recovery)
        with trio.fail_after(10):
            await blocking.entered.wait()
        # recover() is in flight: the observer's write for the same movement goes through
        with trio.fail_after(10):
            assert await observe_active_nodes(svc) == 1
        assert (await _row(svc, rid, "other"))["node_state"] == "OBSERVING"
        # and an operator's resolution is not refused NODE_BUSY
        with trio.fail_after(10):
            _, confirmed = await resolve_node(
                svc.db, svc.settings, rid, "slow", actor="carol",
                outcome="COMPLETED", evidence="venue statement 42",
            )  # fmt: skip
        assert confirmed is False  # a proposal: nothing moved
        blocking.release.set()
    assert result == [1]  # the late answer was written under its lease
    row = await _row(svc, rid, "slow")
    assert row["node_state"] == "COMPLETED"
    assert row["provider_refs"]["late"] == 1


async def test_a_recover_answer_is_discarded_when_its_node_moved_on(svc: ServiceContext) -> None:
    """Operators settle the node FAILED (four-eyes) while recover() is in flight:
    the late COMPLETED answer is discarded, never written over theirs."""
    from qtg.services.node_attention import resolve_node

    blocking = Blocking()
    svc.providers.add_executor(blocking)
    blocking.recover_mode["slow"] = "unknown"
    await template(svc, "moved", [node("slow", "blocking_transfer")], [])
    rid = (await movement(svc, "moved"))["id"]
    await _dispatch_all(svc)
    await svc.db.execute(MAKE_RECOVERABLE)
    result: list[int] = []

    async def recovery() -> None:
        result.append(await recover_unknown_nodes(svc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(recovery)
        with trio.fail_after(10):
            await blocking.entered.wait()
        for actor in ("carol", "dave"):
            await resolve_node(
                svc.db, svc.settings, rid, "slow", actor=actor,
                outcome="FAILED", evidence="the venue refused it",
            )  # fmt: skip
        blocking.release.set()
    assert result == [0]
    row = await _row(svc, rid, "slow")
    assert row["node_state"] == "FAILED"
    assert "late" not in row["provider_refs"]


async def test_one_unstorable_prepared_action_does_not_cost_the_batch_its_write_ahead(
    svc: ServiceContext,
) -> None:
    """Three movements claimed in one dispatch batch; one node's prepared action
    holds a NUL. That node alone fails before submit (nothing signed or sent);
    the others are written ahead and submitted in the same pass."""
    flaky = _flaky(svc)
    await template(svc, "poison", [node("x", ACTION)], [])
    rids = [(await movement(svc, "poison", key=f"poison-{i}"))["id"] for i in range(3)]
    flaky.poison.add(str(rids[1]))
    assert await dispatch_ready_nodes(svc) == 3
    after = {rid: await _row(svc, rid) for rid in rids}
    assert after[rids[1]]["node_state"] == "FAILED"
    assert after[rids[0]]["node_state"] == after[rids[2]]["node_state"] == "SUBMITTED"
    row = await svc.db.fetchrow(Q["request"], {"rid": rids[1]})
    assert row["request_state"] == "FAILED"
