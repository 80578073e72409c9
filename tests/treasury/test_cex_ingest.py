"""cex_transfer_ingest: unique per venue, status only forward, matching, waking the observer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
import trio

from qtg.db import Database, ListenHub, Query
from qtg.providers.cex import CexTransfer
from qtg.providers.registry import ProviderRegistry, build_registry
from qtg.services.cex_transfer_ingest import ingest_cex_transfers
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.movements import approve_movement, create_movement, get_movement
from qtg.services.observe import observe_active_nodes
from qtg.services.templates import create_template

from .helpers import race, treasury_settings

TRANSFERS = Query(
    "test/transfers",
    "SELECT venue, external_id, kind, status, asset, amount, txid, matched_node_id, updated_at"
    " FROM cex_transfers ORDER BY venue, external_id",
)
CURSORS = Query("test/cursors", "SELECT * FROM cex_ingest_cursors ORDER BY venue")
NODE = Query(
    "test/node",
    "SELECT * FROM movement_request_nodes WHERE request_id = %(rid)s AND node_key = %(key)s",
)
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class ScriptedClient:
    """A CEX client that reports whatever the test last told it to."""

    def __init__(self, venue: str) -> None:
        self.venue = venue
        self.report: list[Any] = []
        self.asked: list[datetime] = []

    async def fetch_transfers(self, since: datetime) -> list[Any]:
        self.asked.append(since)
        if isinstance(self.report, Exception):
            raise self.report
        return list(self.report)


def transfer(external_id: str, status: str, **changes: Any) -> CexTransfer:
    fields: dict[str, Any] = {
        "external_id": external_id,
        "kind": "withdrawal",
        "status": status,
        "asset": "USDC",
        "amount": Decimal("125.500000"),
        "occurred_at": T0,
    }
    return CexTransfer(**{**fields, **changes})


def scripted(db: Database, dsn: str, *venues: str, **changes: Any):
    registry = ProviderRegistry()
    clients = {}
    for venue in venues:
        clients[venue] = ScriptedClient(venue)
        registry.add_cex_client(clients[venue])
    settings = treasury_settings(dsn, cex_transfer_ingest_venues_csv=",".join(venues), **changes)
    return ServiceContext(db=db, settings=settings, providers=registry), clients


async def test_a_repeat_and_a_backward_status_change_nothing(db: Database, dsn: str) -> None:
    ctx, clients = scripted(db, dsn, "okx")
    okx = clients["okx"]
    okx.report = [transfer("w1", "pending"), transfer("w2", "ok", txid="0xt2")]
    assert await ingest_cex_transfers(ctx) == 2
    first = await db.fetch(TRANSFERS)
    # the same report again: nothing changes, not even updated_at
    assert await ingest_cex_transfers(ctx) == 0
    assert await db.fetch(TRANSFERS) == first
    # a status going backwards (ok -> pending) and sideways (ok -> failed): nothing changes
    okx.report = [transfer("w2", "pending", txid="0xt2"), transfer("w2", "failed")]
    assert await ingest_cex_transfers(ctx) == 0
    assert await db.fetch(TRANSFERS) == first
    # forward (pending -> ok) is the one move allowed, and the txid learnt with it is kept
    okx.report = [transfer("w1", "ok", txid="0xt1")]
    assert await ingest_cex_transfers(ctx) == 1
    rows = {r["external_id"]: r for r in await db.fetch(TRANSFERS)}
    assert (rows["w1"]["status"], rows["w1"]["txid"]) == ("ok", "0xt1")
    assert rows["w2"] == next(r for r in first if r["external_id"] == "w2")
    # and the database refuses a final status changing even to a hand-written UPDATE
    with pytest.raises(psycopg.Error, match="is final"):
        await db.execute(Query("test/back", "UPDATE cex_transfers SET status = 'pending'"))


async def test_cursor_per_venue_holds_at_the_oldest_pending(db: Database, dsn: str) -> None:
    ctx, clients = scripted(db, dsn, "okx", "kraken", cex_transfer_ingest_overlap_seconds=60.0)
    okx, kraken = clients["okx"], clients["kraken"]
    okx.report = [
        transfer("a", "pending", occurred_at=T0),
        transfer("b", "ok", occurred_at=T0 + timedelta(hours=2)),
    ]
    kraken.report = RuntimeError("exchange down\nsecond line")
    assert await ingest_cex_transfers(ctx) == 2
    cursors = {c["venue"]: c for c in await db.fetch(CURSORS)}
    assert (
        cursors["okx"]["since"] == T0 + timedelta(hours=2) and cursors["okx"]["last_error"] is None
    )
    assert cursors["kraken"]["since"] is None
    assert cursors["kraken"]["last_error"] == "RuntimeError: exchange down"
    # first pull looked back MG_CEX_TRANSFER_INGEST_LOOKBACK_SECONDS (+ overlap)
    assert datetime.now(UTC) - okx.asked[0] > timedelta(days=1)
    # next pull starts at the oldest pending transfer (a), less the overlap
    await ingest_cex_transfers(ctx)
    assert okx.asked[1] == T0 - timedelta(seconds=60)
    okx.report = [transfer("a", "ok", occurred_at=T0)]
    await ingest_cex_transfers(ctx)
    await ingest_cex_transfers(ctx)
    assert okx.asked[3] == T0 + timedelta(hours=2) - timedelta(seconds=60)


async def test_a_venue_without_a_client_is_recorded_not_fatal(db: Database, dsn: str) -> None:
    ctx, clients = scripted(db, dsn, "okx")
    ctx = ServiceContext(
        db=db,
        settings=ctx.settings.replace(cex_transfer_ingest_venues_csv="okx, nowhere"),
        providers=ctx.providers,
    )
    clients["okx"].report = [transfer("w1", "ok")]
    assert await ingest_cex_transfers(ctx) == 1
    cursors = {c["venue"]: c for c in await db.fetch(CURSORS)}
    assert "no CEX client is registered for venue 'nowhere'" in cursors["nowhere"]["last_error"]


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (transfer("x", "ok", amount=1.5), "not 1.5"),
        (transfer("x", "ok", occurred_at=datetime(2026, 1, 1)), "time zone"),
        (transfer("x", "weird"), "status 'weird'"),
        ({"external_id": "x"}, "not a CexTransfer"),
    ],
)
async def test_junk_from_a_client_stores_nothing(
    db: Database, dsn: str, bad: Any, error: str
) -> None:
    ctx, clients = scripted(db, dsn, "okx")
    clients["okx"].report = [transfer("fine", "ok"), bad]
    assert await ingest_cex_transfers(ctx) == 0
    assert await db.fetch(TRANSFERS) == []
    [cursor] = await db.fetch(CURSORS)
    assert error in cursor["last_error"]


WITHDRAW_GRAPH = {
    "nodes": [
        {
            "key": "withdraw",
            "kind": "action",
            "action_type": "cex_withdrawal",
            # the executor's own status check lags: without a wake-up the node would
            # next be observed ten minutes from now
            "config": {
                "venue": "sandbox",
                "sandbox": {"observations_to_complete": 2, "retry_after_seconds": 3600},
            },
        }
    ],
    "edges": [],
}


async def test_an_ingested_withdrawal_wakes_its_node_and_it_completes(
    db: Database, dsn: str, hub: ListenHub
) -> None:
    settings = treasury_settings(dsn, cex_transfer_ingest_venues_csv="sandbox")
    registry = build_registry(settings, db)
    ctx = ServiceContext(db=db, settings=settings, providers=registry)
    try:
        await create_template(
            db, template_key="t.withdraw", name="w", graph=WITHDRAW_GRAPH, actor="admin"
        )
        created, _ = await create_movement(
            db,
            settings,
            template_key="t.withdraw",
            intent={"asset": "USDC", "amount": "250.00", "destination": "0xabc"},
            idempotency_key="ingest-1",
            actor="alice",
        )
        rid = created["id"]
        await approve_movement(db, rid, actor="bob")
        assert await dispatch_ready_nodes(ctx) == 1
        # first status check: pending, next one in 600 s (the observer clamps the hint)
        await observe_active_nodes(ctx)
        node = await db.fetchrow(NODE, {"rid": rid, "key": "withdraw"})
        assert node["node_state"] in ("SUBMITTED", "OBSERVING")
        assert node["next_observe_at"] > datetime.now(UTC) + timedelta(minutes=9)
        assert await observe_active_nodes(ctx) == 0  # nothing due

        woken = hub.subscribe("qtg_observe")
        woken.clear()
        assert await ingest_cex_transfers(ctx) == 1
        [row] = await db.fetch(TRANSFERS)
        assert row["external_id"] == node["provider_refs"]["withdrawal_id"]
        assert (row["status"], row["amount"], row["matched_node_id"]) == (
            "ok",
            Decimal("250.00"),
            node["id"],
        )
        with trio.fail_after(5):
            await woken.wait()  # the observer's channel fired
        assert await observe_active_nodes(ctx) == 1  # due now, not in ten minutes
        done = await get_movement(db, rid)
        assert done["request_state"] == "COMPLETED"
        # ingesting again changes nothing and wakes nobody
        woken.clear()
        assert await ingest_cex_transfers(ctx) == 0
    finally:
        await registry.aclose()


async def test_two_runtimes_ingesting_one_venue_store_each_transfer_once(dsn: str) -> None:
    """Both pull the same report at the same instant: the unique key and the forward-only
    upsert let each transfer be stored (and each status move counted) exactly once."""
    async with Database(dsn) as db_a, Database(dsn) as db_b:
        ctx_a, clients_a = scripted(db_a, dsn, "okx")
        ctx_b, clients_b = scripted(db_b, dsn, "okx")
        report = [transfer(f"w{i}", "pending") for i in range(50)]
        clients_a["okx"].report = clients_b["okx"].report = report
        assert sum(await race(ingest_cex_transfers, ctx_a, ctx_b)) == 50
        final = [transfer(f"w{i}", "ok") for i in range(50)]
        clients_a["okx"].report = clients_b["okx"].report = final
        # each pending -> ok move happened once
        assert sum(await race(ingest_cex_transfers, ctx_a, ctx_b)) == 50
        rows = await db_a.fetch(TRANSFERS)
        assert len(rows) == 50 and {r["status"] for r in rows} == {"ok"}
