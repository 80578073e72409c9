"""Issue 43 item 5 against a real anvil and a real database: reorgs are events.

A COMPLETED payment whose transaction leaves the canonical chain (anvil_rollback) raises a
`payment_reorged` event on its movement and a critical page in the pass that notices it,
and its kept bytes are sent again in that same pass; when they cannot land (the signer
drained), a critical `reorg_resend_failed` page says so (on a23afdb: an info log). The
pages close once the nonce is seen consumed again. Judged by the destination's balance.
"""

from __future__ import annotations

import secrets
from typing import Any

from runtime.rt_procs import query

from evm.anvil import ADDRESSES, CHAIN_ID, KEYS
from qtg.config import Settings
from qtg.providers.registry import build_registry
from qtg.services import evm_nonces, movements
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.observe import observe_active_nodes
from qtg.services.templates import create_template

WEI = 10**18


async def _completed(anvil, dsn: str, db) -> tuple[ServiceContext, dict[str, Any], str]:
    settings = Settings.from_env(
        {
            "MG_DATABASE_URL": dsn,
            "MG_PROVIDERS": "evm",
            "MG_EVM_RPC_URLS": f"{CHAIN_ID}={anvil.url}",
            "MG_EVM_SIGNER_PRIVATE_KEY": KEYS[0],
            "MG_EVM_NONCE_RESERVATION_STALE_SECONDS": "0.001",
        }
    )
    ctx = ServiceContext(db=db, settings=settings, providers=build_registry(settings, db))
    destination = "0x" + secrets.token_hex(20)
    await create_template(
        db, actor="alice", template_key="t", name="t",
        graph={"nodes": [{"key": "send", "kind": "action", "action_type": "evm_transfer",
                          "config": {"evm": {"chain_id": CHAIN_ID}}}]},
    )  # fmt: skip
    m, _ = await movements.create_movement(
        db, settings, template_key="t", idempotency_key=secrets.token_hex(8), actor="alice",
        intent={"asset": "ETH", "amount": "1", "destination": destination},
    )  # fmt: skip
    await movements.approve_movement(db, m["id"], actor="bob")
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
