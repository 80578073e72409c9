"""Treasury rules, no I/O: exact amounts, staleness, history buckets, transfer status order.

Money is never a float here. A fetcher's amount is accepted as a decimal
string, an int or a `Decimal`, and refused (ValueError naming the value) if
it is a float, NaN or infinite, because `0.1 + 0.2` is not a balance anyone
should reconcile against.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Literal

Bucket = Literal["hour", "day"]
BUCKETS: tuple[Bucket, ...] = ("hour", "day")
BUCKET_LENGTH: dict[Bucket, timedelta] = {"hour": timedelta(hours=1), "day": timedelta(days=1)}


def exact_amount(value: object) -> Decimal:
    """`value` as an exact, finite Decimal; ValueError says why it is not one."""
    if isinstance(value, bool | float):
        raise ValueError(f"amount must be a decimal string or an integer, not {value!r}")
    if isinstance(value, Decimal):
        number = value
    elif isinstance(value, int | str):
        try:
            number = Decimal(str(value).strip())
        except InvalidOperation:
            raise ValueError(f"amount {value!r} is not a decimal") from None
    else:
        raise ValueError(f"amount must be a decimal string, got {type(value).__name__}")
    if not number.is_finite():
        raise ValueError(f"amount {value!r} is not finite")
    return number


def is_stale(observed_at: datetime, now: datetime, threshold_seconds: float) -> bool:
    """A balance is stale once it is older than the threshold (computed when read)."""
    return (now - observed_at).total_seconds() > threshold_seconds


def bucket_start(moment: datetime, bucket: Bucket) -> datetime:
    """The UTC start of the hour or day `moment` falls in."""
    utc = moment.astimezone(UTC)
    if bucket == "hour":
        return utc.replace(minute=0, second=0, microsecond=0)
    return utc.replace(hour=0, minute=0, second=0, microsecond=0)


def closed_through(now: datetime, bucket: Bucket, grace_seconds: float) -> datetime:
    """The end of the last bucket that ended at least `grace_seconds` before `now`:
    every bucket ending at or before it may be rolled up."""
    return bucket_start(now - timedelta(seconds=grace_seconds), bucket)


@dataclass(frozen=True, slots=True)
class Sample:
    observed_at: datetime
    amount: Decimal
    order: int = 0  # tie-break between samples of one instant (the snapshot id)


@dataclass(frozen=True, slots=True)
class Rollup:
    first_amount: Decimal
    last_amount: Decimal
    min_amount: Decimal
    max_amount: Decimal
    sample_count: int
    first_observed_at: datetime
    last_observed_at: datetime


def roll_up(samples: Iterable[Sample]) -> Rollup:
    """First, last, min, max and count of one series in one bucket (the SQL's contract,
    written out so tests can compute what the database must return)."""
    ordered = sorted(samples, key=lambda s: (s.observed_at, s.order))
    if not ordered:
        raise ValueError("a bucket with no samples has no rollup")
    amounts = [s.amount for s in ordered]
    return Rollup(
        first_amount=ordered[0].amount,
        last_amount=ordered[-1].amount,
        min_amount=min(amounts),
        max_amount=max(amounts),
        sample_count=len(ordered),
        first_observed_at=ordered[0].observed_at,
        last_observed_at=ordered[-1].observed_at,
    )


# ------------------------------------------------------------ CEX transfers

TransferStatus = Literal["pending", "ok", "failed", "canceled"]
TRANSFER_STATUSES: tuple[TransferStatus, ...] = ("pending", "ok", "failed", "canceled")
FINAL_TRANSFER_STATUSES: frozenset[str] = frozenset({"ok", "failed", "canceled"})


def normalize_transfer_status(raw: object) -> TransferStatus:
    """A venue's status word in ccxt's vocabulary (pending, ok, failed, canceled)."""
    text = str(raw or "").strip().lower()
    if text in ("ok", "success", "succeeded", "completed", "complete", "done", "credited"):
        return "ok"
    if text in ("failed", "failure", "rejected", "error"):
        return "failed"
    if text in ("canceled", "cancelled"):
        return "canceled"
    return "pending"
