"""Retention (issue 29 item 4): keep the tables that grow with every movement bounded.

`qtg prune` (qtg/cli/prune.py, meant for cron) runs `prune`, which removes:
- movement_events of movements terminal (COMPLETED, FAILED, CANCELLED, REJECTED,
  EXPIRED) for MG_RETENTION_EVENTS_DAYS, never an event of a live movement;
- movement_callback_outbox and notification_messages rows that are done with
  (sent or dlq) for MG_RETENTION_OUTBOX_DAYS, with their notification_deliveries,
  and notifications resolved that long ago with no delivery left;
- worker_heartbeats rows of processes that stopped beating MG_HEARTBEAT_RETENTION_SECONDS ago;
- audit_events older than MG_RETENTION_AUDIT_DAYS, only when an archive folder is
  given: the rows are exported to a JSON-lines file, the file re-verified, an
  anchor recorded (signed when keyed), and only then the rows deleted, so
  `qtg audit verify` goes on from the anchor and the file verifies offline.

Why a command and not a worker: the runtime's workers mirror the reference's
list, and retention is a daily chore an operator schedules, dry-runs and reads
the counts of. Every delete is a bounded batch in its own transaction, walking
the primary key, so no lock is held for long and a concurrent writer never waits
on a prune for more than one batch.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trio

from qtg.db import Database, Jsonb, sql_family
from qtg.domain import audit_chain
from qtg.domain.states import TERMINAL_REQUEST_STATES, RequestState
from qtg.services.audit import AuditKeys, latest_anchor

SQL = sql_family(
    "retention",
    "events_bound",
    "delete_events",
    "count_events",
    "delete_callbacks",
    "count_callbacks",
    "delete_notification_messages",
    "count_notification_messages",
    "delete_notifications",
    "count_notifications",
    "delete_heartbeats",
    "count_heartbeats",
    "audit_range",
    "audit_page",
    "insert_anchor",
    "archive_lock",
    "allow_audit_delete",
    "walk_plans",
    "delete_audit",
)

DAY_SECONDS = 86_400.0
#: Movements whose events may go once they have been in one of these states for the
#: retention period. FAILED is not terminal for the state machine (an operator may
#: retry a failed node, FAILED -> EXECUTING), but a movement failed for months is done
#: with; if it is retried after all, it runs as before (execution never reads
#: movement_events) and only its event history from before the purge is missing.
EVENTS_PRUNABLE_STATES: tuple[str, ...] = tuple(
    sorted(str(s) for s in TERMINAL_REQUEST_STATES | {RequestState.FAILED})
)
#: The parts of a prune, in the order they run (outboxes before events: a
#: callback row points at its event).
PARTS: tuple[str, ...] = ("outboxes", "events", "heartbeats", "audit")
#: Rows read per page while exporting audit rows.
ARCHIVE_PAGE_SIZE = 1000


class RetentionError(RuntimeError):
    """A prune step could not go on safely (nothing was deleted by that step)."""


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    events_days: float
    outbox_days: float
    heartbeat_seconds: float
    audit_days: float
    batch_size: int
    #: where audit archives go; None: audit rows are kept (never deleted unarchived)
    audit_archive_dir: Path | None = None


@dataclass(slots=True)
class PruneReport:
    """Rows removed (or, in a dry run, that would be) per table."""

    dry_run: bool
    counts: dict[str, int] = field(default_factory=dict)
    audit_archive: Path | None = None
    notes: list[str] = field(default_factory=list)


async def prune(
    db: Database,
    policy: RetentionPolicy,
    *,
    keys: AuditKeys | None,
    parts: tuple[str, ...] = PARTS,
    dry_run: bool = False,
) -> PruneReport:
    """Run the chosen parts of the retention pass (see the module doc)."""
    report = PruneReport(dry_run=dry_run)
    outbox = {"older_than_seconds": policy.outbox_days * DAY_SECONDS}
    if "outboxes" in parts:
        report.counts["movement_callback_outbox"] = await _run(
            db, SQL.delete_callbacks, SQL.count_callbacks, outbox, policy.batch_size, dry_run
        )
        report.counts["notification_messages"] = await _run(
            db,
            SQL.delete_notification_messages,
            SQL.count_notification_messages,
            outbox,
            policy.batch_size,
            dry_run,
        )
        report.counts["notifications"] = await _run(
            db,
            SQL.delete_notifications,
            SQL.count_notifications,
            outbox,
            policy.batch_size,
            dry_run,
        )
    if "events" in parts:
        events = {
            "older_than_seconds": policy.events_days * DAY_SECONDS,
            "states": list(EVENTS_PRUNABLE_STATES),
        }
        bound = await db.fetchval(SQL.events_bound, events)
        report.counts["movement_events"] = await _run(
            db,
            SQL.delete_events,
            SQL.count_events,
            {**events, "bound_id": bound},
            policy.batch_size,
            dry_run,
        )
    if "heartbeats" in parts:
        beats = {"older_than_seconds": policy.heartbeat_seconds}
        if dry_run:
            report.counts["worker_heartbeats"] = int(await db.fetchval(SQL.count_heartbeats, beats))
        else:
            report.counts["worker_heartbeats"] = await db.execute(SQL.delete_heartbeats, beats)
    if "audit" in parts:
        if policy.audit_archive_dir is None:
            report.notes.append(
                "audit_events kept: no archive folder (MG_RETENTION_AUDIT_ARCHIVE_DIR or "
                "--audit-archive-dir); audit rows are only deleted once archived"
            )
        else:
            archived, path = await archive_audit(
                db,
                keys=keys,
                older_than_days=policy.audit_days,
                archive_dir=policy.audit_archive_dir,
                batch_size=policy.batch_size,
                dry_run=dry_run,
            )
            report.counts["audit_events"] = archived
            report.audit_archive = path
    return report


async def _run(
    db: Database,
    delete: Any,
    count: Any,
    params: Mapping[str, Any],
    batch_size: int,
    dry_run: bool,
) -> int:
    """Count (dry run), or delete batch after batch walking the primary key from 0."""
    if dry_run:
        return int(await db.fetchval(count, params))
    return await _delete_in_batches(db, delete, params, batch_size)


async def _delete_in_batches(
    db: Database, delete: Any, params: Mapping[str, Any], batch_size: int, *, allow: Any = None
) -> int:
    total, after_id = 0, 0
    while True:
        async with db.transaction() as tx:
            await tx.fetchval(SQL.walk_plans)
            if allow is not None:
                await tx.fetchval(allow)
            row = await tx.fetchrow(
                delete, {**params, "after_id": after_id, "batch_size": batch_size}
            )
        assert row is not None
        total += int(row["deleted"])
        if row["deleted"] < batch_size:
            return total
        after_id = int(row["last_id"])


# ---------------------------------------------------------------- audit archive


async def archive_audit(
    db: Database,
    *,
    keys: AuditKeys | None,
    older_than_days: float,
    archive_dir: Path,
    batch_size: int,
    dry_run: bool = False,
) -> tuple[int, Path | None]:
    """Archive and delete the audit rows older than `older_than_days` (after the
    newest anchor, never the chain's head). Returns (rows, archive file or None).

    Order, so that a crash at any point loses nothing and breaks no verification:
    1. export the rows to `<dir>/audit-<first>-<last>.jsonl` (written to a temporary
       name, fsynced, renamed), then re-read and verify that file;
    2. record the anchor (the last archived row's id, hash and the chain's row count,
       signed with the current key when keyed), unless another prune anchored meanwhile;
    3. delete the rows up to the anchor in bounded batches (a re-run finishes a
       delete a crash interrupted: step 0 below).
    """
    anchor_row = await latest_anchor(db)
    previous = anchor_row["checkpoint"] if anchor_row is not None else None
    after_id = int(previous["head_id"]) if previous is not None else 0
    if not dry_run and after_id:
        # 0. rows an earlier run anchored but did not finish deleting
        await _delete_audit_upto(db, after_id, batch_size)
    span = await db.fetchrow(
        SQL.audit_range,
        {"after_id": after_id, "older_than_seconds": older_than_days * DAY_SECONDS},
    )
    assert span is not None
    if not span["n"]:
        return 0, None
    if dry_run:
        return int(span["n"]), None
    up_to_id = int(span["up_to_id"])
    prev_hash = str(previous["head_hash"]) if previous is not None else audit_chain.GENESIS_HASH
    prev_count = int(previous["count"]) if previous is not None else 0
    prev_version = audit_chain.LEGACY_VERSION
    if anchor_row is not None:
        prev_version = int(anchor_row["head_chain_version"])
    header = {
        "format": audit_chain.ARCHIVE_FORMAT,
        "prev_hash": prev_hash,
        "prev_count": prev_count,
        "prev_chain_version": prev_version,
        "after_id": after_id,
        "up_to_id": up_to_id,
    }
    await trio.Path(archive_dir).mkdir(parents=True, exist_ok=True)
    # a name of its own: a concurrent prune writes the same range under another one
    fd, tmp_name = tempfile.mkstemp(prefix=".audit-", suffix=".jsonl.tmp", dir=archive_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        return await _archive_via(
            db, tmp, header, after_id, up_to_id, prev_count, keys, archive_dir, batch_size
        )
    finally:
        await trio.to_thread.run_sync(lambda: tmp.unlink(missing_ok=True))


async def _archive_via(
    db: Database,
    tmp: Path,
    header: Mapping[str, Any],
    after_id: int,
    up_to_id: int,
    prev_count: int,
    keys: AuditKeys | None,
    archive_dir: Path,
    batch_size: int,
) -> tuple[int, Path]:
    """Export to `tmp`, verify it, anchor and publish it in one transaction, then delete."""
    digest = hashlib.sha256()
    last: dict[str, Any] | None = None
    archived = 0
    with tmp.open("wb") as out:  # streamed page by page: bounded memory on any backlog

        def put(line: str) -> None:
            data = (line + "\n").encode("utf-8")
            digest.update(data)
            out.write(data)

        put(json.dumps(header, sort_keys=True))
        cursor = after_id
        while True:
            page = await db.fetch(
                SQL.audit_page,
                {"after_id": cursor, "up_to_id": up_to_id, "limit": ARCHIVE_PAGE_SIZE},
            )
            if not page:
                break
            for row in page:
                put(json.dumps(audit_chain.archive_row(row), sort_keys=True, ensure_ascii=False))
            archived += len(page)
            last = page[-1]
            cursor = last["id"]
        assert last is not None
        count = prev_count + archived
        anchor = audit_chain.make_anchor(
            keys.current if keys is not None else None,
            head_id=last["id"],
            head_hash=last["row_hash"],
            count=count,
            created_at=datetime.now(UTC),
        )
        put(json.dumps({"anchor": anchor}, sort_keys=True))
        out.flush()
        os.fsync(out.fileno())
    by_id = dict(keys.by_id) if keys is not None else {}
    check = await trio.to_thread.run_sync(_verify_file, tmp, by_id)
    if check.broken is not None or check.head_id != last["id"]:
        why = check.broken.reason if check.broken is not None else "it ends before the range"
        raise RetentionError(f"the archive written does not verify ({why}); nothing deleted")
    path = archive_dir / f"audit-{after_id + 1:012d}-{last['id']:012d}.jsonl"
    async with db.transaction() as tx:
        # one archiver at a time from here to commit; the anchor is written only if
        # no other run anchored since this one read the newest anchor
        await tx.fetchval(SQL.archive_lock)
        inserted = await tx.fetchval(
            SQL.insert_anchor,
            {
                "head_id": last["id"],
                "head_hash": last["row_hash"],
                "count": count,
                "head_chain_version": last["chain_version"],
                "checkpoint": Jsonb(anchor),
                "archive_file": str(path),
                "archive_sha256": digest.hexdigest(),
                "rows_archived": archived,
                "previous_head_id": after_id,
            },
        )
        if inserted is None:
            raise RetentionError(
                "another prune archived audit rows meanwhile; nothing deleted (run again)"
            )
        # published before the anchor commits: an anchor never names a missing file
        # (a failed commit leaves a file the next run rewrites under the same name)
        await trio.to_thread.run_sync(_publish, tmp, path)
    deleted = await _delete_audit_upto(db, up_to_id, batch_size)
    return deleted, path


async def _delete_audit_upto(db: Database, up_to_id: int, batch_size: int) -> int:
    return await _delete_in_batches(
        db, SQL.delete_audit, {"up_to_id": up_to_id}, batch_size, allow=SQL.allow_audit_delete
    )


def _publish(tmp: Path, path: Path) -> None:
    """Rename the fsynced temporary file into place and make the rename durable."""
    os.replace(tmp, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _verify_file(path: Path, keys: Mapping[str, bytes]) -> audit_chain.ArchiveCheck:
    with path.open(encoding="utf-8") as handle:
        return audit_chain.verify_archive_lines([handle], keys)


def verify_archive_files(paths: list[Path], keys: AuditKeys | None) -> audit_chain.ArchiveCheck:
    """`qtg audit verify-archive`: re-check archive files, oldest first, with no database."""
    by_id = dict(keys.by_id) if keys is not None else {}
    handles = [path.open(encoding="utf-8") for path in paths]
    try:
        return audit_chain.verify_archive_lines(handles, by_id)
    finally:
        for handle in handles:
            handle.close()
