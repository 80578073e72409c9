"""The worker loop feeds its series: passes, items, errors, in-backoff, last success."""

from __future__ import annotations

import trio
import trio.testing

from qtg.runtime.loop import MAX_CONSECUTIVE_ERRORS, run_loop
from qtg.services.metrics import RuntimeMetrics


def sample(metrics: RuntimeMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_failures_count_and_backoff_shows_then_clears(autojump_clock) -> None:
    metrics = RuntimeMetrics()
    calls = 0
    in_backoff_seen = trio.Event()
    recorded = trio.Event()

    async def flaky() -> int:
        nonlocal calls
        calls += 1
        if calls <= MAX_CONSECUTIVE_ERRORS:
            raise RuntimeError("down")
        if calls == MAX_CONSECUTIVE_ERRORS + 1:
            # The pass after the backoff: the gauge said "in backoff" until now.
            if sample(metrics, "qtg_worker_in_backoff", worker="w") == 1:
                in_backoff_seen.set()
            return 3
        recorded.set()  # the loop recorded the successful pass before calling again
        return 0

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            lambda: run_loop("w", flaky, 1.0, metrics=metrics.worker("w"), reactive=False)
        )
        with trio.fail_after(600):  # virtual seconds: the backoff is 32 s
            await in_backoff_seen.wait()
            await recorded.wait()
        nursery.cancel_scope.cancel()

    assert sample(metrics, "qtg_worker_items_total", worker="w") == 3

    assert sample(metrics, "qtg_worker_errors_total", worker="w") == MAX_CONSECUTIVE_ERRORS
    assert (
        sample(metrics, "qtg_worker_passes_total", worker="w", outcome="error")
        == MAX_CONSECUTIVE_ERRORS
    )
    assert sample(metrics, "qtg_worker_passes_total", worker="w", outcome="ok") >= 1
    assert sample(metrics, "qtg_worker_in_backoff", worker="w") == 0
    assert sample(metrics, "qtg_worker_last_success_timestamp_seconds", worker="w") > 0
    assert (
        sample(metrics, "qtg_worker_pass_duration_seconds_count", worker="w")
        == sample(metrics, "qtg_worker_passes_total", worker="w", outcome="ok")
        + MAX_CONSECUTIVE_ERRORS
    )
