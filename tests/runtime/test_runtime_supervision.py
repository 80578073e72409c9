"""Supervision groups in one process (mock clock); the process-level claims are in
test_runtime_processes.py."""

from __future__ import annotations

import pytest
import trio

from qtg.runtime.supervision import CoreWorkerFailed, WorkerExited, run_worker_groups


class Ticker:
    """A worker that counts ticks until cancelled, and remembers that it was."""

    def __init__(self) -> None:
        self.ticks = 0
        self.cancelled = False

    async def __call__(self) -> None:
        try:
            while True:
                await trio.sleep(1)
                self.ticks += 1
        except trio.Cancelled:
            self.cancelled = True
            raise


def crash_after(seconds: float, error: Exception):
    async def worker() -> None:
        await trio.sleep(seconds)
        raise error

    return worker


async def test_core_failure_cancels_everything_and_names_the_worker(autojump_clock) -> None:
    other_core, sidecar = Ticker(), Ticker()
    with pytest.raises(CoreWorkerFailed) as info:
        await run_worker_groups(
            {"node_dispatcher": other_core, "node_observer": crash_after(3.5, ValueError("bad"))},
            {"callback_dispatcher": sidecar},
        )
    assert info.value.worker == "node_observer"
    assert str(info.value) == "core worker node_observer failed: ValueError: bad"
    assert other_core.cancelled and sidecar.cancelled
    assert other_core.ticks == 3 and trio.current_time() == 3.5


async def test_a_core_worker_that_returns_is_a_failure(autojump_clock) -> None:
    async def returns() -> None:
        await trio.sleep(1)

    with pytest.raises(CoreWorkerFailed) as info:
        await run_worker_groups({"node_recovery": returns}, {})
    assert isinstance(info.value.error, WorkerExited)


async def test_sidecar_crash_is_reported_and_the_rest_runs_on(autojump_clock, caplog) -> None:
    core, other_sidecar = Ticker(), Ticker()
    crashes: list[tuple[str, str, float]] = []

    async def on_crash(name: str, error: BaseException) -> None:
        crashes.append((name, repr(error), trio.current_time()))

    async def returns() -> None:
        await trio.sleep(5)

    with trio.move_on_after(10):
        await run_worker_groups(
            {"node_dispatcher": core},
            {
                "executor_health": crash_after(2, RuntimeError("health exploded")),
                "expiration_checker": returns,
                "audit_outbox_promoter": other_sidecar,
            },
            on_crash=on_crash,
        )
    assert crashes == [
        ("executor_health", "RuntimeError('health exploded')", 2.0),
        ("expiration_checker", "WorkerExited('worker expiration_checker returned')", 5.0),
    ]
    assert core.ticks == 9 and other_sidecar.ticks == 9  # they ran on to the end
    logged = [r for r in caplog.records if r.name == "qtg.runtime.supervision"]
    assert "sidecar worker executor_health crashed" in logged[0].getMessage()
    assert logged[0].worker == "executor_health"


async def test_a_failing_crash_report_does_not_spread(autojump_clock) -> None:
    core = Ticker()

    async def on_crash(name: str, error: BaseException) -> None:
        raise OSError("database gone")

    with trio.move_on_after(4):
        await run_worker_groups(
            {"node_dispatcher": core},
            {"x": crash_after(1, RuntimeError())},
            on_crash=on_crash,
        )
    assert core.ticks == 3


async def test_cancellation_stops_both_groups_without_error(autojump_clock) -> None:
    core, sidecar = Ticker(), Ticker()
    with trio.move_on_after(2.5) as scope:
        await run_worker_groups({"a": core}, {"b": sidecar})
    assert scope.cancelled_caught
    assert core.cancelled and sidecar.cancelled


async def test_no_workers_returns_at_once() -> None:
    with trio.fail_after(1):
        await run_worker_groups({}, {})
