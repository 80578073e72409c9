"""`bin/qtg-runtime`: settings → database → migrations → providers → workers, one trio.run.

Start-up, in order, each step failing with one clear line:
1. Settings from the environment; a bad value exits 2 naming the variable.
2. The database. `MG_DATABASE_URL` unset means the embedded PostgreSQL in
   `MG_EMBEDDED_DATA_DIR` (database `qtg`), always migrated. An external
   database is migrated only with `--migrate` or `MG_MIGRATE_ON_START=true`;
   otherwise the runtime refuses to start while migrations are pending or an
   applied file was edited, naming the file.
3. The pool (`Database`) and the LISTEN hub (`MG_LISTEN_DATABASE_URL`, else
   the same DSN: pgbouncer in transaction mode cannot carry LISTEN).
4. Providers (`qtg.providers.registry.build_registry`).
5. Workers, when `MG_WORKERS_ENABLED`: resolved by the registry (the set is
   logged, with the reason for every skipped worker), imported, heartbeat
   rows seeded, then supervised in core/sidecar groups.
6. Extra services (`extra_services`, the API server's slot) in the same nursery.
Then one `qtg runtime ready` line.

Where each part lives: this module is the sequence (arguments, settings, `serve`);
qtg/runtime/database.py the embedded server, migrations and the database checks;
qtg/runtime/assembly.py steps 3 to 6 (`start_runtime`); qtg/runtime/serving.py the API
slot; qtg/runtime/shutdown.py signals, the statement watchdog and exit codes.

Before step 2 the API's port is bound (`bind_api`): a port in use ends
start-up with one line naming MG_API_HOST:MG_API_PORT, before anything changed.

Every exit path stops cleanly — normal end, SIGINT/SIGTERM/SIGHUP (turned into a
cancellation by `trio.open_signal_receiver`, exit 0), a core worker failure
(exit 1), a start-up error (exit 1), an unexpected exception (exit 1): the
nursery unwinds, transactions roll back, the pool closes and the embedded
PostgreSQL is stopped in a `finally`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence

import trio

from qtg.config import ConfigError, Settings
from qtg.db import Database
from qtg.domain.redaction import describe_error
from qtg.runtime.assembly import (
    ProvidersFactory,
    WorkerFactory,
    build_worker,
    default_providers,
    start_runtime,
)
from qtg.runtime.database import (
    adopt_for_new_embedded_key,
    database_for,
    embedded_audit_key,
    open_pool,
    warn_if_autovacuum_off,
)
from qtg.runtime.errors import StartupError
from qtg.runtime.logs import configure_logging, dsn_secrets
from qtg.runtime.registry import WORKERS, WorkerSpec
from qtg.runtime.serving import api_database, bind_api, serves_api
from qtg.runtime.shutdown import (
    EXIT_CONFIG,
    EXIT_FAILURE,
    EXIT_OK,
    Shutdown,
    exit_code,
    stop_on_signal,
)

log = logging.getLogger("qtg.runtime")


def build_parser() -> argparse.ArgumentParser:
    """Every command-line flag of the runtime, in one place.

    The API server adds `--api-only` / `--workers-only` here.
    """
    parser = argparse.ArgumentParser(
        prog="qtg-runtime",
        description="Run qtg's workers (and services) against PostgreSQL. "
        "Configuration comes from MG_* environment variables.",
    )
    parser.add_argument(
        "--migrate",
        action="store_true",
        help="apply pending migrations to an external database (MG_DATABASE_URL) at start-up; "
        "the embedded database is always migrated",
    )
    parser.add_argument(
        "--seed-demo",
        action="store_true",
        help="register the demo templates on the sandbox provider at start-up (idempotent)",
    )
    roles = parser.add_mutually_exclusive_group()
    roles.add_argument(
        "--api-only",
        action="store_true",
        help="serve the API (MG_API_HOST:MG_API_PORT) without running any worker",
    )
    roles.add_argument(
        "--workers-only", action="store_true", help="run the workers without serving the API"
    )
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    specs: Sequence[WorkerSpec] = WORKERS,
    providers_factory: ProvidersFactory = default_providers,
    worker_factory: WorkerFactory = build_worker,
) -> int:
    """Run the runtime; return the process exit code.

    The keyword arguments exist for tests and embedding: a test runs this
    exact start-up and shutdown with its own workers.
    """
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"qtg-runtime: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    configure_logging(settings.log_level, settings.log_format, secrets=_secrets(settings))
    if args.api_only:
        settings = settings.replace(workers_enabled=False)  # the API alone: no worker runs
    problem = settings.callback_secret_problem()
    if problem is not None:  # before anything starts: one line, non-zero
        print(f"qtg-runtime: {problem}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    try:
        return trio.run(
            functools.partial(
                serve,
                settings,
                args,
                specs=specs,
                providers_factory=providers_factory,
                worker_factory=worker_factory,
            )
        )
    except KeyboardInterrupt:  # a Ctrl-C before the signal receiver was installed
        return EXIT_OK


def _secrets(settings: Settings) -> list[str]:
    values = [
        str(getattr(settings, f.name))
        for f in dataclasses.fields(settings)
        if f.metadata.get("secret") and getattr(settings, f.name)
    ]
    return values + dsn_secrets(settings.database_url, settings.listen_database_url)


async def serve(
    settings: Settings,
    args: argparse.Namespace,
    *,
    specs: Sequence[WorkerSpec] = WORKERS,
    providers_factory: ProvidersFactory = default_providers,
    worker_factory: WorkerFactory = build_worker,
) -> int:
    """The whole life of the runtime inside one trio.run; returns the exit code."""
    embedded = None
    db: Database | None = None
    api_db: Database | None = None
    closers: list[Callable[[], Awaitable[None]]] = []  # run on the way out, before the pool
    code = EXIT_OK
    shutdown = Shutdown(application_name=f"qtg-runtime:{os.getpid()}")
    try:
        api_socket = bind_api(settings, args)
    except StartupError as exc:
        return exit_code(exc)
    # SIGHUP (the terminal closed) stops the runtime like SIGTERM: the embedded
    # PostgreSQL is stopped too, instead of outliving its terminal.
    stop_signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    with trio.open_signal_receiver(*stop_signals) as signals:
        try:
            async with trio.open_nursery() as guard:
                runtime_scope = trio.CancelScope()
                guard.start_soon(stop_on_signal, signals, runtime_scope, shutdown)
                with runtime_scope:
                    async with trio.open_nursery() as nursery:
                        dsn, embedded = await database_for(settings, args)
                        new_key = False
                        if embedded is not None:
                            settings, new_key = embedded_audit_key(settings)
                        shutdown.dsn = dsn
                        db = Database(
                            dsn,
                            min_size=settings.db_pool_min_size,
                            max_size=settings.db_pool_max_size,
                            checkout_timeout=settings.db_pool_timeout_seconds,
                            statement_timeout_ms=settings.statement_timeout_ms,
                            callback_max_attempts=settings.callback_max_attempts,
                            application_name=shutdown.application_name,
                            synchronous_commit=settings.database_synchronous_commit,
                            pgbouncer=settings.database_pgbouncer,
                        )
                        await open_pool(db)
                        await warn_if_autovacuum_off(db)
                        if new_key:
                            await adopt_for_new_embedded_key(db, settings)
                        if serves_api(args):
                            api_db = api_database(settings, dsn, shutdown.application_name)
                            await open_pool(api_db)
                        await start_runtime(
                            settings,
                            args,
                            dsn,
                            db,
                            nursery,
                            specs,
                            providers_factory,
                            worker_factory,
                            closers,
                            embedded=embedded is not None,
                            api_db=api_db,
                            api_socket=api_socket,
                        )
                guard.cancel_scope.cancel()  # stopped: the signal watcher is done too
        except Exception as exc:  # an ExceptionGroup from the nursery, or a plain error
            code = exit_code(exc)
        finally:
            if api_socket is not None:
                api_socket.close()  # Hypercorn served a duplicate; this one is ours
            with trio.CancelScope(shield=True):
                for closer in reversed(closers):
                    try:
                        await closer()
                    except Exception as exc:
                        log.warning(
                            "releasing a provider failed", extra={"error": describe_error(exc)}
                        )
                for pool in (api_db, db):
                    if pool is None:
                        continue
                    try:
                        await pool.close()
                    except Exception as exc:  # still stop the embedded server below
                        log.warning("closing the pool failed", extra={"error": describe_error(exc)})
                if embedded is not None:
                    try:
                        outcome = await trio.to_thread.run_sync(embedded.stop)
                        log.info(embedded_stop_message(outcome))
                    except Exception as exc:
                        log.error(f"embedded PostgreSQL did not stop: {describe_error(exc)}")
                        code = code or EXIT_FAILURE
    log.info("qtg runtime stopped", extra={"exit_code": code})
    return code


def embedded_stop_message(outcome: str) -> str:
    """The log line for what stopping the embedded server did: "stopped" only when
    this runtime stopped it (a second runtime on the same .qtg leaves it to the first)."""
    from qtg.db.embedded import ALREADY_GONE, LEFT_RUNNING, STOPPED

    return {
        STOPPED: "embedded PostgreSQL stopped",
        LEFT_RUNNING: "embedded PostgreSQL left running: another process still uses it",
        ALREADY_GONE: "embedded PostgreSQL was already stopped",
    }.get(outcome, f"embedded PostgreSQL: {outcome}")


if __name__ == "__main__":
    sys.exit(main())
