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
import hmac
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


def chain(
    prev_hash: str, rows: Iterable[Mapping[str, Any]], key: bytes | None = None
) -> list[tuple[str, str]]:
    """(prev_hash, row_hash) for each row in order, continuing from `prev_hash`.

    With `key`, each hash is the keyed one (`keyed_row_hash`); without, the
    legacy sha256 (`row_hash`).
    """
    out: list[tuple[str, str]] = []
    for row in rows:
        current = row_hash(prev_hash, row) if key is None else keyed_row_hash(key, prev_hash, row)
        out.append((prev_hash, current))
        prev_hash = current
    return out


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """The first row whose stored hashes do not follow from what precedes it."""

    row_id: int
    reason: str


def verify_chain(
    rows: Iterable[Mapping[str, Any]], prev_hash: str = GENESIS_HASH
) -> tuple[ChainBreak | None, str, int]:
    """Walk rows in id order without keys: (first break or None, last good hash, rows checked).

    Rows without `chain_version` are legacy rows; the walk is `KeyedVerifier`'s.
    """
    verifier = KeyedVerifier(keys={}, prev_hash=prev_hash)
    verifier.feed(rows)
    return verifier.broken, verifier.prev_hash, verifier.checked


# ---------------------------------------------------------------- keyed chain
# Issue 17 item 4. The unkeyed sha256 chain above detects accidental edits but
# not an attacker with SQL access: they can delete the tail, or edit a row and
# re-hash everything after it. So rows written since migration 0014 are
# `chain_version` 2: row_hash = HMAC-SHA256(key, canonical_encoding(prev, row))
# with a key that is not in the database, and the row stores the `key_id` it was
# chained with (so rotation works: verification takes a set of keys). Rows
# written before the migration stay version 1 (the legacy sha256) and still
# verify; the keyed chain continues from the last legacy row_hash. A legacy row
# is only accepted as a prefix: once a keyed row was seen, a version-1 row after
# it is a forgery (or a downgrade), never a legitimate row.
#
# Truncating the tail (or everything) still leaves a valid chain; that is what
# checkpoints are for: {head_id, head_hash, count, key_id, created_at, mac}
# kept outside the database, and `KeyedVerifier(..., checkpoint=…)` proves
# the table still contains that head and extends it.

LEGACY_VERSION = 1
KEYED_VERSION = 2
#: Shortest key accepted (bytes): 32 bytes is HMAC-SHA256's block-strength key.
MIN_KEY_BYTES = 32


def key_id(key: bytes) -> str:
    """A public name for a key (first 8 bytes of HMAC(key, "qtg-audit-key-id"), hex)."""
    return hmac.new(key, b"qtg-audit-key-id", hashlib.sha256).hexdigest()[:16]


def keyed_row_hash(key: bytes, prev_hash: str, row: Mapping[str, Any]) -> str:
    """Lowercase hex HMAC-SHA256 of the canonical encoding under `key`."""
    return hmac.new(key, canonical_encoding(prev_hash, row), hashlib.sha256).hexdigest()


CHECKPOINT_FIELDS: tuple[str, ...] = ("head_id", "head_hash", "count", "key_id", "created_at")


def checkpoint_mac(key: bytes, fields: Mapping[str, Any]) -> str:
    """HMAC over the checkpoint's fields (sorted-key compact JSON), so it cannot be edited."""
    body = {name: fields[name] for name in CHECKPOINT_FIELDS}
    data = json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hmac.new(key, b"qtg-audit-checkpoint\x00" + data, hashlib.sha256).hexdigest()


def make_checkpoint(
    key: bytes, *, head_id: int, head_hash: str, count: int, created_at: datetime
) -> dict[str, Any]:
    """A signed checkpoint of the chain's head (head_id 0 / GENESIS_HASH: empty chain)."""
    fields: dict[str, Any] = {
        "head_id": head_id,
        "head_hash": head_hash,
        "count": count,
        "key_id": key_id(key),
        "created_at": canonical_timestamp(created_at),
    }
    return {**fields, "mac": checkpoint_mac(key, fields)}


def check_checkpoint(checkpoint: Mapping[str, Any], keys: Mapping[str, bytes]) -> str | None:
    """None if the checkpoint is well formed and its mac verifies under a known key."""
    missing = [name for name in (*CHECKPOINT_FIELDS, "mac") if name not in checkpoint]
    if missing:
        return f"checkpoint is missing {', '.join(missing)}"
    key = keys.get(checkpoint["key_id"])
    if key is None:
        return f"checkpoint is signed with another key (key id {checkpoint['key_id']})"
    if not hmac.compare_digest(str(checkpoint["mac"]), checkpoint_mac(key, checkpoint)):
        return "checkpoint mac does not verify (the checkpoint file was edited)"
    return None


@dataclass
class KeyedVerifier:
    """Walks audit_events rows in id order (fed page by page); stops at the first break.

    `keys` maps key_id → key. With a `checkpoint`, the walk also proves the
    table still contains the checkpoint's head with the same hash and the same
    number of rows up to it; `finish()` reports a table that ends before it.

    `require_keyed` (a key is configured, issue 26): a non-empty chain with no
    keyed row fails. Anyone with SQL access can re-hash the whole table as
    legacy rows, or delete its keyed rows, and the legacy rules alone would
    still add up; only a keyed row proves the key holder wrote the chain.
    """

    keys: Mapping[str, bytes]
    checkpoint: Mapping[str, Any] | None = None
    require_keyed: bool = False
    prev_hash: str = GENESIS_HASH
    #: rows of the chain before the first one fed (archived rows: `from_anchor`)
    base_count: int = 0
    checked: int = 0
    last_id: int = 0
    seen_keyed: bool = False
    head_seen: bool = False
    broken: ChainBreak | None = None

    def feed(self, rows: Iterable[Mapping[str, Any]]) -> bool:
        """Check rows; False once broken (stop reading)."""
        for row in rows:
            self.broken = self._check(row) or self._check_head(row)
            if self.broken is not None:
                return False
            self.prev_hash = row["row_hash"]
            self.checked += 1
            self.last_id = row["id"]
        return True

    def _check_head(self, row: Mapping[str, Any]) -> ChainBreak | None:
        """At the checkpoint's head row: same hash, same number of rows up to it."""
        cp = self.checkpoint
        if cp is None or row["id"] != cp["head_id"]:
            return None
        self.head_seen = True
        if not hmac.compare_digest(row["row_hash"], str(cp["head_hash"])):
            return ChainBreak(
                row["id"],
                "hash mismatch: the checkpoint's head row has another hash "
                "(the chain was rewritten from here or before)",
            )
        if self.base_count + self.checked + 1 != cp["count"]:
            return ChainBreak(
                row["id"],
                f"{self.base_count + self.checked + 1} rows up to the checkpoint's head, the "
                f"checkpoint says {cp['count']} (rows removed or inserted before it)",
            )
        return None

    def _check(self, row: Mapping[str, Any]) -> ChainBreak | None:
        cp = self.checkpoint
        if cp is not None and not self.head_seen and row["id"] > cp["head_id"] > 0:
            return ChainBreak(
                row["id"],
                f"the checkpoint's head id {cp['head_id']} is missing "
                "(deleted: truncated or rewritten below the checkpoint)",
            )
        if row["prev_hash"] != self.prev_hash:
            return ChainBreak(
                row["id"],
                "prev_hash does not match the previous row's row_hash "
                "(a row before it was removed, inserted or re-hashed)",
            )
        if row.get("chain_version", LEGACY_VERSION) == LEGACY_VERSION:
            if self.seen_keyed or (cp is not None and self.head_seen and cp["head_id"] > 0):
                return ChainBreak(
                    row["id"],
                    "forged row: an unkeyed (legacy) row after keyed rows "
                    "(appended or re-hashed without the key)",
                )
            if row["row_hash"] != row_hash(self.prev_hash, row):
                return ChainBreak(
                    row["id"], "row_hash does not match the row's content (row edited)"
                )
            return None
        self.seen_keyed = True
        key = self.keys.get(row.get("key_id") or "")
        if key is None:
            if not self.keys:
                return ChainBreak(
                    row["id"],
                    f"row is keyed (key id {row.get('key_id')}) but no MG_AUDIT_HMAC_KEY "
                    "is configured, so it cannot be verified",
                )
            return ChainBreak(row["id"], f"signed with another key (key id {row.get('key_id')})")
        if not hmac.compare_digest(row["row_hash"], keyed_row_hash(key, self.prev_hash, row)):
            return ChainBreak(
                row["id"], "forged row (bad HMAC): row_hash is not the keyed hash of its content"
            )
        return None

    def finish(self) -> ChainBreak | None:
        """The break found, one for a table that ends before the checkpoint's head,
        or (`require_keyed`) one for a non-empty chain without a keyed row."""
        if self.broken is not None:
            return self.broken
        cp = self.checkpoint
        if cp is not None and cp["head_id"] > 0 and not self.head_seen:
            if self.checked == 0 and self.base_count == 0:
                return ChainBreak(
                    0, f"empty table but the checkpoint says {cp['count']} rows (all deleted)"
                )
            return ChainBreak(
                self.last_id,
                f"truncated below the checkpoint: the table ends at id {self.last_id}, "
                f"the checkpoint's head is id {cp['head_id']}",
            )
        if self.require_keyed and self.checked > 0 and not self.seen_keyed:
            return ChainBreak(
                self.last_id,
                f"no keyed row: a key is configured but all {self.checked} rows are unkeyed "
                "(legacy), so the chain may have been rewritten without the key (re-hashed as "
                "legacy, or its keyed rows deleted); if it is genuine, run `qtg audit adopt`",
            )
        return None


# ---------------------------------------------------------------- archives
# Issue 29 item 4. `qtg prune` exports the oldest rows to a JSON-lines archive
# file, records an anchor {head_id, head_hash, count, ...} (the archived range's
# last row; signed like a checkpoint when keyed) and deletes the rows up to it.
# Verification then starts from the anchor instead of the genesis hash: the first
# remaining row must chain to head_hash, and counts include the archived rows.
# The archive file verifies on its own (`verify_archive_lines`).

#: First line of an archive file names its format.
ARCHIVE_FORMAT = "qtg-audit-archive/1"


def make_anchor(
    key: bytes | None, *, head_id: int, head_hash: str, count: int, created_at: datetime
) -> dict[str, Any]:
    """The anchor's checkpoint: signed (a checkpoint) with `key`, else the same fields unsigned."""
    if key is not None:
        return make_checkpoint(
            key, head_id=head_id, head_hash=head_hash, count=count, created_at=created_at
        )
    return {
        "head_id": head_id,
        "head_hash": head_hash,
        "count": count,
        "key_id": None,
        "created_at": canonical_timestamp(created_at),
    }


def check_anchor(anchor: Mapping[str, Any], keys: Mapping[str, bytes]) -> str | None:
    """None if the anchor may be verified from: signed under a known key, or no keys at all.

    With keys configured an unsigned anchor is refused: anyone with SQL access
    could otherwise delete rows and write an anchor that skips them.
    """
    if not keys:
        return None
    if anchor.get("key_id") is None or "mac" not in anchor:
        return (
            f"the archive anchor at audit_events id {anchor.get('head_id')} is not signed "
            "(written without an audit HMAC key), so a keyed verification cannot trust it"
        )
    problem = check_checkpoint(anchor, keys)
    return None if problem is None else f"archive anchor: {problem}"


def verifier_from_anchor(
    anchor: Mapping[str, Any] | None,
    head_chain_version: int,
    *,
    keys: Mapping[str, bytes],
    checkpoint: Mapping[str, Any] | None = None,
    require_keyed: bool = False,
) -> KeyedVerifier | ChainBreak:
    """A verifier that goes on after `anchor` (None: from the genesis hash), or the break.

    A `checkpoint` whose head was archived cannot be checked row by row any
    more: its head must be the anchor's own (same hash, same count) or an older
    one (fewer rows); the archive files check it in full.
    """
    verifier = KeyedVerifier(keys=keys, checkpoint=checkpoint, require_keyed=require_keyed)
    if anchor is None:
        return verifier
    problem = check_anchor(anchor, keys)
    if problem is not None:
        return ChainBreak(int(anchor["head_id"]), problem)
    verifier.prev_hash = str(anchor["head_hash"])
    verifier.base_count = int(anchor["count"])
    verifier.last_id = int(anchor["head_id"])
    verifier.seen_keyed = head_chain_version != LEGACY_VERSION
    if checkpoint is not None and 0 < checkpoint["head_id"] <= verifier.last_id:
        verifier.head_seen = True
        if checkpoint["head_id"] == verifier.last_id and not (
            hmac.compare_digest(str(checkpoint["head_hash"]), verifier.prev_hash)
            and checkpoint["count"] == verifier.base_count
        ):
            return ChainBreak(
                verifier.last_id,
                "the checkpoint's head is the archive anchor's but its hash or count differs",
            )
        if checkpoint["count"] > verifier.base_count:
            return ChainBreak(
                verifier.last_id,
                f"the checkpoint counts {checkpoint['count']} rows up to id "
                f"{checkpoint['head_id']}, more than the archive anchor's {verifier.base_count}",
            )
    return verifier


def archive_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """An audit_events row as an archive line (JSON-safe; timestamps canonical)."""
    out = dict(row)
    out["occurred_at"] = canonical_timestamp(row["occurred_at"])
    if row.get("promoted_at") is not None:
        out["promoted_at"] = canonical_timestamp(row["promoted_at"])
    return out


def _row_from_archive(line: Mapping[str, Any]) -> dict[str, Any]:
    row = dict(line)
    row["occurred_at"] = datetime.fromisoformat(str(line["occurred_at"]))
    return row


@dataclass(frozen=True, slots=True)
class ArchiveCheck:
    """What `verify_archive_lines` found: the break (None: intact) and how far it got."""

    broken: ChainBreak | None
    rows: int
    first_prev_hash: str
    head_id: int
    head_hash: str
    count: int


def verify_archive_lines(files: Iterable[Iterable[str]], keys: Mapping[str, bytes]) -> ArchiveCheck:
    """Re-check one or more archive files, oldest first, with no database.

    Each file is a header line, its rows in chain order and an anchor line;
    every row must chain to the one before it (across files too), and each
    anchor must name the file's last row, its hash and the running count
    (and, with `keys`, carry a valid mac).
    """
    verifier: KeyedVerifier | None = None
    first_prev = GENESIS_HASH
    anchor: Mapping[str, Any] = {}

    def fail(row_id: int, reason: str) -> ArchiveCheck:
        done = verifier.checked if verifier is not None else 0
        return ArchiveCheck(ChainBreak(row_id, reason), done, first_prev, 0, "", 0)

    for number, lines in enumerate(files, start=1):
        parsed = (json.loads(line) for line in lines if line.strip())
        header = next(parsed, None)
        if not isinstance(header, dict) or header.get("format") != ARCHIVE_FORMAT:
            return fail(0, f"archive file {number}: not a {ARCHIVE_FORMAT} file")
        if verifier is None:
            first_prev = str(header["prev_hash"])
            verifier = KeyedVerifier(
                keys=keys, prev_hash=first_prev, base_count=int(header["prev_count"])
            )
            verifier.seen_keyed = header.get("prev_chain_version", LEGACY_VERSION) != (
                LEGACY_VERSION
            )
        elif header["prev_hash"] != verifier.prev_hash or int(header["prev_count"]) != (
            verifier.base_count + verifier.checked
        ):
            return fail(0, f"archive file {number} does not continue the file before it")
        anchor = {}
        for item in parsed:  # rows, then the anchor line last (one line of look-behind)
            if "anchor" in item:
                anchor = item["anchor"] or {}
                break
            if not verifier.feed([_row_from_archive(item)]):
                assert verifier.broken is not None
                return ArchiveCheck(verifier.broken, verifier.checked, first_prev, 0, "", 0)
        if next(parsed, None) is not None:
            return fail(verifier.last_id, f"archive file {number}: lines after its anchor")
        total = verifier.base_count + verifier.checked
        if (
            not anchor
            or anchor.get("head_id") != verifier.last_id
            or anchor.get("head_hash") != verifier.prev_hash
            or anchor.get("count") != total
        ):
            return fail(
                verifier.last_id,
                f"archive file {number}: its anchor does not name its last row "
                f"(id {verifier.last_id}, {total} rows) or is missing",
            )
        problem = check_anchor(anchor, keys)
        if problem is not None:
            return fail(verifier.last_id, f"archive file {number}: {problem}")
    if verifier is None:
        return fail(0, "no archive file")
    return ArchiveCheck(
        None,
        verifier.checked,
        first_prev,
        verifier.last_id,
        verifier.prev_hash,
        verifier.base_count + verifier.checked,
    )
