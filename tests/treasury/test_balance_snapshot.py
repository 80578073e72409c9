"""balance_snapshot (reference §7): fetchers, Gateway, failures recorded, leases, retention."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
import trio

from qtg.config import ConfigError
from qtg.db import Database, Query
from qtg.providers.balances import Balance
from qtg.providers.gateway import GatewayError, parse_depositors, unified_balances
from qtg.providers.registry import ProviderRegistry, RegistrationError, build_registry
from qtg.services.balance_snapshot import apply_retention, take_balance_snapshots
from qtg.services.context import ServiceContext

from .helpers import (
    ATTEMPTS,
    DEPOSITOR_A,
    DEPOSITOR_B,
    SNAPSHOTS,
    gateway_answer,
    race,
    service_context,
    treasury_settings,
)
from .venue_server import HANG, VenueServer

SANDBOX_ROWS = [
    ("sandbox", "hot", "USDC", Decimal("50000.000000")),
    ("sandbox", "main", "ETH", Decimal("84.250000000000000000")),
    ("sandbox", "main", "USDC", Decimal("1250000.000000")),
]


async def gateway(nursery: Any, handler: Any) -> VenueServer:
    server = VenueServer()
    server.route("POST", "/v1/balances", handler)
    await nursery.start(server.serve)
    return server


def with_gateway(dsn: str, server: VenueServer, **changes: Any):
    return treasury_settings(
        dsn,
        providers="sandbox,gateway",
        gateway_api_url=server.url,
        gateway_depositors_csv=f"{DEPOSITOR_A.upper().replace('0X', '0x')}, {DEPOSITOR_B}",
        **changes,
    )


def rows_of(rows: list[dict[str, Any]]) -> list[tuple[str, str, str, Decimal]]:
    return [(r["venue_key"], r["account"], r["asset"], r["amount"]) for r in rows]


async def test_gateway_and_sandbox_balances_land_exactly(db: Database, dsn: str, nursery) -> None:
    answer = gateway_answer(
        {DEPOSITOR_A: {0: "1000.25", 6: "250.250001"}, DEPOSITOR_B: {0: "0.000001"}}
    )
    server = await gateway(nursery, lambda req: (200, answer))
    async with service_context(db, with_gateway(dsn, server)) as ctx:
        written = await take_balance_snapshots(ctx)
    assert written == 5
    # Gateway was asked the documented way: token and every depositor, no domain.
    [request] = server.on("/v1/balances")
    assert request.json() == {
        "token": "USDC",
        "sources": [{"depositor": DEPOSITOR_A}, {"depositor": DEPOSITOR_B}],
    }
    rows = await db.fetch(SNAPSHOTS)
    assert rows_of(rows) == [
        ("gateway", DEPOSITOR_A, "USDC", Decimal("1250.500001")),  # exact sum of domains
        ("gateway", DEPOSITOR_B, "USDC", Decimal("0.000001")),
        *SANDBOX_ROWS,
    ]
    assert rows[0]["detail"] == {"domains": {"0": "1000.25", "6": "250.250001"}}
    assert {r["source"] for r in rows} == {"worker"}
    attempts = await db.fetch(ATTEMPTS)
    assert sorted((a["fetcher_key"], a["outcome"], a["rows"]) for a in attempts) == [
        ("gateway", "ok", 2),
        ("sandbox", "ok", 3),
    ]


async def test_gateway_500_is_a_failure_not_a_zero(db: Database, dsn: str, nursery) -> None:
    server = await gateway(nursery, lambda req: (500, {"message": "internal"}))
    async with service_context(db, with_gateway(dsn, server)) as ctx:
        assert await take_balance_snapshots(ctx) == 3
    assert rows_of(await db.fetch(SNAPSHOTS)) == SANDBOX_ROWS  # no gateway row, no zero
    by_key = {a["fetcher_key"]: a for a in await db.fetch(ATTEMPTS)}
    assert by_key["gateway"]["outcome"] == "failed"
    assert by_key["gateway"]["rows"] == 0
    assert "HTTP 500" in by_key["gateway"]["error"]
    assert by_key["sandbox"]["outcome"] == "ok"


async def test_gateway_timeout_does_not_hold_up_the_others(db: Database, dsn: str, nursery) -> None:
    server = await gateway(nursery, lambda req: HANG)
    settings = with_gateway(dsn, server, balance_fetch_timeout_seconds=1.0)
    async with service_context(db, settings) as ctx:
        with trio.fail_after(10):
            assert await take_balance_snapshots(ctx) == 3
    assert rows_of(await db.fetch(SNAPSHOTS)) == SANDBOX_ROWS
    by_key = {a["fetcher_key"]: a for a in await db.fetch(ATTEMPTS)}
    assert by_key["gateway"]["outcome"] == "timeout"
    assert "timed out after 1s" in by_key["gateway"]["error"]
    # The sandbox's rows were committed while Gateway was still hanging.
    assert by_key["sandbox"]["finished_at"] < by_key["gateway"]["finished_at"] - timedelta(
        seconds=0.5
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"token": "USDC", "balances": [{"domain": 0, "depositor": DEPOSITOR_A,
                                         "balance": 12.5}]}, "decimal string"),
        (gateway_answer({DEPOSITOR_A: {0: "1"}}), "no balance reported for " + DEPOSITOR_B),
        (gateway_answer({DEPOSITOR_A: {0: "NaN"}, DEPOSITOR_B: {0: "1"}}), "not finite"),
        (gateway_answer({DEPOSITOR_A: {0: "1"}, DEPOSITOR_B: {0: "1"}, "0x" + "c3" * 20: {0: "1"}}),
         "was not asked for"),
        ({"token": "EURC", "balances": []}, "not USDC"),
        ({"balances": "none"}, "no `balances` list"),
    ],
)  # fmt: skip
def test_gateway_answers_that_are_not_balances_are_refused(body: Any, message: str) -> None:
    with pytest.raises(GatewayError, match=message):
        unified_balances(body, [DEPOSITOR_A, DEPOSITOR_B])


async def test_gateway_url_with_credentials_is_refused(db: Database, dsn: str) -> None:
    settings = treasury_settings(
        dsn,
        providers="gateway",
        gateway_api_url="https://user:pw@gateway.example",
        gateway_depositors_csv=DEPOSITOR_A,
    )
    with pytest.raises(ConfigError, match="MG_GATEWAY_API_URL: must not carry"):
        build_registry(settings, db)
    with pytest.raises(ConfigError, match="MG_GATEWAY_DEPOSITORS_CSV: the gateway provider"):
        build_registry(settings.replace(gateway_depositors_csv=""), db)


def test_gateway_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="MG_GATEWAY_DEPOSITORS_CSV: 'nope'"):
        parse_depositors("0x" + "ab" * 20 + ", nope")
    assert parse_depositors(f"{DEPOSITOR_A}, {DEPOSITOR_A.upper()[2:].join(['0x', ''])}") == [
        DEPOSITOR_A
    ]


class ListFetcher:
    """A fetcher returning whatever it is given (to feed the worker bad rows)."""

    venue_key = "custom"

    def __init__(self, key: str, result: Any) -> None:
        self.key = key
        self.result = result

    async def fetch_balances(self) -> Any:
        return self.result


@pytest.mark.parametrize(
    ("result", "error"),
    [
        ([Balance(account="a", asset="X", amount=1.5)], "not 1.5"),  # type: ignore[arg-type]
        ([Balance(account="", asset="X", amount=Decimal(1))], "account must be"),
        ([{"account": "a"}], "not a Balance"),
        ("lots", "not a list"),
        ([Balance(account="a", asset="X", amount=Decimal(1), observed_at=datetime(2026, 1, 1))],
         "time zone"),
    ],
)  # fmt: skip
async def test_a_fetcher_returning_junk_is_recorded_as_failed(
    db: Database, dsn: str, result: Any, error: str
) -> None:
    registry = ProviderRegistry()
    registry.add_balance_fetcher(ListFetcher("junk", result))
    registry.add_balance_fetcher(
        ListFetcher("good", [Balance(account="a", asset="X", amount=Decimal("2.5"))])
    )
    ctx = ServiceContext(db=db, settings=treasury_settings(dsn), providers=registry)
    assert await take_balance_snapshots(ctx) == 1
    assert rows_of(await db.fetch(SNAPSHOTS)) == [("custom", "a", "X", Decimal("2.5"))]
    [junk] = [a for a in await db.fetch(ATTEMPTS) if a["fetcher_key"] == "junk"]
    assert junk["outcome"] == "failed" and error in junk["error"]


def test_fetcher_registration_refuses_duplicates_and_non_fetchers() -> None:
    registry = ProviderRegistry()
    registry.add_balance_fetcher(ListFetcher("one", []))
    with pytest.raises(RegistrationError, match="already registered"):
        registry.add_balance_fetcher(ListFetcher("one", []))
    with pytest.raises(RegistrationError, match="not a BalanceFetcher"):
        registry.add_balance_fetcher(object())  # type: ignore[arg-type]


async def test_two_runtimes_racing_snapshot_once_per_interval(dsn: str) -> None:
    """The snapshot lease: two runtimes' passes at the same instant write one set of rows."""
    settings = treasury_settings(dsn)
    async with (
        Database(dsn) as db_a,
        Database(dsn) as db_b,
        service_context(db_a, settings) as a,
        service_context(db_b, settings) as b,
    ):
        results = await race(take_balance_snapshots, a, b)
        assert sorted(results) == [0, 3]
        assert len(await db_a.fetch(SNAPSHOTS)) == 3
        # and a second pass inside the interval fetches nothing either
        assert await take_balance_snapshots(a) == 0
        assert len(await db_a.fetch(SNAPSHOTS)) == 3


async def test_snapshots_are_append_only(db: Database, dsn: str) -> None:
    async with service_context(db, treasury_settings(dsn)) as ctx:
        await take_balance_snapshots(ctx)
    with pytest.raises(psycopg.Error, match="append-only"):
        await db.execute(Query("test/update", "UPDATE balance_snapshots SET amount = 0"))


INSERT_OLD = Query(
    "test/insert_old",
    "INSERT INTO balance_snapshots (venue_key, account, asset, amount, observed_at, source,"
    " fetcher_key) SELECT 'v', 'a', 'X', g, now() - make_interval(days => 30) + g * interval"
    " '1 second', 'worker', 'f' FROM generate_series(1, %(n)s) g",
)
COUNT = Query("test/count", "SELECT count(*) FROM balance_snapshots")


async def test_retention_deletes_in_bounded_batches(db: Database, dsn: str) -> None:
    await db.execute(INSERT_OLD, {"n": 2500})
    async with service_context(db, treasury_settings(dsn)) as ctx:
        await take_balance_snapshots(ctx)  # 3 fresh sandbox rows; history on, nothing rolled
    assert await db.fetchval(COUNT) == 2503  # not rolled up yet: nothing may go
    settings = treasury_settings(
        dsn,
        balance_history_enabled=False,
        balance_retention_batch_size=1000,
        balance_retention_max_batches=2,
    )
    ctx = ServiceContext(db=db, settings=settings, providers=ProviderRegistry())
    assert await apply_retention(ctx) == 2000  # two batches, then the pass stops
    assert await db.fetchval(COUNT) == 503
    assert await apply_retention(ctx) == 500
    assert await apply_retention(ctx) == 0
    assert rows_of(await db.fetch(SNAPSHOTS)) == SANDBOX_ROWS  # recent rows untouched
