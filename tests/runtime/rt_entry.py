"""A runtime process with test workers: the real launcher (qtg.runtime.launcher.main),
its start-up, supervision, signals and shutdown, with a worker set chosen by RT_WORKERS.

    RT_WORKERS=job_runner,core_crasher,sidecar_crasher python tests/runtime/rt_entry.py

A `*_crasher` worker runs an idle loop and, once the file RT_CRASH_FILE exists,
raises outside its loop — the abnormal exit that supervision must handle.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from qtg.runtime import assembly, launcher
from qtg.runtime.registry import LoadedWorker, WorkerSpec
from qtg.runtime.supervision import WorkerFn

ALL = {
    "job_runner": WorkerSpec(
        "job_runner",
        "core",
        "rt_workload.process_jobs",
        "node_dispatch_interval_seconds",
        "qtg_dispatch",
    ),
    "core_crasher": WorkerSpec(
        "core_crasher", "core", "rt_workload.idle", "node_recovery_interval_seconds"
    ),
    "sidecar_crasher": WorkerSpec(
        "sidecar_crasher", "sidecar", "rt_workload.idle", "executor_health_interval_seconds"
    ),
}


def worker_factory(worker: LoadedWorker, runtime: assembly.Runtime) -> WorkerFn:
    inner = assembly.build_worker(worker, runtime)
    if not worker.resolved.name.endswith("_crasher"):
        return inner
    trigger = trio.Path(os.environ["RT_CRASH_FILE"])

    async def crasher() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(inner)
            # The test harness's trigger is a file the test creates; poll it.
            while not await trigger.exists():  # noqa: ASYNC110
                await trio.sleep(0.02)
            raise RuntimeError("kaput: injected crash")

    return crasher


if __name__ == "__main__":
    names = [n for n in os.environ.get("RT_WORKERS", "job_runner").split(",") if n]
    sys.exit(
        launcher.main(sys.argv[1:], specs=[ALL[n] for n in names], worker_factory=worker_factory)
    )
