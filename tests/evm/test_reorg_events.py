"""Issue 43 item 5 against a real anvil and a real database: reorgs are events.

A COMPLETED payment whose transaction leaves the canonical chain (anvil_rollback) raises a
`payment_reorged` event on its movement and a critical page in the pass that notices it,
and its kept bytes are sent again in that same pass; when they cannot land (the signer
drained), a critical `reorg_resend_failed` page says so (on a23afdb: an info log). The
pages close once the nonce is seen consumed again. Judged by the destination's balance.

The running worker (run_loop with the registry's spec, a real LISTEN hub) notices a reorg
within MG_EVM_REORG_WATCH_SECONDS, not at its next full pass (MG_EVM_NONCE_REAPER_INTERVAL_
SECONDS, 60 s), and an operator's FAILED resolution wakes it on qtg_evm_reaper: its cancel
is sent at once.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
from runtime.rt_procs import query

from evm.anvil import ADDRESSES
from evm.test_operator_failed import _in_mempool, _resolve_failed, approved_payment
from qtg.db import ListenHub
from qtg.runtime.loop import run_loop
from qtg.runtime.registry import WORKERS
from qtg.services import evm_nonces, movements
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.observe import observe_active_nodes

WEI = 10**18


async def _completed(anvil, dsn: str, db, **env: str) -> tuple[ServiceContext, dict[str, Any], str]:
    env = {"MG_EVM_NONCE_RESERVATION_STALE_SECONDS": "0.001", **env}
    ctx, m, destination = await approved_payment(anvil, dsn, db, **env)
    while await dispatch_ready_nodes(ctx):
        pass
    for _ in range(50):
        await observe_active_nodes(ctx)
        if (await movements.get_movement(db, m["id"]))["request_state"] == "COMPLETED":
            break
    assert (await movements.get_movement(db, m["id"]))["request_state"] == "COMPLETED"
    assert query(dsn, "SELECT state FROM evm_nonce_reservations") == [("consumed",)]
    assert anvil.balance(destination) == WEI
    return ctx, m, destination


def _events(dsn: str, m: dict[str, Any]) -> list[str]:
    rows = query(
        dsn,
        "SELECT event_type FROM movement_events WHERE request_id = %s"
        " AND event_type LIKE 'payment_%%' ORDER BY id",
        (m["id"],),
    )
    return [r[0] for r in rows]


def _pages(dsn: str) -> list[tuple[str, str, bool]]:
    return query(
        dsn,
        "SELECT kind, severity, resolved_at IS NULL FROM notifications"
        " WHERE kind IN ('payment_reorged', 'reorg_resend_failed') ORDER BY id",
    )


async def test_a_reorged_completed_payment_pages_and_is_sent_again_at_once(anvil, dsn, db) -> None:
    ctx, m, destination = await _completed(anvil, dsn, db)
    first = anvil.nonce(ADDRESSES[0]) - 1
    try:
        anvil.call("anvil_rollback", 1)  # the block with the payment is gone
        assert anvil.balance(destination) == 0 and anvil.nonce(ADDRESSES[0]) == first
        await evm_nonces.reap_stale_nonces(ctx)  # the pass that notices it
        assert _events(dsn, m) == ["payment_reorged"]
        assert _pages(dsn) == [("payment_reorged", "critical", True)]
        # re-sent in that same pass: anvil (automine) has mined it again
        assert anvil.nonce(ADDRESSES[0]) == first + 1
        assert anvil.balance(destination) == WEI  # paid again once: exactly once in all
        movement = await movements.get_movement(db, m["id"])
        assert movement["request_state"] == "COMPLETED"  # what it shows meanwhile
        query(dsn, "SELECT pg_sleep(0.01)")  # past the 1 ms stale threshold
        await evm_nonces.reap_stale_nonces(ctx)  # consumed again: the page closes
        assert _pages(dsn) == [("payment_reorged", "critical", False)]
    finally:
        await ctx.providers.aclose()
    assert anvil.balance(destination) == WEI


async def test_a_reorged_payment_that_cannot_land_pages(anvil, dsn, db) -> None:
    ctx, m, destination = await _completed(anvil, dsn, db)
    try:
        anvil.call("anvil_rollback", 1)
        anvil.call("anvil_setBalance", ADDRESSES[0], "0x0")  # the signer drained meanwhile
        await evm_nonces.reap_stale_nonces(ctx)
        assert _events(dsn, m) == ["payment_reorged", "payment_resend_failed"]
        assert _pages(dsn) == [
            ("payment_reorged", "critical", True),
            ("reorg_resend_failed", "critical", True),
        ]
        [(body,)] = query(dsn, "SELECT body FROM notifications WHERE kind = 'reorg_resend_failed'")
        assert "refused" in body and "fund" in body
    finally:
        await ctx.providers.aclose()
    assert anvil.balance(destination) == 0  # not on the chain, and a person was told


def _dotted(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


@asynccontextmanager
async def _reaper_running(ctx: ServiceContext, hub: ListenHub) -> AsyncIterator[list[int]]:
    """The evm_nonce_reaper worker as the runtime runs it (its registry spec: service,
    channel, next_due; its interval from the settings); yields once its first pass (a full
    one) is done. The list holds each finished pass's count."""
    [spec] = [w for w in WORKERS if w.name == "evm_nonce_reaper"]
    assert spec.service is not None and spec.channel is not None and spec.next_due is not None
    service, next_due = _dotted(spec.service), _dotted(spec.next_due)
    passes: list[int] = []
    first_done = trio.Event()

    async def counted() -> int:
        n = await service(ctx)
        passes.append(n)
        first_done.set()
        return int(n)

    async def due() -> Any:
        return await next_due(ctx)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: run_loop(
                spec.name,
                counted,
                ctx.settings.evm_nonce_reaper_interval_seconds,
                wakeup=hub.subscribe(spec.channel),
                next_due=due,
            )
        )
        with trio.fail_after(30):
            await first_done.wait()
        yield passes
        nursery.cancel_scope.cancel()


async def _until(condition: Any, deadline: float) -> float:
    """Seconds until `condition()` held; fails past `deadline` seconds. It polls: only the
    database and the chain can tell, there is no event to wait on."""
    start = trio.current_time()
    with trio.fail_after(deadline):
        while not condition():  # noqa: ASYNC110 - no event to wait on
            await trio.sleep(0.05)
    return trio.current_time() - start


async def test_the_running_reaper_notices_a_reorg_within_its_watch_not_its_interval(
    anvil, dsn, db, hub
) -> None:
    watch = 0.5
    ctx, m, destination = await _completed(
        anvil, dsn, db,
        MG_EVM_REORG_WATCH_SECONDS=str(watch), MG_EVM_NONCE_REAPER_INTERVAL_SECONDS="60",
    )  # fmt: skip
    first = anvil.nonce(ADDRESSES[0]) - 1
    try:
        async with _reaper_running(ctx, hub):
            anvil.call("anvil_rollback", 1)  # after its full pass: the next is 60 s away
            assert anvil.balance(destination) == 0 and anvil.nonce(ADDRESSES[0]) == first
            # within the watch (plus slack for a loaded machine), far below the interval
            await _until(lambda: _pages(dsn) == [("payment_reorged", "critical", True)], watch + 8)
            assert _events(dsn, m) == ["payment_reorged"]
            await _until(lambda: anvil.balance(destination) == WEI, watch + 8)  # re-sent
            assert anvil.nonce(ADDRESSES[0]) == first + 1
    finally:
        await ctx.providers.aclose()
    assert anvil.balance(destination) == WEI  # paid again once: exactly once in all


async def test_a_failed_resolution_wakes_the_reaper_and_its_cancel_is_sent_at_once(
    anvil, dsn, db, hub
) -> None:
    ctx, m, destination = await _in_mempool(anvil, dsn, db)
    # neither its interval nor its watch brings the next pass: only the wake-up can
    slow = dataclasses.replace(
        ctx.settings, evm_nonce_reaper_interval_seconds=60.0, evm_reorg_watch_seconds=60.0
    )
    ctx = dataclasses.replace(ctx, settings=slow)

    def cancels() -> list[tuple[str]]:
        return query(dsn, "SELECT tx_hash FROM evm_signed_transactions WHERE kind = 'cancel'")

    try:
        async with _reaper_running(ctx, hub):
            assert cancels() == []  # its first pass is done: the next is 60 s away
            await _resolve_failed(ctx, m)  # its commit notifies qtg_evm_reaper
            await _until(lambda: len(cancels()) == 1, 10)
            [(cancel_hash,)] = cancels()
            pending = anvil.call("eth_getTransactionByHash", cancel_hash)
            assert pending is not None and int(pending["value"], 16) == 0
    finally:
        anvil.call("evm_setAutomine", True)
        await ctx.providers.aclose()
    assert anvil.balance(destination) == 0
