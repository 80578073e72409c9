"""What a runtime serves beside its workers: the API (its socket bound before
anything else happens, its own pool), or `/metrics` alone with `--workers-only`.

An extra service is `async def serve(runtime, task_status)`: it calls
`task_status.started()` once ready (so the readiness line is true), then runs until
cancelled, in the runtime's nursery.
"""

from __future__ import annotations

import argparse
import errno
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from qtg.config import Settings
from qtg.db import Database
from qtg.runtime.errors import StartupError

if TYPE_CHECKING:
    from qtg.runtime.assembly import Runtime

#: An extra service runs in the runtime's nursery beside the workers:
#: `async def serve(runtime, task_status)` calls `task_status.started()` once
#: it is ready (so the readiness line is true), then runs until cancelled.
ExtraService = Callable[..., Awaitable[None]]


def serves_api(args: argparse.Namespace) -> bool:
    return not getattr(args, "workers_only", False)


def extra_services(runtime: Runtime) -> list[tuple[str, ExtraService]]:
    """The services started beside the workers: the API, unless --workers-only."""
    if not serves_api(runtime.args):
        if runtime.settings.metrics_port is not None:
            return [("qtg.metrics", serve_metrics_slot)]
        return []
    return [("qtg.api", serve_api_slot)]


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


async def serve_api_slot(runtime: Runtime, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    from qtg.api import serve_api

    await serve_api(
        runtime.api_ctx or runtime.ctx,
        runtime.hub,
        runtime.settings,
        sock=runtime.api_socket,
        metrics=runtime.metrics,
        task_status=task_status,
    )


async def serve_metrics_slot(runtime: Runtime, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
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
