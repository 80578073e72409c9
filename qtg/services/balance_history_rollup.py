"""balance_history_rollup: raw balance snapshots into hourly and daily history.

A bucket (UTC hour or day) is rolled up once it has ended at least
MG_BALANCE_HISTORY_GRACE_SECONDS ago, so snapshots recorded a little late
still land in it. `balance_rollup_progress` keeps, per bucket kind, the end
of the last rolled-up bucket (`rolled_through`); a pass moves it forward by at
most MG_BALANCE_HISTORY_MAX_BUCKETS hours (and the days those hours close),
and the loop drains the rest at once.

- Hourly rows are computed from raw snapshots, daily rows from hourly rows,
  so a day stays right after retention has dropped the raw rows of its hours
  (retention deletes a raw row only once its hour is behind `rolled_through`).
- Idempotent: a bucket rolled again recomputes the same values and the upsert
  leaves the row untouched; two runtimes serialise on the progress row
  (FOR UPDATE SKIP LOCKED: the second one skips the pass).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from qtg.db import Database, Tx, sql_family
from qtg.domain.balances import BUCKET_LENGTH, Bucket, bucket_start, closed_through
from qtg.services.context import ServiceContext

SQL = sql_family(
    "balance_history_rollup",
    "lock_progress",
    "first_snapshot",
    "first_hour",
    "set_progress",
    "roll_hours",
    "roll_days",
    "history_page",
)


async def _advance(
    tx: Tx, bucket: Bucket, closed_at: Callable[[datetime], datetime], max_buckets: int
) -> tuple[int, datetime | None]:
    """Roll the next closed buckets of one kind; (buckets advanced, new watermark).
    `closed_at(now)` is the end of the last bucket that may be rolled now."""
    row = await tx.fetchrow(SQL.lock_progress, {"bucket": bucket})
    if row is None:  # another runtime is rolling this kind right now
        return 0, None
    closed = closed_at(row["now"])
    start = row["rolled_through"]
    if start is None:
        first_query = SQL.first_snapshot if bucket == "hour" else SQL.first_hour
        first = await tx.fetchval(first_query)
        if first is None:
            return 0, None
        start = bucket_start(first, bucket)
    length = BUCKET_LENGTH[bucket]
    end = min(closed, start + length * max_buckets)
    if end <= start:
        return 0, start
    await tx.execute(SQL.roll_hours if bucket == "hour" else SQL.roll_days,
                     {"start": start, "end": end})  # fmt: skip
    await tx.execute(SQL.set_progress, {"bucket": bucket, "rolled_through": end})
    return (end - start) // length, end


async def roll_up_balance_history(ctx: ServiceContext) -> int:
    """The balance_history_rollup pass; returns how many buckets it closed."""
    s = ctx.settings
    grace = s.balance_history_grace_seconds
    async with ctx.db.transaction() as tx:
        hours, hour_mark = await _advance(
            tx,
            "hour",
            lambda now: closed_through(now, "hour", grace),
            s.balance_history_max_buckets,
        )
    if hour_mark is None:
        return hours
    # A day is final once all of its hours are: its end is at or before the hour mark.
    async with ctx.db.transaction() as tx:
        days, _ = await _advance(
            tx,
            "day",
            lambda now: bucket_start(hour_mark, "day"),
            max(1, s.balance_history_max_buckets // 24),
        )
    return hours + days


async def roll_range(db: Database, bucket: Bucket, start: datetime, end: datetime) -> None:
    """Roll [start, end) again by hand (an operator, or a test proving idempotence);
    does not move the watermark."""
    async with db.transaction() as tx:
        query = SQL.roll_hours if bucket == "hour" else SQL.roll_days
        await tx.execute(query, {"start": start, "end": end})


# -------------------------------------------------------------- read side


async def history_page(
    db: Database,
    *,
    bucket: Bucket,
    venue_key: str | None,
    account: str | None,
    asset: str | None,
    since: datetime | None,
    until: datetime | None,
    after: tuple[datetime, str, str, str] | None,
    limit: int,
) -> tuple[list[dict[str, Any]], tuple[datetime, str, str, str] | None]:
    """One page of history rows, newest first, and the key to continue after."""
    rows = await db.fetch(
        SQL.history_page,
        {
            "bucket": bucket,
            "venue_key": venue_key,
            "account": account,
            "asset": asset,
            "since": since,
            "until": until,
            "after_start": after[0] if after else None,
            "after_venue": after[1] if after else None,
            "after_account": after[2] if after else None,
            "after_asset": after[3] if after else None,
            "limit": limit + 1,
        },
    )
    more = len(rows) > limit
    rows = rows[:limit]
    for row in rows:
        for name in ("first_amount", "last_amount", "min_amount", "max_amount"):
            row[name] = format(row[name], "f")
    if not more:
        return rows, None
    last = rows[-1]
    return rows, (last["bucket_start"], last["venue_key"], last["account"], last["asset"])
