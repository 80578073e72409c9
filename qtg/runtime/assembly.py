"""Assembling a runtime once its database is open: the LISTEN hub, providers, the
durability watch, the shared `Runtime`, the worker set (resolved, logged, loaded,
heartbeat rows seeded, supervised in core/sidecar groups) and the extra services —
then one `qtg runtime ready` line.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from qtg.config import Settings
from qtg.db import Database, ListenHub
from qtg.domain.redaction import describe_error
from qtg.runtime.database import (
    check_audit_chain,
    check_durability_at_start,
    watch_durability,
    watch_statistics,
)
from qtg.runtime.errors import StartupError
from qtg.runtime.heartbeats import Heartbeat
from qtg.runtime.liveness import keep_alive
from qtg.runtime.loop import run_loop
from qtg.runtime.registry import (
    LoadedWorker,
    ResolvedWorker,
    WorkerSpec,
    enabling_variable,
    load,
    resolve_workers,
    running,
    skipped_by_default,
    skipped_with_warning,
    validate,
)
from qtg.runtime.serving import extra_services
from qtg.runtime.supervision import WorkerFn, run_worker_groups
from qtg.services import heartbeats as heartbeat_rows
from qtg.services.context import ServiceContext
from qtg.services.durability import DurabilityWatch
from qtg.services.metrics import RuntimeMetrics

log = logging.getLogger("qtg.runtime")

#: How long the LISTEN connection may take to open at start-up.
HUB_START_TIMEOUT_SECONDS = 30.0


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


ProvidersFactory = Callable[[Settings, Database], Any]
WorkerFactory = Callable[[LoadedWorker, Runtime], WorkerFn]


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


async def start_runtime(
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
    process = heartbeat_rows.ProcessId.current()
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
            instance_id=process.instance_id,
        ),
        metrics=metrics,
        process=process,
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
    # before any worker: every write-ahead names an owner that has beaten (issue 43 item 7)
    await nursery.start(
        keep_alive,
        db,
        process,
        settings.network_class,
        settings.node_recovery_dead_owner_seconds,
        settings.heartbeat_retention_seconds,
    )
    nursery.start_soon(watch_statistics, db)
    if args.seed_demo:
        await seed_demo(runtime)

    validate(specs)
    runtime.workers = resolve_workers(settings, getattr(providers, "capabilities", ()), specs)
    if any(w.name == "audit_outbox_promoter" for w in running(runtime.workers)):
        await check_audit_chain(db, settings)
    log_worker_set(runtime.workers)
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
                on_crash=functools.partial(record_crash, runtime),
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


async def record_crash(runtime: Runtime, worker: str, error: BaseException) -> None:
    await heartbeat_rows.mark_crashed(
        runtime.db,
        runtime.settings.network_class,
        runtime.process,
        worker,
        describe_error(error),
    )


def log_worker_set(workers: list[ResolvedWorker], env: Mapping[str, str] | None = None) -> None:
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


async def seed_demo(runtime: Runtime) -> None:
    from qtg.runtime.demo import DEMO_TEMPLATES, seed_demo_templates

    keys = await seed_demo_templates(runtime.db)
    if keys:
        log.info("demo templates registered", extra={"templates": keys})
    else:  # a restart on kept data: say so, rather than log an empty list
        existing = [t["template_key"] for t in DEMO_TEMPLATES]
        log.info("demo templates already registered", extra={"templates": existing})
