"""The database a runtime starts on: the embedded server's life, migrations, and the
checks made on the database before the runtime says ready (autovacuum, replication
durability, the audit chain's key).

`database_for` starts the embedded PostgreSQL when `MG_DATABASE_URL` is unset (always
migrated) or checks an external one (migrated only with `--migrate` or
`MG_MIGRATE_ON_START=true`); every failure is a `StartupError` naming what is wrong.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from typing import Any

import psycopg
import trio

from qtg.config import Settings
from qtg.db import Database, sql_family
from qtg.db.migrate import check, migrate
from qtg.domain.redaction import describe_error
from qtg.runtime.errors import StartupError
from qtg.services.audit import (
    UnkeyedChainError,
    adopt_unkeyed_chain,
    audit_keys,
    check_chain_extendable,
    with_embedded_key,
)
from qtg.services.durability import DurabilityWatch
from qtg.services.metrics import RuntimeMetrics
from qtg.services.statistics import CHECK_SECONDS, refresh_statistics

log = logging.getLogger("qtg.runtime")

SQL = sql_family("runtime", "autovacuum")


async def database_for(settings: Settings, args: argparse.Namespace) -> tuple[str, Any]:
    """The DSN to use, migrated as the settings say; the embedded server when we started one."""
    if settings.database_url is None:
        from qtg.db.embedded import DEFAULT_DATABASE, EmbeddedPostgres, EmbeddedPostgresError

        embedded = EmbeddedPostgres(settings.embedded_data_dir)
        try:
            await trio.to_thread.run_sync(embedded.start)
            dsn = await trio.to_thread.run_sync(embedded.ensure_database, DEFAULT_DATABASE)
        except BaseException as exc:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(embedded.stop)
            if isinstance(exc, EmbeddedPostgresError):
                raise StartupError(str(exc)) from exc
            raise
        log.info(
            # a server another runtime started (or left running) is used, not started
            "embedded PostgreSQL already running: using it"
            if embedded.adopted
            else "embedded PostgreSQL started",
            extra={"data_dir": str(embedded.data_dir), "pid": embedded.pid},
        )
        try:
            await migrate_database(dsn)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(embedded.stop)
            raise
        return dsn, embedded
    dsn = settings.database_url
    if args.migrate or settings.migrate_on_start:
        await migrate_database(dsn)
        return dsn, None
    status = await blocking(check, dsn)
    if status.pending:
        raise StartupError(
            f"the database has pending migrations ({', '.join(status.pending)}); "
            "run with --migrate, set MG_MIGRATE_ON_START=true, or run `qtg migrate`"
        )
    return dsn, None


async def migrate_database(dsn: str) -> None:
    applied = await blocking(migrate, dsn)
    if applied:
        log.info("migrations applied", extra={"applied": applied})


async def blocking(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a blocking database call in a thread; connection errors become StartupError."""
    import psycopg

    try:
        return await trio.to_thread.run_sync(fn, *args)
    except psycopg.OperationalError as exc:
        raise StartupError(f"cannot reach the database: {describe_error(exc)}") from exc


async def open_pool(db: Database) -> None:
    try:
        await db.open()
    except Exception as exc:  # qtg.db.PoolTimeout and friends
        raise StartupError(
            f"cannot open the database pool within {db.connect_timeout:g} s: {describe_error(exc)}"
        ) from exc


async def warn_if_autovacuum_off(db: Database) -> bool:
    """One warning line when the database's autovacuum is off (issue 29): the
    claims are written to keep their index walks on stale statistics, but
    other queries, and the tables' bloat, still need it. True if it warned."""
    if await db.fetchval(SQL.autovacuum):
        return False
    log.warning(
        "the database's autovacuum is off (autovacuum or track_counts): planner statistics "
        "and dead rows are left to manual ANALYZE/VACUUM; turn it on for a long-running runtime"
    )
    return True


async def check_durability_at_start(db: Database, watch: DurabilityWatch, *, warn: bool) -> None:
    """Read the replication state once before ready (issue 27); one warning line
    when a commit would not survive the loss of the primary (not for the embedded
    database, which has no standby by design)."""
    state = await watch.check(db)
    if warn and not state.synchronous:
        log.warning(
            "commits are not synchronously replicated: a committed write-ahead row can be "
            "lost in a failover (docs/operations/deployment.md)",
            extra={
                "reason": state.reason,
                "require_synchronous_replication": watch.require_synchronous,
            },
        )


async def watch_durability(
    db: Database, watch: DurabilityWatch, metrics: RuntimeMetrics, interval: float
) -> None:
    """Re-read the replication state every `interval` s (the gauges follow each
    reading through the watch's observer); unknown (-1) while unreadable."""
    while True:
        await trio.sleep(interval)
        try:
            await watch.check(db)
        except psycopg.Error as exc:
            log.debug("durability check failed", extra={"error": describe_error(exc)})
            metrics.durability(None, 0, watch.holding)


async def watch_statistics(db: Database, interval: float = CHECK_SECONDS) -> None:
    """Refresh the statistics of the tables that grew, every `interval` s
    (qtg.services.statistics says why); a failed round is logged and retried."""
    while True:
        await trio.sleep(interval)
        try:
            await refresh_statistics(db)
        except psycopg.Error as exc:
            log.warning("statistics refresh failed", extra={"error": describe_error(exc)})


def embedded_audit_key(settings: Settings) -> tuple[Settings, bool]:
    """The embedded database's default is a keyed audit chain (issue 26): the key is
    made in its data folder once the server has created that folder (its owner
    and mode are the embedded server's business). True when it was made now."""
    try:
        existing = with_embedded_key(settings, create=False)
        if existing is not settings:  # the folder already has its key
            return existing, False
        keyed = with_embedded_key(settings, create=True)  # unchanged if a key is configured
    except OSError as exc:
        raise StartupError(f"cannot create the embedded audit key: {exc}") from None
    return keyed, keyed is not settings


async def adopt_for_new_embedded_key(db: Database, settings: Settings) -> None:
    """A data folder from before the embedded key existed holds an unkeyed chain.

    The key was generated just now, next to those rows and readable by whoever
    can read them, so refusing to start would protect nothing: the chain is
    adopted (a keyed audit.chain_adopted row) and the log says so.
    """
    keys = audit_keys(settings)
    assert keys is not None
    adopted = await adopt_unkeyed_chain(db, keys, actor="qtg-runtime:embedded-key")
    if adopted is not None:
        log.warning(
            "the embedded audit chain was unkeyed; it goes on keyed with the new key",
            extra={"adopted_head_id": adopted},
        )


async def check_audit_chain(db: Database, settings: Settings) -> None:
    """Refuse to start a keyed promoter on a chain whose newest row is unkeyed (issue 26)."""
    try:
        await check_chain_extendable(db, audit_keys(settings))
    except UnkeyedChainError as exc:
        raise StartupError(str(exc)) from None
