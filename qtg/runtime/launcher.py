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
import errno
import functools
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import trio

from qtg.config import ConfigError, Settings
from qtg.db import Database, ListenHub, session_params, sql_family
from qtg.db.migrate import MigrationError, check, migrate
from qtg.domain.redaction import describe_error
from qtg.runtime.heartbeats import Heartbeat
from qtg.runtime.logs import configure_logging, dsn_secrets
from qtg.runtime.loop import run_loop
from qtg.runtime.registry import (
    WORKERS,
    LoadedWorker,
    ResolvedWorker,
    WorkerLoadError,
    WorkerSpec,
    enabling_variable,
    load,
    resolve_workers,
    running,
    skipped_by_default,
    skipped_with_warning,
    validate,
)
from qtg.runtime.supervision import CoreWorkerFailed, WorkerFn, run_worker_groups
from qtg.services import heartbeats as heartbeat_rows
from qtg.services.audit import (
    UnkeyedChainError,
    adopt_unkeyed_chain,
    audit_keys,
    check_chain_extendable,
    with_embedded_key,
)
from qtg.services.context import ServiceContext
from qtg.services.durability import DurabilityWatch
from qtg.services.metrics import RuntimeMetrics

log = logging.getLogger("qtg.runtime")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2

#: How long the LISTEN connection may take to open at start-up.
HUB_START_TIMEOUT_SECONDS = 30.0
#: After a signal, how long statements may run on before they are cancelled.
SHUTDOWN_GRACE_SECONDS = 2.0

SQL = sql_family("runtime", "cancel_statements", "autovacuum")


class StartupError(RuntimeError):
    """The runtime cannot start; the message says why (one line, no secrets)."""


# ------------------------------------------------------------------ arguments


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


# ------------------------------------------------------------------ the runtime


@dataclass
class Runtime:
    """What the runtime's services share; handed to every extra service."""

    settings: Settings
    args: argparse.Namespace
    db: Database
    hub: ListenHub
    providers: Any
    ctx: ServiceContext
    process: heartbeat_rows.ProcessId
    #: The API's context: the same settings and providers, its own pool (issue 17:
    #: requests must never wait for, or make workers wait for, a connection).
    api_ctx: ServiceContext | None = None
    workers: list[ResolvedWorker] = dataclasses.field(default_factory=list)
    #: The API's listening socket, bound before anything else happened.
    api_socket: socket.socket | None = None
    #: This process's Prometheus registry and instruments (GET /metrics).
    metrics: RuntimeMetrics = dataclasses.field(default_factory=RuntimeMetrics)

    @property
    def instance_id(self) -> str:
        return self.process.instance_id


#: An extra service runs in the runtime's nursery beside the workers:
#: `async def serve(runtime, task_status)` calls `task_status.started()` once
#: it is ready (so the readiness line is true), then runs until cancelled.
ExtraService = Callable[..., Awaitable[None]]
ProvidersFactory = Callable[[Settings, Database], Any]
WorkerFactory = Callable[[LoadedWorker, Runtime], WorkerFn]


def serves_api(args: argparse.Namespace) -> bool:
    return not getattr(args, "workers_only", False)


def extra_services(runtime: Runtime) -> list[tuple[str, ExtraService]]:
    """The services started beside the workers: the API, unless --workers-only."""
    if not serves_api(runtime.args):
        if runtime.settings.metrics_port is not None:
            return [("qtg.metrics", _serve_metrics)]
        return []
    return [("qtg.api", _serve_api)]


def api_database(settings: Settings, dsn: str, application_name: str) -> Database:
    """The API's own pool, sized by MG_API_DB_POOL_* and quick to give up."""
    return Database(
        dsn,
        min_size=settings.api_db_pool_min_size,
        max_size=settings.api_db_pool_max_size,
        checkout_timeout=settings.api_db_pool_timeout_seconds,
        statement_timeout_ms=settings.statement_timeout_ms,
        callback_max_attempts=settings.callback_max_attempts,
        application_name=f"{application_name}:api",
        synchronous_commit=settings.database_synchronous_commit,
        pgbouncer=settings.database_pgbouncer,
    )


async def _serve_api(runtime: Runtime, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    from qtg.api import serve_api

    await serve_api(
        runtime.api_ctx or runtime.ctx,
        runtime.hub,
        runtime.settings,
        sock=runtime.api_socket,
        metrics=runtime.metrics,
        task_status=task_status,
    )


async def _serve_metrics(runtime: Runtime, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    from qtg.api.server import serve_metrics_only

    assert runtime.settings.metrics_port is not None
    await serve_metrics_only(
        runtime.ctx,
        runtime.metrics,
        runtime.settings,
        runtime.settings.metrics_port,
        task_status=task_status,
    )


def bind_api(settings: Settings, args: argparse.Namespace) -> socket.socket | None:
    """Bind MG_API_HOST:MG_API_PORT first, before the database is touched.

    A port already in use then stops start-up with one line naming the
    setting, and nothing (embedded server, migrations, demo seeding) has
    happened yet. Hypercorn is handed the bound socket.
    """
    if getattr(args, "workers_only", False):
        return None
    host, port = settings.api_host, settings.api_port
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise StartupError(
            f"MG_API_HOST:MG_API_PORT {host}:{port}: {exc.strerror or exc}"
        ) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(f"MG_API_HOST:MG_API_PORT {host}:{port} is already in use") from None
        raise StartupError(
            f"MG_API_HOST:MG_API_PORT {host}:{port}: {exc.strerror or exc}"
        ) from None
    return sock


def default_providers(settings: Settings, db: Database) -> Any:
    from qtg.providers.registry import build_registry

    return build_registry(settings, db)


def build_worker(worker: LoadedWorker, runtime: Runtime) -> WorkerFn:
    """One worker: its service bound to the context, in run_loop, with wake-up and heartbeat."""
    resolved, spec, settings = worker.resolved, worker.resolved.spec, runtime.settings
    assert resolved.interval is not None
    wakeup = (
        runtime.hub.subscribe(spec.channel)
        if spec.channel is not None and settings.reactive
        else None
    )
    row = heartbeat_rows.HeartbeatRow(resolved.name, resolved.group, resolved.interval)
    heartbeat = Heartbeat(
        resolved.name,
        functools.partial(
            heartbeat_rows.write_beat,
            runtime.db,
            settings.network_class,
            runtime.process,
            row,
        ),
        min_interval=settings.heartbeat_min_interval_seconds,
    )
    next_due = (
        functools.partial(worker.next_due, runtime.ctx) if worker.next_due is not None else None
    )
    return functools.partial(
        run_loop,
        resolved.name,
        functools.partial(worker.service, runtime.ctx),
        resolved.interval,
        resolved.jitter,
        wakeup=wakeup,
        next_due=next_due,
        reactive=settings.reactive,
        heartbeat=heartbeat,
        drain=spec.drain,
        coalesce=spec.coalesce_seconds,
        metrics=runtime.metrics.worker(resolved.name),
    )


# ------------------------------------------------------------------ entry point


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
    shutdown = _Shutdown(application_name=f"qtg-runtime:{os.getpid()}")
    try:
        api_socket = bind_api(settings, args)
    except StartupError as exc:
        return _exit_code(exc)
    # SIGHUP (the terminal closed) stops the runtime like SIGTERM: the embedded
    # PostgreSQL is stopped too, instead of outliving its terminal.
    stop_signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    with trio.open_signal_receiver(*stop_signals) as signals:
        try:
            async with trio.open_nursery() as guard:
                runtime_scope = trio.CancelScope()
                guard.start_soon(_stop_on_signal, signals, runtime_scope, shutdown)
                with runtime_scope:
                    async with trio.open_nursery() as nursery:
                        dsn, embedded = await _database(settings, args)
                        new_key = False
                        if embedded is not None:
                            settings, new_key = _embedded_audit_key(settings)
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
                        await _open(db)
                        await warn_if_autovacuum_off(db)
                        if new_key:
                            await _adopt_for_new_embedded_key(db, settings)
                        if serves_api(args):
                            api_db = api_database(settings, dsn, shutdown.application_name)
                            await _open(api_db)
                        await _run(
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
            code = _exit_code(exc)
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
                        await trio.to_thread.run_sync(embedded.stop)
                        log.info("embedded PostgreSQL stopped")
                    except Exception as exc:
                        log.error(f"embedded PostgreSQL did not stop: {describe_error(exc)}")
                        code = code or EXIT_FAILURE
    log.info("qtg runtime stopped", extra={"exit_code": code})
    return code


def _exit_code(exc: BaseException) -> int:
    """Log why the runtime ends (one line) and return the exit code."""
    leaf = _leaf(exc)
    if isinstance(leaf, CoreWorkerFailed):
        log.error(str(leaf), extra={"worker": leaf.worker, "error": describe_error(leaf.error)})
        return EXIT_FAILURE
    if isinstance(leaf, (StartupError, MigrationError, WorkerLoadError)):
        log.error(f"qtg runtime cannot start: {leaf}")
        return EXIT_FAILURE
    if isinstance(leaf, ConfigError):
        log.error(f"qtg runtime cannot start: {leaf}")
        return EXIT_CONFIG
    log.error(f"qtg runtime failed: {describe_error(leaf)}", exc_info=leaf)
    return EXIT_FAILURE


def _leaf(exc: BaseException) -> BaseException:
    """The one error inside the nursery's (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@dataclass
class _Shutdown:
    """What the shutdown watchdog needs to find this process's statements."""

    application_name: str
    dsn: str | None = None


async def _stop_on_signal(signals: Any, scope: trio.CancelScope, shutdown: _Shutdown) -> None:
    """On SIGINT/SIGTERM cancel the runtime; then make sure no statement holds the exit up.

    Cancellation unwinds every task at once, except one waiting on a statement
    in a thread (trio cannot interrupt it; a lock wait could last until
    statement_timeout). If shutdown is still going SHUTDOWN_GRACE_SECONDS
    later, the watchdog asks PostgreSQL to cancel this process's running
    statements; each fails, its transaction rolls back, and the exit goes on.
    This task is itself cancelled as soon as the runtime has stopped.
    """
    async for signum in signals:
        log.info(f"received {signal.Signals(signum).name}; stopping")
        scope.cancel()
        break
    else:
        return
    await trio.sleep(SHUTDOWN_GRACE_SECONDS)
    if shutdown.dsn is None:
        return
    try:
        cancelled = await trio.to_thread.run_sync(
            _cancel_statements, shutdown.dsn, shutdown.application_name
        )
    except Exception as exc:  # the database is gone: nothing is running there either
        log.warning("could not cancel running statements", extra={"error": describe_error(exc)})
        return
    if cancelled:
        log.warning(
            f"cancelled {cancelled} statement(s) still running "
            f"{SHUTDOWN_GRACE_SECONDS:g} s into shutdown"
        )


def _cancel_statements(dsn: str, application_name: str) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=3, **session_params(dsn)) as conn:
        rows = conn.execute(
            SQL.cancel_statements.text, {"application_name": application_name}
        ).fetchall()
    return sum(1 for (cancelled,) in rows if cancelled)


async def _database(settings: Settings, args: argparse.Namespace) -> tuple[str, Any]:
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
            "embedded PostgreSQL started",
            extra={"data_dir": str(embedded.data_dir), "pid": embedded.pid},
        )
        try:
            await _migrate(dsn)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(embedded.stop)
            raise
        return dsn, embedded
    dsn = settings.database_url
    if args.migrate or settings.migrate_on_start:
        await _migrate(dsn)
        return dsn, None
    status = await _blocking(check, dsn)
    if status.pending:
        raise StartupError(
            f"the database has pending migrations ({', '.join(status.pending)}); "
            "run with --migrate, set MG_MIGRATE_ON_START=true, or run `qtg migrate`"
        )
    return dsn, None


async def _migrate(dsn: str) -> None:
    applied = await _blocking(migrate, dsn)
    if applied:
        log.info("migrations applied", extra={"applied": applied})


async def _blocking(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a blocking database call in a thread; connection errors become StartupError."""
    import psycopg

    try:
        return await trio.to_thread.run_sync(fn, *args)
    except psycopg.OperationalError as exc:
        raise StartupError(f"cannot reach the database: {describe_error(exc)}") from exc


async def _open(db: Database) -> None:
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


async def _run(
    settings: Settings,
    args: argparse.Namespace,
    dsn: str,
    db: Database,
    nursery: trio.Nursery,
    specs: Sequence[WorkerSpec],
    providers_factory: ProvidersFactory,
    worker_factory: WorkerFactory,
    closers: list[Callable[[], Awaitable[None]]],
    *,
    embedded: bool,
    api_db: Database | None = None,
    api_socket: socket.socket | None = None,
) -> None:
    hub = ListenHub(settings.listen_database_url or dsn)
    with trio.move_on_after(HUB_START_TIMEOUT_SECONDS) as hub_start:
        await nursery.start(hub.run)
    if hub_start.cancelled_caught:
        raise StartupError(
            f"the LISTEN connection did not open within {HUB_START_TIMEOUT_SECONDS:g} s"
        )
    providers = providers_factory(settings, db)
    if hasattr(providers, "aclose"):
        closers.append(providers.aclose)
    metrics = RuntimeMetrics()
    durability = DurabilityWatch(
        require_synchronous=settings.require_synchronous_replication,
        observer=lambda state, held: metrics.durability(
            state.synchronous, state.synchronous_standbys, held
        ),
    )
    await check_durability_at_start(db, durability, warn=not embedded)
    runtime = Runtime(
        settings=settings,
        args=args,
        db=db,
        hub=hub,
        providers=providers,
        # the workers' context: in-process wake-ups (reactive only) and the metrics
        ctx=ServiceContext(
            db=db,
            settings=settings,
            providers=providers,
            wake=hub.wake if settings.reactive else None,
            metrics=metrics,
            durability=durability,
        ),
        metrics=metrics,
        process=heartbeat_rows.ProcessId.current(),
        api_socket=api_socket,
        api_ctx=ServiceContext(
            db=api_db, settings=settings, providers=providers, durability=durability
        )
        if api_db is not None
        else None,
    )
    nursery.start_soon(
        watch_durability, db, durability, metrics, settings.durability_check_interval_seconds
    )
    if args.seed_demo:
        await _seed_demo(runtime)

    validate(specs)
    runtime.workers = resolve_workers(settings, getattr(providers, "capabilities", ()), specs)
    if any(w.name == "audit_outbox_promoter" for w in running(runtime.workers)):
        await _check_audit_chain(db, settings)
    _log_worker_set(runtime.workers)
    loaded = load(runtime.workers)
    runtime.metrics.describe_process(
        network_class=settings.network_class,
        workers=[w.resolved.name for w in loaded],
        instance=runtime.instance_id,
    )
    if loaded:
        await heartbeat_rows.seed_heartbeats(
            db,
            settings.network_class,
            runtime.process,
            [
                heartbeat_rows.HeartbeatRow(
                    w.resolved.name, w.resolved.group, w.resolved.interval or 0.0
                )
                for w in loaded
            ],
            retention_seconds=settings.heartbeat_retention_seconds,
        )
        core = {
            w.resolved.name: worker_factory(w, runtime)
            for w in loaded
            if w.resolved.group == "core"
        }
        sidecars = {
            w.resolved.name: worker_factory(w, runtime)
            for w in loaded
            if w.resolved.group == "sidecar"
        }
        nursery.start_soon(
            functools.partial(
                run_worker_groups,
                core,
                sidecars,
                on_crash=functools.partial(_record_crash, runtime),
            ),
            name="qtg.runtime_supervision",
        )
    for name, service in extra_services(runtime):
        await nursery.start(service, runtime, name=name)

    log.info(
        "qtg runtime ready",
        extra={
            "workers": [w.resolved.name for w in loaded],
            "reactive": settings.reactive,
            "database": "embedded" if embedded else "external",
            "network_class": settings.network_class,
            "instance_id": runtime.instance_id,
        },
    )


def _embedded_audit_key(settings: Settings) -> tuple[Settings, bool]:
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


async def _adopt_for_new_embedded_key(db: Database, settings: Settings) -> None:
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


async def _check_audit_chain(db: Database, settings: Settings) -> None:
    """Refuse to start a keyed promoter on a chain whose newest row is unkeyed (issue 26)."""
    try:
        await check_chain_extendable(db, audit_keys(settings))
    except UnkeyedChainError as exc:
        raise StartupError(str(exc)) from None


async def _record_crash(runtime: Runtime, worker: str, error: BaseException) -> None:
    await heartbeat_rows.mark_crashed(
        runtime.db,
        runtime.settings.network_class,
        runtime.process,
        worker,
        describe_error(error),
    )


def _log_worker_set(workers: list[ResolvedWorker], env: Mapping[str, str] | None = None) -> None:
    """One line per worker, and one info line for workers that are on by default
    but cannot run here (a warning only when the operator turned one on)."""
    env = os.environ if env is None else env
    defaulted = [w for w in workers if skipped_by_default(w, env)]
    for worker in workers:
        loud = skipped_with_warning(worker) and worker not in defaulted
        level = logging.WARNING if loud else logging.INFO
        log.log(
            level,
            f"worker {worker.describe()}",
            extra={
                "worker": worker.name,
                "group": worker.group,
                "enabled": worker.enabled,
                "reason": worker.reason,
            },
        )
    if defaulted:
        needs = sorted({w.reason.split(", but ", 1)[1] for w in defaulted})
        variables = ", ".join(f"{enabling_variable(w)}=false" for w in defaulted)
        log.info(
            f"{len(defaulted)} worker(s) on by default are skipped: "
            f"{', '.join(w.name for w in defaulted)} ({'; '.join(needs)}). "
            f"To run them, configure a provider that offers what they need (MG_PROVIDERS); "
            f"to silence this line, set {variables}",
            extra={"skipped": [w.name for w in defaulted]},
        )
    log.info("worker set", extra={"running": [w.name for w in running(workers)]})


async def _seed_demo(runtime: Runtime) -> None:
    from qtg.runtime.demo import DEMO_TEMPLATES, seed_demo_templates

    keys = await seed_demo_templates(runtime.db)
    if keys:
        log.info("demo templates registered", extra={"templates": keys})
    else:  # a restart on kept data: say so, rather than log an empty list
        existing = [t["template_key"] for t in DEMO_TEMPLATES]
        log.info("demo templates already registered", extra={"templates": existing})


if __name__ == "__main__":
    sys.exit(main())
