"""The audit log's hash chain (DESIGN §2, beyond): pure functions, no I/O.

Each `audit_events` row carries `prev_hash` (the previous row's `row_hash`, or
GENESIS_HASH for the first row) and `row_hash` = sha256 over a canonical
encoding of the previous hash and the row's content. Editing any field of any
row, deleting a row, or inserting one in the middle changes a hash that a
later row depends on, so `verify_chain` finds the first row where the story
stops adding up.

The encoding is a compact JSON array with sorted object keys and timestamps
written in UTC with microseconds (PostgreSQL's precision). JSON rather than an
ad-hoc byte format so that anyone with an export of the table and any JSON
library can re-check the chain without qtg.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

#: prev_hash of the first row of the chain.
GENESIS_HASH = "0" * 64

#: The content columns a row hash covers, in encoding order (after prev_hash).
CHAINED_FIELDS: tuple[str, ...] = (
    "outbox_id",
    "actor",
    "action",
    "object_type",
    "object_id",
    "detail",
    "occurred_at",
)


def canonical_timestamp(value: datetime) -> str:
    """`2024-05-01T12:00:00.000001+00:00`: the same instant always gives the same text."""
    if value.tzinfo is None:
        raise ValueError("audit timestamps must be timezone-aware")
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def canonical_encoding(prev_hash: str, row: Mapping[str, Any]) -> bytes:
    """The bytes a row hash is taken over: `[prev_hash, outbox_id, actor, …, occurred_at]`."""
    values: list[Any] = [prev_hash]
    for name in CHAINED_FIELDS:
        value = row[name]
        values.append(canonical_timestamp(value) if name == "occurred_at" else value)
    return json.dumps(
        values, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def row_hash(prev_hash: str, row: Mapping[str, Any]) -> str:
    """Lowercase hex sha256 of the canonical encoding."""
    return hashlib.sha256(canonical_encoding(prev_hash, row)).hexdigest()


def chain(prev_hash: str, rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(prev_hash, row_hash) for each row in order, continuing from `prev_hash`."""
    out: list[tuple[str, str]] = []
    for row in rows:
        current = row_hash(prev_hash, row)
        out.append((prev_hash, current))
        prev_hash = current
    return out


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """The first row whose stored hashes do not follow from what precedes it."""

    row_id: int
    reason: str


def check_row(expected_prev: str, row: Mapping[str, Any]) -> ChainBreak | None:
    """Check one stored row (with `id`, `prev_hash`, `row_hash`) against its predecessor."""
    if row["prev_hash"] != expected_prev:
        return ChainBreak(
            row["id"],
            "prev_hash does not match the previous row's row_hash "
            "(a row before it was removed, inserted or re-hashed)",
        )
    if row["row_hash"] != row_hash(expected_prev, row):
        return ChainBreak(row["id"], "row_hash does not match the row's content (row edited)")
    return None


def verify_chain(
    rows: Iterable[Mapping[str, Any]], prev_hash: str = GENESIS_HASH
) -> tuple[ChainBreak | None, str, int]:
    """Walk rows in id order: (first break or None, last good hash, rows checked)."""
    checked = 0
    for row in rows:
        broken = check_row(prev_hash, row)
        if broken is not None:
            return broken, prev_hash, checked
        prev_hash = row["row_hash"]
        checked += 1
    return None, prev_hash, checked
