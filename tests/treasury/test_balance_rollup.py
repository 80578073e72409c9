"""balance_history_rollup: 10,000 snapshots over two simulated days, idempotence, retention."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import trio

from qtg.db import Database, Query
from qtg.domain.balances import Sample, bucket_start, roll_up
from qtg.providers.registry import ProviderRegistry
from qtg.services.balance_history_rollup import roll_range, roll_up_balance_history
from qtg.services.balance_snapshot import apply_retention
from qtg.services.context import ServiceContext

from .helpers import treasury_settings

SERIES = [("sandbox", "main", "USDC"), ("sandbox", "main", "ETH"), ("gateway", "0xabc", "USDC")]

INSERT_MANY = Query(
    "test/insert_many",
    "INSERT INTO balance_snapshots (venue_key, account, asset, amount, observed_at, source,"
    " fetcher_key) SELECT v, a, s, amt, t, 'worker', 'test' FROM unnest(%(venues)s::text[],"
    " %(accounts)s::text[], %(assets)s::text[], %(amounts)s::numeric[],"
    " %(times)s::timestamptz[]) AS x(v, a, s, amt, t)",
)
HISTORY = Query(
    "test/history",
    "SELECT bucket, bucket_start, venue_key, account, asset, first_amount, last_amount,"
    " min_amount, max_amount, sample_count, first_observed_at, last_observed_at, rolled_at"
    " FROM balance_history ORDER BY bucket, venue_key, account, asset, bucket_start",
)
SNAPSHOT_IDS = Query(
    "test/snapshot_ids",
    "SELECT id, venue_key, account, asset, amount, observed_at FROM balance_snapshots",
)
COUNT = Query("test/count_snapshots", "SELECT count(*) FROM balance_snapshots")


def two_days_of_snapshots(n: int, end: datetime) -> list[tuple[str, str, str, Decimal, datetime]]:
    rng = random.Random(13)
    start = end - timedelta(days=2)
    rows = []
    for _ in range(n):
        venue, account, asset = rng.choice(SERIES)
        at = start + timedelta(microseconds=rng.randrange(int(2 * 86_400 * 1e6)))
        amount = Decimal(rng.randrange(0, 10**12)) / Decimal(10**6)
        rows.append((venue, account, asset, amount, at))
    return rows


async def insert(db: Database, rows: list[tuple[str, str, str, Decimal, datetime]]) -> None:
    await db.execute(
        INSERT_MANY,
        {
            "venues": [r[0] for r in rows],
            "accounts": [r[1] for r in rows],
            "assets": [r[2] for r in rows],
            "amounts": [r[3] for r in rows],
            "times": [r[4] for r in rows],
        },
    )


def expected_history(samples: list[dict[str, Any]]) -> dict[tuple[Any, ...], Any]:
    groups: dict[tuple[Any, ...], list[Sample]] = defaultdict(list)
    for row in samples:
        series = (row["venue_key"], row["account"], row["asset"])
        sample = Sample(row["observed_at"], row["amount"], row["id"])
        for bucket in ("hour", "day"):
            groups[(bucket, *series, bucket_start(row["observed_at"], bucket))].append(sample)
    return {k: roll_up(v) for k, v in groups.items()}


def as_map(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], Any]:
    out = {}
    for r in rows:
        k = (r["bucket"], r["venue_key"], r["account"], r["asset"], r["bucket_start"])
        out[k] = (
            r["first_amount"], r["last_amount"], r["min_amount"], r["max_amount"],
            r["sample_count"], r["first_observed_at"], r["last_observed_at"],
        )  # fmt: skip
    return out


def data_end() -> datetime:
    """The start of a UTC day that ended at least three hours ago: every bucket of the
    two days before it is closed whatever the time of day the test runs."""
    return bucket_start(datetime.now(UTC) - timedelta(hours=3), "day")


def ctx(db: Database, dsn: str, **changes: Any) -> ServiceContext:
    return ServiceContext(
        db=db, settings=treasury_settings(dsn, **changes), providers=ProviderRegistry()
    )


async def drain(context: ServiceContext) -> int:
    passes = 0
    while await roll_up_balance_history(context):
        passes += 1
    return passes


async def test_ten_thousand_snapshots_over_two_days(db: Database, dsn: str) -> None:
    today = data_end()
    await insert(db, two_days_of_snapshots(10_000, end=today))
    raw = await db.fetch(SNAPSHOT_IDS)
    want = expected_history(raw)
    context = ctx(db, dsn)
    assert await drain(context) >= 2  # 48+ hours at 48 per pass, then the two days

    rows = await db.fetch(HISTORY)
    got = as_map(rows)
    assert len([k for k in got if k[0] == "day"]) == 2 * len(SERIES)
    assert len([k for k in got if k[0] == "hour"]) == 48 * len(SERIES)
    assert got == {
        k: (
            r.first_amount, r.last_amount, r.min_amount, r.max_amount,
            r.sample_count, r.first_observed_at, r.last_observed_at,
        )
        for k, r in want.items()
    }  # fmt: skip
    assert sum(v[4] for k, v in got.items() if k[0] == "day") == 10_000

    # Running it again changes nothing: no bucket advanced, no row touched.
    assert await roll_up_balance_history(context) == 0
    await roll_range(db, "hour", today - timedelta(days=2), today)
    await roll_range(db, "day", today - timedelta(days=2), today)
    assert await db.fetch(HISTORY) == rows  # rolled_at included: the upsert left them alone

    # Retention drops the raw rows in batches; history stays exactly as it was.
    recent = datetime.now(UTC) - timedelta(seconds=5)
    await insert(db, [("sandbox", "main", "USDC", Decimal("1"), recent)])
    keep = ctx(db, dsn, balance_snapshot_retention_seconds=1.0,
               balance_retention_batch_size=1000, balance_retention_max_batches=3)  # fmt: skip
    batches = []
    while deleted := await apply_retention(keep):
        batches.append(deleted)
    assert batches == [3000, 3000, 3000, 1000]
    assert await db.fetchval(COUNT) == 1  # the current hour is not rolled up: kept
    assert await db.fetch(HISTORY) == rows


async def test_two_runtimes_rolling_at_once_give_the_same_rows(db: Database, dsn: str) -> None:
    today = data_end()
    await insert(db, two_days_of_snapshots(2_000, end=today))
    want = expected_history(await db.fetch(SNAPSHOT_IDS))
    async with Database(dsn) as other:
        a, b = (
            ctx(db, dsn, balance_history_max_buckets=6),
            ctx(other, dsn, balance_history_max_buckets=6),
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain, a)
            nursery.start_soon(drain, b)
        await drain(a)  # whatever a skipped while b held the lock
    got = as_map(await db.fetch(HISTORY))
    assert set(got) == set(want)
    assert all(got[k][4] == want[k].sample_count for k in want)


async def test_nothing_to_roll_and_open_buckets_wait(db: Database, dsn: str) -> None:
    context = ctx(db, dsn)
    assert await roll_up_balance_history(context) == 0  # no snapshots at all
    now = datetime.now(UTC)
    await insert(db, [("v", "a", "X", Decimal("5"), now - timedelta(seconds=1))])
    await drain(context)
    hours = [r for r in await db.fetch(HISTORY) if r["bucket_start"] == bucket_start(now, "hour")]
    assert hours == []  # the current hour has not ended: not rolled yet
