"""Driving movements through the engine's passes, the way the runtime would, but by hand."""

from __future__ import annotations

import math
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import trio

from qtg.config import Settings
from qtg.db import Database, Query
from qtg.domain.context import ExecutionContext
from qtg.services.context import ServiceContext
from qtg.services.dispatch import (
    ClaimWalk,
    Leased,
    Submission,
    _lease,
    _write_ahead,
    defer_lease,
    dispatch_ready_nodes,
    lease_seconds,
    prepare_leased,
)
from qtg.services.movements import approve_movement, create_movement, get_movement
from qtg.services.observe import next_observe_due, observe_active_nodes
from qtg.services.recover import recover_unknown_nodes
from qtg.services.templates import create_template

# Test-only reads and pokes. The engine's own SQL lives in sql/.
Q = {
    name: Query(f"tests/{name}", text)
    for name, text in {
        "submissions": (
            "SELECT request_node_id, attempt_no, duplicate_submits FROM sandbox_submissions"
        ),
        "events": "SELECT * FROM movement_events WHERE request_id = %(rid)s ORDER BY id",
        "callbacks": (
            "SELECT * FROM movement_callback_outbox WHERE request_id = %(rid)s ORDER BY id"
        ),
        "audit": "SELECT * FROM audit_outbox WHERE object_id = %(oid)s ORDER BY id",
        "node": (
            "SELECT * FROM movement_request_nodes WHERE request_id = %(rid)s AND node_key = %(key)s"
        ),
        "request": "SELECT * FROM movement_requests WHERE id = %(rid)s",
        "nodes_oldest_first": (
            "SELECT n.id, n.node_state FROM movement_request_nodes n"
            " JOIN movement_requests r ON r.id = n.request_id ORDER BY r.created_at"
        ),
    }.items()
}

STOP_STATES = frozenset(
    {"COMPLETED", "FAILED", "MANUAL_INTERVENTION", "WAITING_MANUAL_ACTION", "CANCELLED"}
)


def node(key: str, action_type: str, kind: str = "action", **config: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "kind": kind, "action_type": action_type}
    if config:
        out["config"] = config
    return out


def with_settings(svc: ServiceContext, **changes: Any) -> ServiceContext:
    """`svc` with some settings changed (and its own in-process state: a new context)."""
    return ServiceContext(svc.db, svc.settings.replace(**changes), svc.providers)


async def template(svc: ServiceContext, key: str, nodes: list, edges: list, **kw: Any) -> dict:
    return await create_template(
        svc.db,
        template_key=key,
        name=key,
        graph={"nodes": nodes, "edges": edges},
        actor="admin",
        **kw,
    )


async def movement(
    svc: ServiceContext,
    template_key: str,
    *,
    amount: str = "100.00",
    creator: str = "alice",
    approver: str | None = "bob",
    callback_url: str | None = None,
    key: str | None = None,
) -> dict[str, Any]:
    created, _ = await create_movement(
        svc.db,
        svc.settings,
        template_key=template_key,
        intent={"asset": "USDC", "amount": amount, "destination": "0xabc"},
        input_params={"chain_family": "evm"},
        idempotency_key=key or f"{template_key}-{trio.current_time()}-{id(object())}",
        callback_url=callback_url,
        actor=creator,
    )
    if approver is None:
        return created
    return await approve_movement(svc.db, created["id"], actor=approver)


async def dispatched_movements(svc: ServiceContext, key: str, n: int, **sandbox: Any) -> list[Any]:
    """`n` approved movements of one sandbox `evm_transfer` node (its `sandbox`
    behaviour), dispatched; their node ids, oldest movement first."""
    await template(svc, key, [node("x", "evm_transfer", sandbox=sandbox)], [])
    for i in range(n):
        await movement(svc, key, key=f"{key}-{i}")
    while await dispatch_ready_nodes(svc):
        pass
    return [r["id"] for r in await svc.db.fetch(Q["nodes_oldest_first"])]


async def drive(
    svc: ServiceContext,
    request_id: Any,
    *,
    stop: frozenset[str] = STOP_STATES,
    deadline: float = 20,
) -> dict[str, Any]:
    """Run dispatch, observe and recover passes until the request reaches a stop state.

    When nothing is due, wait exactly until the next observation is due (the
    condition), bounded by `deadline` seconds.
    """
    with trio.fail_after(deadline):
        while True:
            worked = 0
            while n := await dispatch_ready_nodes(svc):
                worked += n
            worked += await observe_active_nodes(svc)
            worked += await recover_unknown_nodes(svc)
            current = await get_movement(svc.db, request_id)
            if current["request_state"] in stop and not worked:
                return current
            if not worked:
                due = await next_observe_due(svc)
                if due is None:
                    return current
                wait = (due - datetime.now(UTC)).total_seconds()
                await trio.sleep(max(0.0, min(wait, 1.0)) if math.isfinite(wait) else 0)


async def eventually(check: Callable[[], Awaitable[Any]], *, deadline: float = 20) -> Any:
    """Poll `check` until it returns something truthy; fail after `deadline` seconds.

    For conditions only the database can tell (another process's commit, a dead
    backend's locks going away): there is no notification to wait on.
    """
    with trio.fail_after(deadline):
        while not (result := await check()):  # noqa: ASYNC110 - no event to wait on
            await trio.sleep(0.02)
        return result


def states(m: dict[str, Any]) -> dict[str, str]:
    return {n["node_key"]: n["node_state"] for n in m["nodes"]}


async def write_ahead_only(svc: ServiceContext) -> Submission:
    """Claim, lease, prepare one node and commit SUBMITTING — then "crash": no
    submit call, and no record of one. Returns the prepared Submission."""
    submission = await write_ahead_one(svc)
    assert submission is not None
    return submission


async def write_ahead_one(svc: ServiceContext) -> Submission | None:
    """The dispatcher's steps for one claimed node up to its write-ahead commit (the
    claim with its lease, prepare with no transaction open, the write-ahead), with
    no submit; its Submission, or None (it failed, waits, or was an observe node)."""
    lease = uuid.uuid4()
    leases: list[Leased] = []
    async with svc.db.transaction() as tx:
        claimed = await ClaimWalk(svc.settings.network_class).step(tx)
        assert claimed is not None
        await _lease(svc, tx, lease, *claimed, leases)
        defer_lease(svc, tx, lease, leases)
    cut_off_at = trio.current_time() + lease_seconds(svc) / 2
    for leased in leases:
        await prepare_leased(svc, leased, cut_off_at)
    [*submissions] = await _write_ahead(svc, lease, leases)
    return submissions[0] if submissions else None


PassFn = Callable[[ServiceContext], Awaitable[int]]


async def race_passes(
    svc: ServiceContext,
    dsn: str,
    settings: Settings,
    pass_fn: PassFn,
    *,
    more: Query,
    before: PassFn | None = None,
    pool_size: int = 4,
    racers: int = 4,
) -> tuple[list[int], int]:
    """Run `racers` worker loops side by side, each on its own pool (as separate
    processes would), each calling `pass_fn` while the count `more` is above 0
    (after `before`, uncounted, when given). Returns every pass's result and
    the most `pass_fn` calls that were in flight at once (> 1: they raced)."""
    results: list[int] = []
    overlapping = running = 0

    async def racer() -> None:
        nonlocal overlapping, running
        async with Database(dsn, max_size=pool_size) as db:  # its own connections
            ctx = ServiceContext(db, settings, svc.providers)
            with trio.fail_after(60):
                while await db.fetchval(more):
                    if before is not None:
                        await before(ctx)
                    running += 1
                    overlapping = max(overlapping, running)
                    try:
                        results.append(await pass_fn(ctx))
                    finally:
                        running -= 1

    async with trio.open_nursery() as nursery:
        for _ in range(racers):
            nursery.start_soon(racer)
    return results, overlapping


class WrappedExecutor:
    """An executor (the sandbox's, in these tests) with every call passed through:
    a test's executor subclasses it and overrides only the call it changes. `key`
    is what a plan node's `executor_key` names it by."""

    key = "wrapped"

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.action_types = inner.action_types

    async def preflight(self, ctx: ExecutionContext) -> None:
        await self._inner.preflight(ctx)

    async def prepare(self, ctx: ExecutionContext) -> Any:
        return await self._inner.prepare(ctx)

    async def submit(self, ctx: ExecutionContext, prepared: Any, signature: Any, key: str) -> Any:
        return await self._inner.submit(ctx, prepared, signature, key)

    async def observe(self, ctx: ExecutionContext) -> Any:
        return await self._inner.observe(ctx)

    async def recover(self, ctx: ExecutionContext) -> Any:
        return await self._inner.recover(ctx)
