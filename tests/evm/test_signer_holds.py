"""Signer holds (issue 43): the primitive every chain helper stops a signer with.

Against real PostgreSQL (and, for the end-to-end test, a real `bin/qtg-runtime`
and a real anvil): placing is idempotent even when several connections race,
pages critical once, and holds every new nonce reservation of that signer (a
wait, EVM_SIGNER_HELD, never FAILED, nothing sent); clearing is audited,
resolves the page and lets the movements go on, each destination paid once.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
import trio
from runtime.rt_procs import query, request_states, wait_until

from evm.anvil import ADDRESSES, CHAIN_ID
from evm.test_transient_and_lanes import fresh_address, launch, nodes, seed, settled
from qtg.db import Database, Query
from qtg.providers.base import RetryLater
from qtg.providers.evm import holds
from qtg.providers.evm import nonces as evm_nonces
from qtg.services import evm_signer_holds as service
from qtg.services.errors import Conflict, InvalidInput, NotFound

SIGNER = "0x" + "ab" * 20
PAGES = Query(
    "test/pages",
    "SELECT severity, kind, occurrences, resolved_at IS NOT NULL AS resolved"
    " FROM notifications ORDER BY id",
)
RESERVATIONS = Query("test/reservations", "SELECT count(*) FROM evm_nonce_reservations")
AUDIT = Query("test/audit", "SELECT action, actor FROM audit_outbox")
EVIDENCE = {"tx_hash": "0x" + "cd" * 32, "block": 7, "nonce": 3}


async def place(db: Database, chain_id: int | None = 1, reason: str = "FOREIGN_NONCE_CONSUMER"):
    return await holds.place(
        db, chain_id=chain_id, address=SIGNER, reason=reason, evidence=EVIDENCE, actor="test"
    )


async def test_placing_is_idempotent_and_pages_critical_once(db: Database) -> None:
    first = await place(db)
    again = await place(db)
    assert first["created"] is True and again["created"] is False
    assert again["id"] == first["id"] and again["occurrences"] == 2
    rows = await _pages(db)
    assert rows == [("critical", "evm_signer_hold", 2, False)]
    assert first["notification_id"] == again["notification_id"]


async def test_racing_placements_make_one_hold(db: Database) -> None:
    results: list[dict] = []

    async def one() -> None:
        results.append(await place(db))

    async with trio.open_nursery() as nursery:
        for _ in range(6):
            nursery.start_soon(one)
    assert len({r["id"] for r in results}) == 1
    assert sum(r["created"] for r in results) == 1
    assert [h["occurrences"] for h in await holds.active(db, chain_id=1, address=SIGNER)] == [6]
    assert len(await _pages(db)) == 1


async def test_a_hold_stops_new_nonces_of_that_signer_on_that_chain(db: Database) -> None:
    await holds.check(db, chain_id=1, address=SIGNER)  # nothing held: passes
    await place(db, chain_id=1)
    with pytest.raises(RetryLater) as caught:
        await holds.check(db, chain_id=1, address=SIGNER.upper().replace("0X", "0x"))
    assert caught.value.code == "EVM_SIGNER_HELD"
    with pytest.raises(RetryLater):
        await evm_nonces.reserve(
            db,
            chain_id=1,
            address=SIGNER,
            request_node_id="n1",
            attempt_no=1,
            chain_floor=0,
        )
    assert await db.fetchval(RESERVATIONS) == 0
    # another chain is not held; another signer is not held
    await holds.check(db, chain_id=2, address=SIGNER)
    await holds.check(db, chain_id=1, address="0x" + "01" * 20)
    assert (
        await evm_nonces.reserve(
            db, chain_id=2, address=SIGNER, request_node_id="n2", attempt_no=1, chain_floor=5
        )
        == 5
    )


async def test_an_every_chain_hold_holds_each_chain(db: Database) -> None:
    await place(db, chain_id=None, reason="LEDGER_BEHIND_CHAIN")
    for chain_id in (1, 10, 31337):
        with pytest.raises(RetryLater):
            await holds.check(db, chain_id=chain_id, address=SIGNER)


async def test_clearing_is_audited_resolves_the_page_and_signs_again(db: Database) -> None:
    hold = await place(db)
    with pytest.raises(InvalidInput):
        await service.clear_hold(db, hold["id"], actor="carol", evidence="  ")
    cleared = await service.clear_hold(
        db, hold["id"], actor="carol", evidence="the key is ours alone: rotated"
    )
    assert cleared["cleared_by"] == "carol" and cleared["pages_resolved"] == 1
    await holds.check(db, chain_id=1, address=SIGNER)
    assert await _pages(db) == [("critical", "evm_signer_hold", 1, True)]
    assert await service.list_holds(db) == []
    assert [h["id"] for h in await service.list_holds(db, active_only=False)] == [hold["id"]]
    actions = await db.fetch(AUDIT)
    assert {"action": "evm_signer_hold.cleared", "actor": "carol"} in actions
    with pytest.raises(Conflict) as caught:
        await service.clear_hold(db, hold["id"], actor="dave", evidence="again")
    assert caught.value.code == "HOLD_ALREADY_CLEARED"
    with pytest.raises(NotFound):
        await service.clear_hold(db, 999_999, actor="dave", evidence="x")
    # the same reason again after a clearing is a new hold, and pages again
    again = await place(db)
    assert again["created"] is True and again["id"] != hold["id"]
    assert len(await _pages(db)) == 2


async def _pages(db: Database) -> list[tuple]:
    return [tuple(r.values()) for r in await db.fetch(PAGES)]


@pytest.mark.slow
def test_held_signer_waits_pages_and_pays_once_after_clearing(anvil, dsn, procs) -> None:
    """Under a real runtime: a held signer's movements wait (READY, EVM_SIGNER_HELD),
    nothing goes on chain; cleared, each destination is paid exactly its intent."""

    async def hold_it() -> int:
        async with Database(dsn, min_size=1, max_size=2) as db:
            row = await holds.place(
                db,
                chain_id=CHAIN_ID,
                address=ADDRESSES[0],
                reason="FOREIGN_NONCE_CONSUMER",
                evidence=EVIDENCE,
                actor="test",
            )
            return int(row["id"])

    hold_id = trio.run(hold_it)
    sent_before = anvil.nonce(ADDRESSES[0])
    payments = [(fresh_address(), "0.25"), (fresh_address(), "0.5")]
    launch(procs, dsn, anvil.url).wait_ready()
    ids = seed(dsn, payments, key="held")

    def all_held() -> bool:
        rows = nodes(dsn, ids)
        return len(rows) == 2 and all(
            s == "READY" and code == "EVM_SIGNER_HELD" and tries >= 2 for s, code, _, tries in rows
        )

    wait_until(all_held, 60, "both nodes to wait on the signer hold")
    assert set(request_states(dsn, ids).values()) == {"EXECUTING"}
    assert anvil.nonce(ADDRESSES[0]) == sent_before  # nothing went out
    assert query(dsn, "SELECT count(*) FROM evm_nonce_reservations") == [(0,)]
    assert query(dsn, "SELECT severity FROM notifications WHERE kind = 'evm_signer_hold'") == [
        ("critical",)
    ]

    async def clear() -> None:
        async with Database(dsn, min_size=1, max_size=2) as db:
            await service.clear_hold(db, hold_id, actor="carol", evidence="key checked")

    trio.run(clear)
    states = wait_until(lambda: settled(dsn, ids), 90, "the movements to settle")
    assert set(states.values()) == {"COMPLETED"}, states
    for destination, amount in payments:
        assert anvil.balance(destination) == int(Decimal(amount) * 10**18)
    assert anvil.nonce(ADDRESSES[0]) == sent_before + 2
