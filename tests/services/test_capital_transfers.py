"""capital_transfer_followup (§12) and the capital transfer rules, on a real PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from engine.helpers import drive, node, template

from qtg.config import Settings
from qtg.db import Database, Query
from qtg.providers.registry import build_registry
from qtg.services.capital_transfers import (
    create_capital_transfer,
    follow_up_pending_capital_transfers,
    get_capital_transfer,
    movement_idempotency_key,
)
from qtg.services.context import ServiceContext
from qtg.services.errors import IdempotencyConflict, InvalidInput, NotFound
from qtg.services.movements import approve_movement

Q = {
    name: Query(f"tests/capital_transfers/{name}", text)
    for name, text in {
        # a transfer whose API call died before it created the movement (the crash path)
        "insert_orphan": (
            "INSERT INTO capital_transfer_requests (network_class, asset, amount, source,"
            " destination, template_key, idempotency_key, request_fingerprint, created_by,"
            " created_at)"
            " SELECT 'default', 'USDC', i || '.00', 'binance', '0xabc', %(template_key)s,"
            " 'orphan-' || i, 'fp', 'alice', now() - interval '1 hour'"
            " FROM generate_series(1, %(n)s) AS i RETURNING id"
        ),
        "transfer_movements": (
            "SELECT t.id, t.status, t.request_id, r.idempotency_key, r.created_by"
            " FROM capital_transfer_requests t LEFT JOIN movement_requests r"
            " ON r.id = t.request_id ORDER BY t.id"
        ),
        "movement_count": (
            "SELECT count(*) FROM movement_requests"
            " WHERE idempotency_key LIKE 'capital-transfer:%%'"
        ),
        "backdate": (
            "UPDATE capital_transfer_requests SET created_at = now() - interval '1 hour'"
            " WHERE id = %(id)s"
        ),
        "notifications": "SELECT * FROM notifications ORDER BY id",
        "insert_orphan_in": (
            "INSERT INTO capital_transfer_requests (network_class, asset, amount, source,"
            " destination, template_key, idempotency_key, request_fingerprint, created_by,"
            " created_at)"
            " VALUES (%(network_class)s, 'USDC', '5.00', 'binance', '0xabc', %(template_key)s,"
            " 'orphan-' || %(network_class)s, 'fp', 'alice', now() - interval '1 hour')"
            " RETURNING id"
        ),
        "out_of_step": (
            "UPDATE capital_transfer_requests SET status = 'needs_attention' WHERE id = %(id)s"
        ),
        "movement_class": "SELECT network_class FROM movement_requests WHERE id = %(id)s",
    }.items()
}

ONE_ACTION = [node("withdraw", "cex_withdrawal")]


@pytest.fixture
def settings(dsn: str) -> Settings:
    return Settings.from_env({}).replace(
        database_url=dsn, capital_transfer_routes="binance>0x*=treasury.cex_to_chain"
    )


@pytest.fixture
async def svc(db: Database, settings: Settings) -> AsyncIterator[ServiceContext]:
    providers = build_registry(settings, db)
    try:
        yield ServiceContext(db, settings, providers)
    finally:
        await providers.aclose()


async def create(svc: ServiceContext, **changes: Any) -> tuple[dict[str, Any], bool]:
    args: dict[str, Any] = {
        "asset": "USDC",
        "amount": "250.00",
        "source": "binance",
        "destination": "0xabc",
        "template_key": None,
        "note": None,
        "idempotency_key": "ct-1",
        "actor": "alice",
    }
    args.update(changes)
    return await create_capital_transfer(svc.db, svc.settings, **args)


async def test_a_transfer_picks_its_route_creates_its_movement_and_follows_it(
    svc: ServiceContext,
) -> None:
    await template(svc, "treasury.cex_to_chain", ONE_ACTION, [])
    transfer, created = await create(svc)
    assert created and transfer["status"] == "movement_created"
    assert transfer["template_key"] == "treasury.cex_to_chain"  # from MG_CAPITAL_TRANSFER_ROUTES
    assert transfer["request_state"] == "PENDING_APPROVAL"
    again, created = await create(svc)
    assert not created and again["id"] == transfer["id"]
    with pytest.raises(IdempotencyConflict):
        await create(svc, amount="251.00")
    # a key belongs to its principal: bob's "ct-1" is another transfer
    bobs, created = await create(svc, actor="bob")
    assert created and bobs["id"] != transfer["id"]

    await approve_movement(svc.db, transfer["request_id"], actor="bob")  # four-eyes holds
    assert (await drive(svc, transfer["request_id"]))["request_state"] == "COMPLETED"
    done = await get_capital_transfer(svc.db, transfer["id"])
    assert (done["status"], done["request_state"]) == ("completed", "COMPLETED")


async def test_bad_transfers_are_refused_and_leave_nothing(svc: ServiceContext) -> None:
    with pytest.raises(InvalidInput) as no_route:
        await create(svc, source="kraken")
    assert no_route.value.detail["field"] == "template_key"
    with pytest.raises(NotFound):
        await create(svc, template_key="no.such.template")
    with pytest.raises(InvalidInput):
        await create(svc, amount="-1")
    assert await svc.db.fetch(Q["transfer_movements"]) == []


async def test_two_runtimes_following_up_at_once_create_one_movement_each(
    dsn: str, svc: ServiceContext
) -> None:
    await template(svc, "treasury.cex_to_chain", ONE_ACTION, [])
    orphans = await svc.db.fetch(
        Q["insert_orphan"], {"template_key": "treasury.cex_to_chain", "n": 30}
    )
    # (the orphans are an hour old: a long stale threshold keeps this about advancing)
    settings = svc.settings.replace(
        capital_transfer_followup_batch_size=4, capital_transfer_stale_seconds=86_400.0
    )
    advanced = {0: 0, 1: 0}
    async with Database(dsn, max_size=4) as db_a, Database(dsn, max_size=4) as db_b:
        contexts = [ServiceContext(d, settings, svc.providers) for d in (db_a, db_b)]

        async def follow(i: int) -> None:
            while n := await follow_up_pending_capital_transfers(contexts[i]):
                advanced[i] += n

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow, 0)
            nursery.start_soon(follow, 1)
    assert advanced[0] and advanced[1], "both runtimes took part"
    assert advanced[0] + advanced[1] == len(orphans)  # each transfer advanced exactly once
    assert await svc.db.fetchval(Q["movement_count"]) == len(orphans)
    for row in await svc.db.fetch(Q["transfer_movements"]):
        assert row["status"] == "movement_created"
        assert row["idempotency_key"] == movement_idempotency_key(row["id"])
        assert row["created_by"] == "alice"  # the requester; someone else must approve


async def test_a_stale_transfer_pages_once_and_approval_resolves_it(svc: ServiceContext) -> None:
    await template(svc, "treasury.cex_to_chain", ONE_ACTION, [])
    transfer, _ = await create(svc)
    assert await follow_up_pending_capital_transfers(svc) == 0  # young: nothing to do
    await svc.db.execute(Q["backdate"], {"id": transfer["id"]})
    assert await follow_up_pending_capital_transfers(svc) == 1
    assert await follow_up_pending_capital_transfers(svc) == 0  # one page per stale transfer
    [n] = await svc.db.fetch(Q["notifications"])
    assert (n["kind"], n["severity"]) == ("capital_transfer_stale", "warning")
    assert n["links"]["capital_transfer_id"] == str(transfer["id"])
    assert n["request_id"] == transfer["request_id"]
    await approve_movement(svc.db, transfer["request_id"], actor="bob")
    [n] = await svc.db.fetch(Q["notifications"])
    assert n["resolved_at"] is not None


async def test_a_transfer_whose_movement_cannot_be_created_needs_attention(
    svc: ServiceContext,
) -> None:
    [orphan] = await svc.db.fetch(Q["insert_orphan"], {"template_key": "retired.route", "n": 1})
    assert await follow_up_pending_capital_transfers(svc) == 1
    transfer = await get_capital_transfer(svc.db, orphan["id"])
    assert transfer["status"] == "needs_attention" and transfer["request_id"] is None
    assert "retired.route" in transfer["last_error"]
    [n] = await svc.db.fetch(Q["notifications"])
    assert n["kind"] == "capital_transfer_attention"
    assert await follow_up_pending_capital_transfers(svc) == 0


async def test_followup_claims_only_its_class_and_creates_in_the_transfers_class(
    svc: ServiceContext,
) -> None:
    """Issue 25: a `mainnet` transfer is followed up by `mainnet` runtimes only,
    in each of the pass's three claims (advance, reconcile, stale page), and its
    movement is a `mainnet` movement. On main a `default` runtime advanced it
    and created a `default` movement."""
    await template(svc, "treasury.cex_to_chain", ONE_ACTION, [])
    [orphan] = await svc.db.fetch(
        Q["insert_orphan_in"],
        {"template_key": "treasury.cex_to_chain", "network_class": "mainnet"},
    )
    quiet = svc.settings.replace(capital_transfer_stale_seconds=86_400.0)
    default = ServiceContext(svc.db, quiet, svc.providers)
    mainnet = ServiceContext(svc.db, quiet.replace(network_class="mainnet"), svc.providers)

    assert await follow_up_pending_capital_transfers(default) == 0
    transfer = await get_capital_transfer(svc.db, orphan["id"])
    assert (transfer["status"], transfer["request_id"]) == ("pending", None)
    assert await follow_up_pending_capital_transfers(mainnet) == 1
    transfer = await get_capital_transfer(svc.db, orphan["id"])
    assert transfer["status"] == "movement_created"
    assert await svc.db.fetchval(Q["movement_class"], {"id": transfer["request_id"]}) == "mainnet"

    await svc.db.execute(Q["out_of_step"], {"id": orphan["id"]})
    assert await follow_up_pending_capital_transfers(default) == 0
    assert (await get_capital_transfer(svc.db, orphan["id"]))["status"] == "needs_attention"
    assert await follow_up_pending_capital_transfers(mainnet) == 1  # reconciled
    assert (await get_capital_transfer(svc.db, orphan["id"]))["status"] == "movement_created"

    paging = svc.settings.replace(capital_transfer_stale_seconds=60.0)  # it is an hour old
    assert (
        await follow_up_pending_capital_transfers(ServiceContext(svc.db, paging, svc.providers))
        == 0
    )
    assert await svc.db.fetch(Q["notifications"]) == []
    assert (
        await follow_up_pending_capital_transfers(
            ServiceContext(svc.db, paging.replace(network_class="mainnet"), svc.providers)
        )
        == 1
    )
    [page] = await svc.db.fetch(Q["notifications"])
    assert page["kind"] == "capital_transfer_stale"
