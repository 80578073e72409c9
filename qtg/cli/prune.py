"""`qtg prune`: the retention pass, meant for cron (qtg/services/retention.py).

Removes movement_events of movements terminal for MG_RETENTION_EVENTS_DAYS,
sent / dead-lettered outbox rows older than MG_RETENTION_OUTBOX_DAYS, heartbeat
rows of processes silent for MG_HEARTBEAT_RETENTION_SECONDS and, only with an
archive folder, audit_events older than MG_RETENTION_AUDIT_DAYS (exported to a
verifiable file and anchored first). `--dry-run` prints the counts and deletes
nothing. Exit 0 when done, 2 on a bad value or an error (nothing half-done is
left unsafe: a re-run finishes an interrupted audit delete).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import trio

from qtg.cli.common import CommandError, add_database_option, describe_dsn, schema_ready_url
from qtg.config import Settings
from qtg.db import Database
from qtg.services.audit import AuditKeys, audit_keys, with_embedded_key
from qtg.services.retention import (
    DAY_SECONDS,
    PARTS,
    PruneReport,
    RetentionError,
    RetentionPolicy,
    prune,
)


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of days >= 0, got {text}")
    return value


def _parts(text: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [part for part in chosen if part not in PARTS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"{text!r}: choose from {', '.join(PARTS)} (comma-separated)"
        )
    return chosen


def _batch(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text}")
    return value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "prune",
        help="delete old events, outbox rows and heartbeats; archive old audit rows",
        description="The retention pass (run it daily from cron). Defaults come from "
        "MG_RETENTION_* and MG_HEARTBEAT_RETENTION_SECONDS; the options override them.",
    )
    add_database_option(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be removed; remove nothing"
    )
    parser.add_argument(
        "--only", type=_parts, default=PARTS, metavar="PARTS", help=f"some of {','.join(PARTS)}"
    )
    parser.add_argument("--events-days", type=_days, metavar="DAYS")
    parser.add_argument("--outbox-days", type=_days, metavar="DAYS")
    parser.add_argument("--heartbeat-days", type=_days, metavar="DAYS")
    parser.add_argument("--audit-days", type=_days, metavar="DAYS")
    parser.add_argument(
        "--audit-archive-dir",
        metavar="DIR",
        help="archive (then delete) old audit rows here; without it audit rows are kept",
    )
    parser.add_argument("--batch-size", type=_batch, metavar="N")
    parser.set_defaults(run=run_prune)


def _policy(args: argparse.Namespace, settings: Settings) -> RetentionPolicy:
    def pick(value: Any, default: Any) -> Any:
        return default if value is None else value

    archive_dir = pick(args.audit_archive_dir, settings.retention_audit_archive_dir)
    heartbeat_days = args.heartbeat_days
    return RetentionPolicy(
        events_days=pick(args.events_days, settings.retention_events_days),
        outbox_days=pick(args.outbox_days, settings.retention_outbox_days),
        heartbeat_seconds=(
            settings.heartbeat_retention_seconds
            if heartbeat_days is None
            else heartbeat_days * DAY_SECONDS
        ),
        audit_days=pick(args.audit_days, settings.retention_audit_days),
        batch_size=pick(args.batch_size, settings.retention_batch_size),
        audit_archive_dir=Path(archive_dir) if archive_dir else None,
    )


def run_prune(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    if not getattr(args, "database_url", None):
        settings = with_embedded_key(settings, create=False)
    keys = audit_keys(settings)
    policy = _policy(args, settings)
    with schema_ready_url(args, settings) as dsn:
        where = describe_dsn(dsn)
        try:
            report = trio.run(_prune, dsn, policy, keys, args.only, args.dry_run)
        except RetentionError as exc:
            raise CommandError(f"qtg prune: {exc}") from None
    verb = "would remove" if report.dry_run else "removed"
    print(f"{where}: {verb}:")
    for table, count in report.counts.items():
        print(f"  {table}: {count}")
    if report.audit_archive is not None:
        print(f"  audit archive: {report.audit_archive}")
    for note in report.notes:
        print(f"note: {note}")
    return 0


async def _prune(
    dsn: str,
    policy: RetentionPolicy,
    keys: AuditKeys | None,
    parts: tuple[str, ...],
    dry_run: bool,
) -> PruneReport:
    async with Database(dsn, min_size=1, max_size=2, application_name="qtg-prune") as db:
        return await prune(db, policy, keys=keys, parts=parts, dry_run=dry_run)
