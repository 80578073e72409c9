"""The ccxt-backed CEX client against a local server serving OKX's documented answers.

OKX's funding API (docs-v5: "Get deposit history", "Get withdrawal history"):
GET /api/v5/asset/deposit-history and /api/v5/asset/withdrawal-history, each
`{"code": "0", "msg": "", "data": [...]}` newest first, filtered by `before`
(newer than ts), `after` (older than ts) and `limit` (≤ 100), signed with the
OK-ACCESS-* headers. ccxt builds and parses them; nothing leaves loopback
(the exchange's REST base URL is the local server's).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import trio

from qtg.config import ConfigError
from qtg.db import Database, ListenHub, Query
from qtg.providers.exchanges import load_credentials, make_exchange
from qtg.providers.registry import build_registry
from qtg.services.cex_transfer_ingest import ingest_cex_transfers
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.movements import approve_movement, create_movement, get_movement
from qtg.services.observe import observe_active_nodes
from qtg.services.templates import create_template

from .helpers import treasury_settings
from .venue_server import Request, VenueServer

TRANSFERS = Query(
    "test/okx_transfers",
    "SELECT external_id, kind, status, asset, amount, fee, txid, network, occurred_at,"
    " matched_node_id FROM cex_transfers ORDER BY kind, external_id",
)
NODE = Query(
    "test/okx_node",
    "SELECT * FROM movement_request_nodes WHERE request_id = %(rid)s AND node_key = %(key)s",
)
NOW_MS = int(datetime.now(UTC).timestamp() * 1000)


class Okx:
    """OKX's funding history, served the way its docs describe."""

    def __init__(self) -> None:
        self.deposits: list[dict[str, Any]] = []
        self.withdrawals: list[dict[str, Any]] = []

    def handler(self, rows_of: str) -> Any:
        def answer(request: Request) -> tuple[int, Any]:
            if request.headers.get("ok-access-key") != "okx-key":
                return 401, {"code": "50113", "msg": "Invalid Sign", "data": []}
            rows = sorted(getattr(self, rows_of), key=lambda r: -int(r["ts"]))
            if "before" in request.query:
                rows = [r for r in rows if int(r["ts"]) > int(request.query["before"])]
            if "after" in request.query:
                rows = [r for r in rows if int(r["ts"]) < int(request.query["after"])]
            return 200, {
                "code": "0",
                "msg": "",
                "data": rows[: int(request.query.get("limit", 100))],
            }

        return answer


def withdrawal(wd_id: str, state: str, ts: int, **extra: Any) -> dict[str, Any]:
    return {
        "chain": "USDC-ERC20", "fee": "1.5", "feeCcy": "USDC", "ccy": "USDC",
        "amt": "250.000001", "txId": f"0x{wd_id}", "from": "", "to": "0x" + "d4" * 20,
        "state": state, "ts": str(ts), "wdId": wd_id, "clientId": "", **extra,
    }  # fmt: skip


def deposit(dep_id: str, state: str, ts: int, **extra: Any) -> dict[str, Any]:
    return {
        "actualDepBlkConfirm": "17", "amt": "0.50", "ccy": "USDC", "chain": "USDC-ERC20",
        "depId": dep_id, "from": "", "state": state, "to": "0x" + "e5" * 20,
        "ts": str(ts), "txId": f"0xdep{dep_id}", **extra,
    }  # fmt: skip


@pytest.fixture
async def okx(nursery: Any) -> tuple[Okx, VenueServer]:
    venue = Okx()
    server = VenueServer()
    server.route("GET", "/api/v5/asset/deposit-history", venue.handler("deposits"))
    server.route("GET", "/api/v5/asset/withdrawal-history", venue.handler("withdrawals"))
    await nursery.start(server.serve)
    return venue, server


def okx_settings(dsn: str, tmp_path: Path, server: VenueServer, **changes: Any):
    path = tmp_path / "ccxt.json"
    path.write_text(
        json.dumps(
            {"okx": {"apiKey": "okx-key", "secret": "okx-secret", "password": "okx-pass",
                     "api_url": server.url}}
        )
    )  # fmt: skip
    return treasury_settings(
        dsn,
        providers=changes.pop("providers", "ccxt"),
        ccxt_venues_csv="okx",
        ccxt_credentials_file=str(path),
        cex_transfer_ingest_venues_csv="okx",
        **changes,
    )


async def test_okx_history_lands_exactly_and_pages(
    db: Database, dsn: str, tmp_path: Path, okx: tuple[Okx, VenueServer]
) -> None:
    venue, server = okx
    venue.withdrawals = [withdrawal("w1", "2", NOW_MS - 60_000), withdrawal("w2", "0", NOW_MS)]
    venue.withdrawals += [withdrawal(f"bulk{i}", "-1", NOW_MS - 120_000 - i) for i in range(230)]
    venue.deposits = [deposit("d1", "2", NOW_MS - 30_000)]
    settings = okx_settings(dsn, tmp_path, server)
    registry = build_registry(settings, db)
    ctx = ServiceContext(db=db, settings=settings, providers=registry)
    try:
        assert await ingest_cex_transfers(ctx) == 233
        rows = {r["external_id"]: r for r in await db.fetch(TRANSFERS)}
        assert len(rows) == 233  # three pages of withdrawals, none lost
        w1, w2, d1 = rows["w1"], rows["w2"], rows["d1"]
        assert (w1["kind"], w1["status"], w1["amount"], w1["fee"], w1["txid"]) == (
            "withdrawal", "ok", Decimal("250.000001"), Decimal("1.5"), "0xw1",
        )  # fmt: skip
        assert w1["occurred_at"] == datetime.fromtimestamp((NOW_MS - 60_000) / 1000, UTC)
        assert w2["status"] == "pending" and rows["bulk7"]["status"] == "failed"
        assert (d1["kind"], d1["status"], d1["amount"]) == ("deposit", "ok", Decimal("0.50"))
        # every request went to the local server, signed, asking since the cursor
        assert {r.path for r in server.requests} == {
            "/api/v5/asset/deposit-history",
            "/api/v5/asset/withdrawal-history",
        }
        assert all(r.headers["ok-access-passphrase"] == "okx-pass" for r in server.requests)
        assert len(server.on("/api/v5/asset/withdrawal-history")) == 3
        # w2 completes at the exchange: the next pass moves it forward, nothing else
        venue.withdrawals[1] = withdrawal("w2", "2", NOW_MS)
        assert await ingest_cex_transfers(ctx) == 1
        assert {r["external_id"]: r["status"] for r in await db.fetch(TRANSFERS)}["w2"] == "ok"
    finally:
        await registry.aclose()


async def test_okx_refusing_the_signature_is_recorded(
    db: Database, dsn: str, tmp_path: Path, okx: tuple[Okx, VenueServer]
) -> None:
    _, server = okx
    settings = okx_settings(dsn, tmp_path, server)
    path = trio.Path(settings.ccxt_credentials_file or "")
    await path.write_text((await path.read_text()).replace("okx-key", "wrong-key"))
    registry = build_registry(settings, db)
    try:
        ctx = ServiceContext(db=db, settings=settings, providers=registry)
        assert await ingest_cex_transfers(ctx) == 0
        error = await db.fetchval(
            Query("test/okx_err", "SELECT last_error FROM cex_ingest_cursors")
        )
        assert "AuthenticationError" in error or "Invalid Sign" in error
        assert "okx-secret" not in error and "wrong-key" not in error
    finally:
        await registry.aclose()


def test_ccxt_configuration_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="MG_CCXT_CREDENTIALS_FILE: the ccxt provider needs"):
        load_credentials(None, ["okx"])
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"okx": {"apiKey": "k"}}))
    with pytest.raises(ConfigError, match="no apiKey and secret for 'okx'"):
        load_credentials(str(path), ["okx"])
    path.write_text(json.dumps({"okx": {"apiKey": "k", "secret": "s", "sekret": "x"}}))
    with pytest.raises(ConfigError, match="unknown keys sekret"):
        load_credentials(str(path), ["okx"])
    with pytest.raises(ConfigError, match="'nope' is not a ccxt exchange id"):
        make_exchange("nope", {"apiKey": "k", "secret": "s"}, 1.0)


GRAPH = {
    "nodes": [
        {"key": "withdraw", "kind": "action", "action_type": "cex_withdrawal",
         # the ccxt provider serves cex_withdrawal too (issue 28): the plan names its executor
         "executor_key": "sandbox",
         "config": {"venue": "okx", "sandbox": {"observations_to_complete": 2,
                                                 "retry_after_seconds": 600}}},
        {"key": "arrive", "kind": "observe", "action_type": "cex_deposit_status",
         "config": {"venue": "okx", "sandbox": {"observations_to_complete": 2,
                                                 "retry_after_seconds": 600}}},
    ],
    "edges": [["withdraw", "arrive"]],
}  # fmt: skip


async def test_exchange_reports_complete_the_movement_at_once(
    db: Database, dsn: str, tmp_path: Path, okx: tuple[Okx, VenueServer], hub: ListenHub
) -> None:
    """The withdrawal reported done completes its node; the deposit of its txid, the next."""
    venue, server = okx
    settings = okx_settings(dsn, tmp_path, server, providers="sandbox,ccxt")
    registry = build_registry(settings, db)
    ctx = ServiceContext(db=db, settings=settings, providers=registry)
    woken = hub.subscribe("qtg_observe")
    try:
        await create_template(db, template_key="t.okx", name="okx", graph=GRAPH, actor="admin")
        created, _ = await create_movement(
            db, settings, template_key="t.okx", idempotency_key="okx-1", actor="alice",
            intent={"asset": "USDC", "amount": "250.000001", "destination": "0xabc"},
        )  # fmt: skip
        rid = created["id"]
        await approve_movement(db, rid, actor="bob")
        assert await dispatch_ready_nodes(ctx) == 1
        await observe_active_nodes(ctx)
        node = await db.fetchrow(NODE, {"rid": rid, "key": "withdraw"})
        assert node["next_observe_at"] > datetime.now(UTC) + timedelta(minutes=9)
        wd_id, txid = node["provider_refs"]["withdrawal_id"], node["provider_refs"]["txid"]

        venue.withdrawals = [withdrawal(wd_id, "2", NOW_MS, txId=txid)]
        woken.clear()
        assert await ingest_cex_transfers(ctx) == 1
        with trio.fail_after(5):
            await woken.wait()
        assert await observe_active_nodes(ctx) == 1
        assert (await db.fetchrow(NODE, {"rid": rid, "key": "withdraw"}))["node_state"] == (
            "COMPLETED"
        )
        # the destination observe node starts, then waits ten minutes between checks
        assert await dispatch_ready_nodes(ctx) == 1
        await observe_active_nodes(ctx)
        arrive = await db.fetchrow(NODE, {"rid": rid, "key": "arrive"})
        assert arrive["node_state"] == "OBSERVING"
        assert await observe_active_nodes(ctx) == 0

        venue.deposits = [deposit("d9", "2", NOW_MS, txId=txid, amt="250.000001")]
        woken.clear()
        assert await ingest_cex_transfers(ctx) == 1
        rows = {r["kind"]: r for r in await db.fetch(TRANSFERS)}
        assert rows["withdrawal"]["matched_node_id"] == node["id"]
        assert rows["deposit"]["matched_node_id"] == arrive["id"]
        with trio.fail_after(5):
            await woken.wait()
        assert await observe_active_nodes(ctx) == 1
        assert (await get_movement(db, rid))["request_state"] == "COMPLETED"
    finally:
        await registry.aclose()
