"""balance_snapshot (reference §7) and the read side of GET /v3/balances.

Each pass runs every fetcher of the `balance_fetcher_registry` concurrently,
each under MG_BALANCE_FETCH_TIMEOUT_SECONDS, and appends what each returns to
`balance_snapshots` in that fetcher's own transaction as soon as it answers:
one slow or dead venue never holds up, or rolls back, the others' rows. A
fetcher that raises, times out or returns something that is not an exact
balance writes a `balance_fetch_attempts` row saying so and no snapshot: a
venue that cannot be read shows its last known balance going stale, never
a zero.

Two runtimes on one database do not both fetch: a pass first takes the
`snapshot` lease (one UPDATE … WHERE next_at <= now()), held for 90 % of the
interval so that a pass a little early under jitter still finds it free.
`GET /v3/balances?fresh=true` writes the same rows (source `fresh`) through
the same code, rate-limited by the `fresh` lease across every API process.

Retention: raw rows older than MG_BALANCE_SNAPSHOT_RETENTION_SECONDS are
deleted in batches of MG_BALANCE_RETENTION_BATCH_SIZE, each its own short
transaction, at most MG_BALANCE_RETENTION_MAX_BATCHES per pass (the loop
drains the rest at once). With MG_BALANCE_HISTORY_ENABLED a raw row is only
deleted once its hour has been rolled up into `balance_history`.

Staleness is not stored: the read side computes it against
MG_BALANCE_STALE_THRESHOLD_SECONDS with the database's clock when it reads.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal

import trio

from qtg.db import Database, Jsonb, sql_family
from qtg.domain.balances import exact_amount, is_stale
from qtg.domain.redaction import describe_error
from qtg.providers.balances import Balance, BalanceFetcher
from qtg.services.context import ServiceContext
from qtg.services.errors import InvalidInput, ServiceError

SQL = sql_family(
    "balance_snapshot",
    "take_lease",
    "lease_free_at",
    "insert_snapshots",
    "record_attempt",
    "delete_old_snapshots",
    "delete_old_attempts",
    "latest",
    "fetcher_status",
)
DB_SQL = sql_family("db", "now")

log = logging.getLogger("qtg.services.balance_snapshot")

Source = Literal["worker", "fresh"]
#: Share of the interval the snapshot lease is held (see the module docstring).
LEASE_SHARE = 0.9
HOLDER = f"{socket.gethostname()}:{os.getpid()}"


class RateLimited(ServiceError):
    status = 429
    code = "RATE_LIMITED"


@dataclass(frozen=True, slots=True)
class FetchOutcome:
    fetcher_key: str
    venue_key: str
    outcome: Literal["ok", "failed", "timeout"]
    rows: int
    error: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "fetcher_key": self.fetcher_key,
            "venue_key": self.venue_key,
            "outcome": self.outcome,
            "rows": self.rows,
            "error": self.error,
        }


def checked_rows(result: object) -> list[Balance]:
    """A fetcher's answer, refused (ValueError) unless every row is an exact balance."""
    if not isinstance(result, list):
        raise ValueError(f"fetch_balances() returned {type(result).__name__}, not a list")
    rows: list[Balance] = []
    for i, row in enumerate(result):
        if not isinstance(row, Balance):
            raise ValueError(f"row {i} is a {type(row).__name__}, not a Balance")
        for name in ("account", "asset"):
            value = getattr(row, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"row {i}: {name} must be a non-empty string")
        try:
            exact = exact_amount(row.amount)
        except ValueError as exc:
            raise ValueError(f"row {i} ({row.account}/{row.asset}): {exc}") from None
        if row.observed_at is not None and row.observed_at.tzinfo is None:
            raise ValueError(f"row {i}: observed_at must carry a time zone")
        rows.append(Balance(**{**_fields(row), "amount": exact}))
    return rows


def _fields(row: Balance) -> dict[str, Any]:
    return {f: getattr(row, f) for f in row.__struct_fields__}


async def run_fetcher(
    db: Database, fetcher: BalanceFetcher, *, source: Source, timeout_seconds: float
) -> FetchOutcome:
    """Call one fetcher under its timeout and record what happened (its own transaction)."""
    started = datetime.now(UTC)
    rows: list[Balance] = []
    error: str | None = None
    outcome: Literal["ok", "failed", "timeout"] = "ok"
    try:
        with trio.fail_after(timeout_seconds):
            result = await fetcher.fetch_balances()
        rows = checked_rows(result)
    except trio.TooSlowError:
        outcome, error = "timeout", f"fetch_balances() timed out after {timeout_seconds:g}s"
    except Exception as exc:  # any failure of a venue is recorded, never raised
        outcome, error = "failed", describe_error(exc)
    async with db.transaction() as tx:
        if rows:
            await tx.execute(
                SQL.insert_snapshots,
                {
                    "venue_key": fetcher.venue_key,
                    "source": source,
                    "fetcher_key": fetcher.key,
                    "accounts": [r.account for r in rows],
                    "assets": [r.asset for r in rows],
                    "amounts": [r.amount for r in rows],
                    "observed": [r.observed_at for r in rows],
                    "details": [Jsonb(r.detail) for r in rows],
                },
            )
        await tx.execute(
            SQL.record_attempt,
            {
                "fetcher_key": fetcher.key,
                "venue_key": fetcher.venue_key,
                "source": source,
                "outcome": outcome,
                "error": error,
                "rows": len(rows),
                "started_at": started,
            },
        )
    if error is not None:
        log.warning("balance fetcher %s %s", fetcher.key, outcome, extra={"fetcher": fetcher.key})
    return FetchOutcome(fetcher.key, fetcher.venue_key, outcome, len(rows), error)


async def fetch_all(
    db: Database,
    fetchers: Sequence[BalanceFetcher],
    *,
    source: Source,
    timeout_seconds: float,
) -> list[FetchOutcome]:
    """Every fetcher at once, each bounded on its own; outcomes in fetcher order."""
    outcomes: dict[str, FetchOutcome] = {}

    async def one(fetcher: BalanceFetcher) -> None:
        outcomes[fetcher.key] = await run_fetcher(
            db, fetcher, source=source, timeout_seconds=timeout_seconds
        )

    async with trio.open_nursery() as nursery:
        for fetcher in fetchers:
            nursery.start_soon(one, fetcher)
    return [outcomes[f.key] for f in fetchers]


async def take_lease(db: Database, name: str, seconds: float) -> bool:
    return (
        await db.fetchval(
            SQL.take_lease, {"lease_name": name, "seconds": seconds, "taken_by": HOLDER}
        )
        is not None
    )


async def apply_retention(ctx: ServiceContext) -> int:
    """Delete expired raw snapshots and attempts in bounded batches; how many went."""
    s = ctx.settings
    params = {
        "retention_seconds": s.balance_snapshot_retention_seconds,
        "batch_size": s.balance_retention_batch_size,
        "history_enabled": s.balance_history_enabled,
    }
    deleted = 0
    for query in (SQL.delete_old_snapshots, SQL.delete_old_attempts):
        for _ in range(s.balance_retention_max_batches):
            async with ctx.db.transaction() as tx:
                n = await tx.execute(query, params)
            deleted += n
            if n < s.balance_retention_batch_size:
                break
    return deleted


# ------------------------------------------------------------------- pass


async def take_balance_snapshots(ctx: ServiceContext) -> int:
    """The balance_snapshot pass: snapshot every venue (if this runtime holds the lease),
    then one round of retention. Returns rows written plus rows deleted."""
    fetchers = ctx.providers.balance_fetcher_registry.fetchers()
    written = 0
    lease = ctx.settings.balance_snapshot_interval_seconds * LEASE_SHARE
    if fetchers and await take_lease(ctx.db, "snapshot", lease):
        outcomes = await fetch_all(
            ctx.db,
            fetchers,
            source="worker",
            timeout_seconds=ctx.settings.balance_fetch_timeout_seconds,
        )
        written = sum(o.rows for o in outcomes)
    return written + await apply_retention(ctx)


# -------------------------------------------------------------- read side


async def fresh_fetch(ctx: ServiceContext, *, venue_key: str | None) -> list[FetchOutcome]:
    """GET /v3/balances?fresh=true: fetch now (the caller checked the role), bounded by
    MG_BALANCE_FRESH_TIMEOUT_SECONDS, at most once per MG_BALANCE_FRESH_MIN_INTERVAL_SECONDS
    across every process on the database (429 otherwise)."""
    s = ctx.settings
    fetchers = ctx.providers.balance_fetcher_registry.fetchers(venue_key)
    if not fetchers:
        known = ctx.providers.balance_fetcher_registry.venue_keys()
        raise InvalidInput(
            f"venue_key: no balance fetcher serves venue {venue_key!r}"
            if venue_key
            else "fresh: this process has no balance fetcher",
            detail={"field": "venue_key" if venue_key else "fresh", "venues": known},
        )
    if not await take_lease(ctx.db, "fresh", s.balance_fresh_min_interval_seconds):
        row = await ctx.db.fetchrow(SQL.lease_free_at, {"lease_name": "fresh"})
        wait = round(float(row["wait_seconds"]) if row else 0.0, 3)
        raise RateLimited(
            f"fresh balances were fetched less than {s.balance_fresh_min_interval_seconds:g}s "
            f"ago; retry in {wait:g}s",
            detail={"retry_after_seconds": wait},
        )
    timeout = min(s.balance_fetch_timeout_seconds, s.balance_fresh_timeout_seconds)
    return await fetch_all(ctx.db, fetchers, source="fresh", timeout_seconds=timeout)


async def latest_balances(
    db: Database,
    *,
    threshold_seconds: float,
    venue_key: str | None = None,
    account: str | None = None,
    asset: str | None = None,
) -> dict[str, Any]:
    """The latest snapshot per venue, account and asset, each with `stale` judged now."""
    filters = {"venue_key": venue_key, "account": account, "asset": asset}
    rows = await db.fetch(SQL.latest, filters)
    as_of = rows[0]["as_of"] if rows else await db.fetchval(DB_SQL.now)
    items = []
    for row in rows:
        row.pop("as_of")
        row["amount"] = _plain(row["amount"])
        row["age_seconds"] = round((as_of - row["observed_at"]).total_seconds(), 3)
        row["stale"] = is_stale(row["observed_at"], as_of, threshold_seconds)
        items.append(row)
    fetchers = await db.fetch(SQL.fetcher_status, {"venue_key": venue_key})
    return {
        "as_of": as_of,
        "stale_threshold_seconds": threshold_seconds,
        "items": items,
        "fetchers": fetchers,
    }


def _plain(amount: Decimal) -> str:
    """An exact amount as a decimal string, never in exponent notation."""
    return format(amount, "f")
