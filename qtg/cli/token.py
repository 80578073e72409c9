"""`qtg token create|revoke|list`: the API's bearer tokens.

`create` prints the token on stdout, alone, exactly once (an explanation goes
to stderr), so that `TOKEN=$(qtg token create --name alice --role operator)`
works; the database keeps only its sha256. A name is the API principal (what
four-eyes compares); one live token per name, so rotating is revoke + create.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from qtg.cli.common import CommandError, add_database_option, describe_dsn, schema_ready_url
from qtg.config import Settings
from qtg.db import Database
from qtg.services import tokens
from qtg.services.errors import ServiceError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "token",
        help="API bearer tokens (create, revoke, list)",
        description="Manage the bearer tokens of the V3 API.",
    )
    actions = parser.add_subparsers(title="actions", dest="token_action", metavar="ACTION")
    actions.required = True

    create = actions.add_parser(
        "create",
        help="create a token and print it once",
        description="Create a live token for NAME with ROLE; the token is printed once on "
        "stdout and never again (only its hash is stored).",
    )
    create.add_argument("--name", required=True, help="the principal, e.g. alice")
    create.add_argument("--role", required=True, choices=[r.name for r in tokens.Role])
    add_database_option(create)
    create.set_defaults(run=run_create)

    revoke = actions.add_parser(
        "revoke",
        help="revoke the live token of a name",
        description="Revoke NAME's live token: requests using it get 401 from now on.",
    )
    revoke.add_argument("--name", required=True)
    add_database_option(revoke)
    revoke.set_defaults(run=run_revoke)

    listing = actions.add_parser("list", help="list tokens (never the token itself)")
    listing.add_argument("--all", action="store_true", help="include revoked tokens")
    add_database_option(listing)
    listing.set_defaults(run=run_list)


def _actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def _with_db(args: argparse.Namespace, fn: Callable[[Database], Awaitable[Any]]) -> Any:
    settings = Settings.from_env()
    with schema_ready_url(args, settings) as dsn:

        async def go() -> Any:
            async with Database(dsn, min_size=1, max_size=1, application_name="qtg-token") as db:
                return await fn(db)

        try:
            return trio.run(go), describe_dsn(dsn)
        except ServiceError as exc:
            raise CommandError(exc.message) from None


def run_create(args: argparse.Namespace) -> int:
    row, where = _with_db(
        args, lambda db: tokens.create_token(db, name=args.name, role=args.role, actor=_actor())
    )
    print(
        f"{where}: token for {row['name']} ({row['role']}) created; it is shown once, "
        "store it now:",
        file=sys.stderr,
    )
    print(row["token"], flush=True)
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    row, where = _with_db(args, lambda db: tokens.revoke_token(db, name=args.name, actor=_actor()))
    print(f"{where}: token of {row['name']} ({row['role']}) revoked")
    return 0


def run_list(args: argparse.Namespace) -> int:
    rows, _ = _with_db(args, lambda db: tokens.list_tokens(db, include_revoked=args.all))
    print(f"{'NAME':<24} {'ROLE':<9} {'CREATED':<20} {'LAST USED':<20} REVOKED")
    for row in rows:
        print(
            f"{row['name']:<24} {row['role']:<9} {_when(row['created_at']):<20} "
            f"{_when(row['last_used_at']):<20} {_when(row['revoked_at'])}"
        )
    return 0


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"
