"""`qtg migrate`: apply pending migrations; `--check`: report, change nothing.

`--check` exits 0 when the database is current, 1 when migrations are pending
or an applied file was edited since, so a deploy script can gate on it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from qtg.cli.common import add_database_option, database_url, describe_dsn
from qtg.config import Settings
from qtg.db.migrate import MigrationError, check, migrate


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help="apply pending database migrations",
        description="Apply pending migrations/NNNN_*.sql in order, under an advisory lock.",
    )
    add_database_option(parser)
    parser.add_argument(
        "--check",
        action="store_true",
        help="only report: exit 1 if migrations are pending or an applied file was edited",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    with database_url(args, settings) as dsn:
        where = describe_dsn(dsn)
        if args.check:
            return _check(dsn, where)
        applied = migrate(dsn)
    if applied:
        print(f"{where}: applied {', '.join(applied)}")
    else:
        print(f"{where}: up to date, nothing to apply")
    return 0


def _check(dsn: str, where: str) -> int:
    try:
        status = check(dsn)
    except MigrationError as exc:
        print(f"{where}: {exc}", file=sys.stderr)
        return 1
    print(f"{where}: applied {', '.join(status.applied) or 'none'}")
    print(f"{where}: pending {', '.join(status.pending) or 'none'}")
    return 0 if status.current else 1
