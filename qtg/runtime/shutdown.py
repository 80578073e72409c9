"""How a runtime stops: signals become a cancellation, a watchdog cancels statements
that hold the exit up, and the reason for ending becomes one log line and an exit code.
"""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass
from typing import Any

import trio

from qtg.config import ConfigError
from qtg.db import session_params, sql_family
from qtg.db.migrate import MigrationError
from qtg.domain.redaction import describe_error
from qtg.runtime.errors import StartupError
from qtg.runtime.registry import WorkerLoadError
from qtg.runtime.supervision import CoreWorkerFailed

log = logging.getLogger("qtg.runtime")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2

#: After a signal, how long statements may run on before they are cancelled.
SHUTDOWN_GRACE_SECONDS = 2.0

SQL = sql_family("runtime", "cancel_statements")


def exit_code(exc: BaseException) -> int:
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
class Shutdown:
    """What the shutdown watchdog needs to find this process's statements."""

    application_name: str
    dsn: str | None = None


async def stop_on_signal(signals: Any, scope: trio.CancelScope, shutdown: Shutdown) -> None:
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
