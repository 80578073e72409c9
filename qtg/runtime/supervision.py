"""Supervision groups (reference: "Supervision semantics"), as trio nurseries.

- core group: an abnormal exit of a core worker — an exception that escaped
  its loop, or a return, since a worker's loop never returns — cancels every
  worker, and `run_worker_groups` raises `CoreWorkerFailed` naming the worker
  and the error, after reporting it through `on_crash` (its heartbeat ends
  `crashed`). The launcher turns that into one log line and a non-zero
  exit. The two conditional reapers join this group when enabled, so their
  failure is fatal, not silently swallowed.
- sidecar group: each sidecar is wrapped; a crash is logged, reported through
  `on_crash` (the launcher marks its heartbeat `crashed`), and every
  other worker, core or sidecar, runs on.
- shutdown: cancelling the caller's scope cancels every worker; each loop's
  in-flight transaction rolls back as the cancellation unwinds through
  `db.transaction()`, and `run_worker_groups` returns once all have ended.

Errors *inside* a worker's loop never reach this module: run_loop logs them,
backs off and goes on (reference: "Retry / backoff / per-iteration error
handling inside run_loop() is preserved as-is").
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

import trio

from qtg.domain.redaction import describe_error

log = logging.getLogger("qtg.runtime.supervision")

WorkerFn = Callable[[], Awaitable[None]]
CrashHandler = Callable[[str, BaseException], Awaitable[None]]

#: How long reporting a sidecar crash (a heartbeat write) may take.
CRASH_REPORT_SECONDS = 5.0


class WorkerExited(RuntimeError):
    """A worker returned: its loop runs until cancelled, so returning is abnormal."""


class CoreWorkerFailed(Exception):
    """A core worker exited abnormally; the core group (and the runtime) stops."""

    def __init__(self, worker: str, error: BaseException) -> None:
        super().__init__(f"core worker {worker} failed: {describe_error(error)}")
        self.worker = worker
        self.error = error


async def run_worker_groups(
    core_workers: Mapping[str, WorkerFn],
    sidecar_workers: Mapping[str, WorkerFn],
    *,
    on_crash: CrashHandler | None = None,
) -> None:
    """Run both groups until cancelled; raise CoreWorkerFailed if a core worker fails.

    `on_crash` records any worker's abnormal exit (the launcher marks its
    heartbeat `crashed`): a sidecar's, after which the others go on, and a core
    worker's, before the runtime stops — so the row says `crashed`, not the
    `stopped` its loop wrote while being cancelled.
    """
    try:
        async with trio.open_nursery() as nursery:
            for name, fn in sidecar_workers.items():
                nursery.start_soon(_sidecar, name, fn, on_crash, name=f"sidecar:{name}")
            for name, fn in core_workers.items():
                nursery.start_soon(_core, name, fn, on_crash, name=f"core:{name}")
    except BaseExceptionGroup as group:
        first = _first_core_failure(group)
        if first is None:
            raise
        raise first from None


async def _core(name: str, fn: WorkerFn, on_crash: CrashHandler | None) -> None:
    try:
        await fn()
    except Exception as exc:
        error = _leaf(exc)
        await _report(name, error, on_crash)
        raise CoreWorkerFailed(name, error) from exc
    error = WorkerExited(f"worker {name} returned")
    await _report(name, error, on_crash)
    raise CoreWorkerFailed(name, error)


async def _sidecar(name: str, fn: WorkerFn, on_crash: CrashHandler | None) -> None:
    try:
        await fn()
        error: BaseException = WorkerExited(f"worker {name} returned")
    except Exception as exc:
        error = _leaf(exc)
    log.error(
        f"sidecar worker {name} crashed; the other workers go on: {describe_error(error)}",
        extra={"worker": name, "group": "sidecar", "error": describe_error(error)},
        exc_info=error if not isinstance(error, WorkerExited) else None,
    )
    await _report(name, error, on_crash)


async def _report(name: str, error: BaseException, on_crash: CrashHandler | None) -> None:
    """Record a crash, bounded; a failure to record is logged, never raised."""
    if on_crash is None:
        return
    with trio.move_on_after(CRASH_REPORT_SECONDS):
        try:
            await on_crash(name, error)
        except Exception as exc:
            log.warning(
                "could not record the worker crash",
                extra={"worker": name, "error": describe_error(exc)},
            )


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _first_core_failure(group: BaseExceptionGroup) -> CoreWorkerFailed | None:
    matched, _rest = group.split(CoreWorkerFailed)
    if matched is None:
        return None
    leaf = _leaf(matched)
    return leaf if isinstance(leaf, CoreWorkerFailed) else None
