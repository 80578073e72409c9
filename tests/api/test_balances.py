"""GET /v3/balances and /v3/balances/history over real HTTP (issue 13)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
from treasury.helpers import DEPOSITOR_A, gateway_answer
from treasury.venue_server import HANG, VenueServer

from qtg.db import Query
from qtg.services.balance_history_rollup import roll_up_balance_history
from qtg.services.balance_snapshot import take_balance_snapshots
from qtg.services.context import ServiceContext

from .conftest import Api

INSERT = Query(
    "test/insert_snapshot",
    "INSERT INTO balance_snapshots (venue_key, account, asset, amount, observed_at, source,"
    " fetcher_key) VALUES (%(venue)s, %(account)s, 'USDC', %(amount)s,"
    " now() - make_interval(secs => %(age)s), 'worker', 'test')",
)


class GatewayBehaviour:
    """What the local Gateway answers; a test flips it."""

    hang = False


@pytest.fixture
async def gateway_server(nursery: Any) -> VenueServer:
    server = VenueServer()

    def answer(request: Any) -> Any:
        if GatewayBehaviour.hang:
            return HANG
        return 200, gateway_answer({DEPOSITOR_A: {0: "10.5", 3: "0.25"}})

    server.route("POST", "/v1/balances", answer)
    await nursery.start(server.serve)
    GatewayBehaviour.hang = False
    return server


@pytest.fixture
def stream_overrides(gateway_server: VenueServer) -> dict[str, Any]:
    return {
        "providers": "sandbox,gateway",
        "gateway_api_url": gateway_server.url,
        "gateway_depositors_csv": DEPOSITOR_A,
        "balance_fresh_timeout_seconds": 1.0,
        "balance_fresh_min_interval_seconds": 30.0,
    }


def ctx_of(api: Api) -> ServiceContext:
    return api.server.app.state.ctx


def key(item: dict[str, Any]) -> tuple[str, str, str]:
    return item["venue_key"], item["account"], item["asset"]


async def test_latest_balances_with_stale_judged_at_read_time(api: Api) -> None:
    r = await api["vic"].get("/v3/balances")
    assert r.status_code == 200, r.text
    assert r.json()["items"] == [] and r.json()["stale_threshold_seconds"] == 120.0
    # two rows of one series: only the later one is "latest"
    await api.db.execute(INSERT, {"venue": "v1", "account": "a", "amount": "1.10", "age": 500})
    await api.db.execute(INSERT, {"venue": "v1", "account": "a", "amount": "2.20", "age": 119})
    await api.db.execute(INSERT, {"venue": "v2", "account": "b", "amount": "3.30", "age": 121})
    body = (await api["vic"].get("/v3/balances")).json()
    items = {key(i): i for i in body["items"]}
    assert set(items) == {("v1", "a", "USDC"), ("v2", "b", "USDC")}
    assert items[("v1", "a", "USDC")]["amount"] == "2.20"  # exact, as stored
    assert items[("v1", "a", "USDC")]["stale"] is False
    assert items[("v2", "b", "USDC")]["stale"] is True
    assert items[("v2", "b", "USDC")]["age_seconds"] >= 121
    # filters
    only = (await api["vic"].get("/v3/balances", params={"venue_key": "v2"})).json()["items"]
    assert [key(i) for i in only] == [("v2", "b", "USDC")]
    none = await api["vic"].get("/v3/balances", params={"account": "a", "asset": "ETH"})
    assert none.json()["items"] == []


async def test_worker_rows_are_served_with_each_fetchers_last_attempt(api: Api) -> None:
    assert await take_balance_snapshots(ctx_of(api)) == 4
    body = (await api["vic"].get("/v3/balances")).json()
    assert [(i["venue_key"], i["account"], i["asset"], i["amount"]) for i in body["items"]] == [
        ("gateway", DEPOSITOR_A, "USDC", "10.75"),
        ("sandbox", "hot", "USDC", "50000.000000"),
        ("sandbox", "main", "ETH", "84.250000000000000000"),
        ("sandbox", "main", "USDC", "1250000.000000"),
    ]
    assert all(not i["stale"] and i["source"] == "worker" for i in body["items"])
    assert {f["fetcher_key"]: f["outcome"] for f in body["fetchers"]} == {
        "gateway": "ok",
        "sandbox": "ok",
    }
    assert body["fresh"] is None


async def test_fresh_is_for_operators_bounded_and_rate_limited(api: Api) -> None:
    r = await api["vic"].get("/v3/balances", params={"fresh": "true"})
    assert r.status_code == 403
    assert r.json()["error"]["detail"]["field"] == "fresh"
    assert (await api["vic"].get("/v3/balances")).json()["items"] == []  # nothing fetched

    GatewayBehaviour.hang = True
    started = trio.current_time()
    r = await api["alice"].get("/v3/balances", params={"fresh": "true"})
    assert r.status_code == 200, r.text
    assert trio.current_time() - started < 5  # bounded by MG_BALANCE_FRESH_TIMEOUT_SECONDS
    body = r.json()
    assert {o["fetcher_key"]: o["outcome"] for o in body["fresh"]} == {
        "gateway": "timeout",
        "sandbox": "ok",
    }
    assert {i["venue_key"] for i in body["items"]} == {"sandbox"}
    assert {i["source"] for i in body["items"]} == {"fresh"}

    again = await api["admin"].get("/v3/balances", params={"fresh": "true"})
    assert again.status_code == 429
    error = again.json()["error"]
    assert error["code"] == "RATE_LIMITED"
    assert 0 < error["detail"]["retry_after_seconds"] <= 30


async def test_fresh_for_one_venue_runs_only_its_fetcher(api: Api) -> None:
    r = await api["alice"].get("/v3/balances", params={"fresh": "true", "venue_key": "gateway"})
    assert r.status_code == 200, r.text
    assert [o["fetcher_key"] for o in r.json()["fresh"]] == ["gateway"]
    assert [i["amount"] for i in r.json()["items"]] == ["10.75"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"fresh": "maybe"}, "fresh"),
        ({"venue_key": "has space"}, "venue_key"),
        ({"colour": "red"}, "colour"),
        ({"fresh": "true", "venue_key": "nowhere"}, "venue_key"),
    ],
)
async def test_bad_balance_queries_are_422_naming_the_field(
    api: Api, params: dict[str, str], field: str
) -> None:
    r = await api["alice"].get("/v3/balances", params=params)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["detail"]["field"] == field


async def test_history_pages_and_filters(api: Api) -> None:
    # three closed hours of two series, rolled up by the real pass
    insert_at = Query(
        "test/insert_at",
        "INSERT INTO balance_snapshots (venue_key, account, asset, amount, observed_at, source,"
        " fetcher_key) VALUES (%(venue)s, 'a', 'USDC', %(amount)s, %(at)s, 'worker', 'test')",
    )
    base = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=4)
    for hour in range(3):
        for venue in ("v1", "v2"):
            for minute, amount in ((5, "1.0"), (35, "3.0"), (50, "2.0")):
                at = base + timedelta(hours=hour, minutes=minute)
                await api.db.execute(insert_at, {"venue": venue, "amount": amount, "at": at})
    while await roll_up_balance_history(ctx_of(api)):
        pass
    seen: list[tuple[str, str]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 4}
        if cursor:
            params["cursor"] = cursor
        r = await api["vic"].get("/v3/balances/history", params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        seen += [(i["bucket_start"], i["venue_key"]) for i in page["items"]]
        for item in page["items"]:
            assert (item["first_amount"], item["last_amount"]) == ("1.0", "2.0")
            assert (item["min_amount"], item["max_amount"], item["sample_count"]) == (
                "1.0",
                "3.0",
                3,
            )
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == 6 and len(set(seen)) == 6
    assert seen == sorted(seen, reverse=True)
    one = await api["vic"].get(
        "/v3/balances/history",
        params={"venue_key": "v1", "since": (base + timedelta(hours=1)).isoformat()},
    )
    starts = [datetime.fromisoformat(i["bucket_start"]) for i in one.json()["items"]]
    assert starts == [base + timedelta(hours=2), base + timedelta(hours=1)]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"bucket": "week"}, "bucket"),
        ({"since": "2026-01-01T00:00:00"}, "since"),  # no time zone
        ({"cursor": "bm90LWpzb24"}, "cursor"),  # "not-json"
        ({"limit": "0"}, "limit"),
    ],
)
async def test_bad_history_queries_are_422(api: Api, params: dict[str, str], field: str) -> None:
    r = await api["vic"].get("/v3/balances/history", params=params)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["detail"]["field"] == field
