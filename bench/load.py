"""How busy the machine was with other people's work while a figure was measured.

The benchmark shares its 2 cores with whatever else runs. A thread samples, every
SAMPLE_SECONDS, the busy CPU time of the whole machine (/proc/stat) and that of
the benchmark's own processes: this process, its children (the runtimes,
py-spy, pgbench) and every process of the private PostgreSQL. What is left is
other people's, reported beside each figure as a share of the 2 cores.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.procs import CLK_TCK

SAMPLE_SECONDS = 0.5
CORES = os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class Mark:
    at: float
    machine_s: float
    ours_s: float


class LoadMonitor:
    def __init__(self, extra_pids: Callable[[], list[int]]) -> None:
        self._extra_pids = extra_pids
        self._last: dict[int, float] = {}
        self._ours = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._machine0 = _machine_busy()
        self._sample()

    def run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self._sample()

    def stop(self) -> None:
        self._stop.set()

    def mark(self) -> Mark:
        self._sample()
        with self._lock:
            return Mark(time.monotonic(), _machine_busy() - self._machine0, self._ours)

    @staticmethod
    def others_share(start: Mark, end: Mark) -> float:
        """Share of all cores that processes other than the benchmark's used in between."""
        wall = end.at - start.at
        if wall <= 0:
            return 0.0
        others = (end.machine_s - start.machine_s) - (end.ours_s - start.ours_s)
        return max(0.0, others) / (wall * CORES)

    @staticmethod
    def busy_share(start: Mark, end: Mark) -> float:
        """Share of all cores that were busy (anyone's work) in between."""
        wall = end.at - start.at
        return (end.machine_s - start.machine_s) / (wall * CORES) if wall > 0 else 0.0

    def _sample(self) -> None:
        pids = set(_descendants(os.getpid())) | set(self._extra_pids())
        with self._lock:
            for pid in pids:
                cpu = _cpu(pid)
                if cpu is None:
                    continue
                self._ours += max(0.0, cpu - self._last.get(pid, 0.0))
                self._last[pid] = cpu


def _machine_busy() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def _cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [root], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
