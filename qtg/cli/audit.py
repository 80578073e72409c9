"""`qtg audit verify`: recompute the audit log's hash chain from the start.

Exit 0 and `OK` when every row follows from the one before it; exit 1 and
the id of the first row that does not (edited, or its predecessor removed or
forged), so a cron job or a deploy script can alert on it.
"""

from __future__ import annotations

import argparse
from typing import Any

import trio

from qtg.cli.common import add_database_option, database_url, describe_dsn
from qtg.config import Settings
from qtg.db import Database
from qtg.services.audit import VerifyResult, verify_audit_chain


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="the tamper-evident audit log",
        description="Work with the hash-chained audit_events log.",
    )
    actions = parser.add_subparsers(title="actions", dest="audit_action", metavar="ACTION")
    actions.required = True
    verify = actions.add_parser(
        "verify",
        help="recompute the hash chain; exit 1 naming the first broken row",
        description="Recompute every audit_events row hash from the genesis hash. "
        "Exit 0 if the chain is intact, 1 if a row was edited, removed or forged.",
    )
    add_database_option(verify)
    verify.set_defaults(run=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    with database_url(args, settings) as dsn:
        where = describe_dsn(dsn)
        result = trio.run(_verify, dsn)
    if result.ok:
        print(f"{where}: OK, {result.checked} audit events verified")
        return 0
    print(
        f"{where}: BROKEN at audit_events id {result.first_broken_id}: {result.reason} "
        f"({result.checked} events before it verified)"
    )
    return 1


async def _verify(dsn: str) -> VerifyResult:
    async with Database(dsn, min_size=1, max_size=1, application_name="qtg-audit-verify") as db:
        return await verify_audit_chain(db)
