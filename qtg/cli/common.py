"""What every `qtg` subcommand shares: where the database is, and how errors read.

The database comes from `--database-url`, else MG_DATABASE_URL, else the
embedded server in MG_EMBEDDED_DATA_DIR, which is started for the command and
stopped after it (left running if a runtime is using it).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

from qtg.config import ConfigError, Settings
from qtg.db.embedded import EmbeddedPostgresError, embedded_database
from qtg.db.migrate import MigrationError, check, migrate
from qtg.domain.redaction import dsn_secrets, redact


class CommandError(RuntimeError):
    """A subcommand cannot go on; the message says why (printed as one line)."""


#: Errors that end a command with one clear line and exit code 2.
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError,
    MigrationError,
    EmbeddedPostgresError,
    CommandError,
    psycopg.Error,
    OSError,
)


def add_database_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        metavar="DSN",
        help="PostgreSQL DSN (default: MG_DATABASE_URL, else the embedded database "
        "in MG_EMBEDDED_DATA_DIR)",
    )


@contextmanager
def database_url(args: argparse.Namespace, settings: Settings) -> Iterator[str]:
    """The DSN the command works on, with the embedded server up while it runs."""
    explicit = getattr(args, "database_url", None) or settings.database_url
    if explicit:
        yield explicit
        return
    with embedded_database(Path(settings.embedded_data_dir)) as dsn:
        yield dsn


@contextmanager
def schema_ready_url(args: argparse.Namespace, settings: Settings) -> Iterator[str]:
    """`database_url`, with the schema a command reads and writes in place.

    The embedded database is migrated here, as the runtime migrates it at every start:
    `qtg token create` is the docs' first step on a fresh machine, before any start.
    An external database is only checked (the runtime migrates it only when asked): a
    pending migration ends the command with one line naming `qtg migrate`, instead of
    `relation "api_tokens" does not exist`.
    """
    external = bool(getattr(args, "database_url", None) or settings.database_url)
    with database_url(args, settings) as dsn:
        if not external:
            migrate(dsn)
        else:
            pending = check(dsn).pending
            if pending:
                raise CommandError(
                    f"{describe_dsn(dsn)} is not migrated (pending: {', '.join(pending)}):"
                    " run `qtg migrate` first, or start the runtime with --migrate"
                )
        yield dsn


def describe_dsn(dsn: str) -> str:
    """`user@host:port/dbname`, for messages: a DSN's password never reaches a terminal.

    A Unix-socket host (a directory, as the embedded database's) is named by
    its socket file, `user@/dir/.s.PGSQL.5432 (socket)/dbname`: that server has
    no TCP port, and `host:5432` sent people looking for one (issue 26).
    """
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<unparseable database URL>"
    host = params.get("host") or "localhost"
    port = params.get("port")
    user = params.get("user")
    if str(host).startswith(("/", "@")):
        where = f"{str(host).rstrip('/')}/.s.PGSQL.{port or 5432} (socket)"
    else:
        where = f"{host}:{port}" if port else str(host)
    return f"{f'{user}@' if user else ''}{where}/{params.get('dbname') or user or ''}"


def scrub(text: str, *dsns: str | None) -> str:
    """`text` with the passwords of `dsns`, and anything shaped like a password, masked."""
    return redact(text, dsn_secrets(*dsns))


def error_line(exc: BaseException, args: argparse.Namespace) -> str:
    """One line describing `exc`, with no password in it."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = "; ".join(lines[:2]) if lines else type(exc).__name__
    if isinstance(exc, psycopg.OperationalError):
        text = f"cannot reach the database: {text}"
    return scrub(text, getattr(args, "database_url", None), os.environ.get("MG_DATABASE_URL"))
