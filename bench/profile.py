"""Where a runtime spends its CPU: py-spy samples of a running process, summarised.

py-spy (the optional `bench` extra) samples the process from outside at
PROFILE_HZ without pausing it (`--nonblocking`), and keeps only the thread
holding the GIL (`--gil`): a runtime is one Python process whose threads share
one GIL, so these samples are where its Python CPU goes (a thread waiting on
a socket, a lock or the GIL is not counted). The summary
groups each sample's innermost frame into a few categories (the trio
scheduler, trio's thread hand-off, psycopg, qtg's own code, …) and attributes
each sample to the worker pass it belongs to where the stack shows one.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import trio

PROFILE_HZ = 100

#: Innermost-frame file → category, first match wins.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("/psycopg_pool/", "psycopg pool"),
    ("/psycopg/", "psycopg (query, rows, types)"),
    ("/trio/_threads.py", "trio thread hand-off"),
    ("/trio/_core/", "trio scheduler and I/O"),
    ("/trio/", "trio (other)"),
    ("/outcome/", "trio thread hand-off"),
    ("threading.py", "thread hand-off (stdlib)"),
    ("queue.py", "thread hand-off (stdlib)"),
    ("/logging/", "logging"),
    ("/qtg/db/", "qtg.db (pool, Tx)"),
    ("/qtg/domain/", "qtg.domain (plans, hashes, rules)"),
    ("/qtg/services/", "qtg.services"),
    ("/qtg/providers/", "qtg.providers (sandbox)"),
    ("/qtg/runtime/", "qtg.runtime (loop, heartbeats)"),
    ("/msgspec/", "msgspec"),
    ("/json/", "json (stdlib)"),
    ("/uuid.py", "uuid"),
    ("/hashlib", "hashlib"),
    ("/contextlib.py", "contextlib"),
)

#: Worker passes, as they appear in stacks (function names).
PASSES: dict[str, str] = {
    "dispatch_ready_nodes": "node_dispatcher",
    "observe_active_nodes": "node_observer",
    "next_observe_due": "node_observer (next_due)",
    "recover_unknown_nodes": "node_recovery",
    "promote_audit_outbox": "audit_outbox_promoter",
    "dispatch_pending_callbacks": "callback_dispatcher",
    "write_beat": "heartbeats",
}


@dataclass
class ProfileSummary:
    samples: int = 0
    seconds: float = 0.0
    categories: Counter[str] = field(default_factory=Counter)
    passes: Counter[str] = field(default_factory=Counter)
    threads: Counter[str] = field(default_factory=Counter)
    leaves: Counter[str] = field(default_factory=Counter)
    error: str | None = None

    def share(self, count: int) -> float:
        return 100.0 * count / self.samples if self.samples else 0.0


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


async def record(pid: int, seconds: float) -> ProfileSummary:
    tool = py_spy()
    if tool is None:
        return ProfileSummary(error="py-spy is not installed (pip install -e '.[bench]')")
    with tempfile.TemporaryDirectory(prefix="qtg-bench-prof-") as tmp:
        out = Path(tmp) / "profile.raw"
        done = await trio.run_process(
            [
                tool,
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(int(seconds)),
                "--rate",
                str(PROFILE_HZ),
                "--nonblocking",
                "--gil",
                "--threads",
                "--full-filenames",
                "--format",
                "raw",
                "--output",
                str(out),
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        if done.returncode != 0 or not out.exists():
            return ProfileSummary(error=f"py-spy failed: {done.stderr.decode()[-300:]}")
        summary = summarize(out.read_text())
    summary.seconds = seconds
    return summary


def summarize(raw: str) -> ProfileSummary:
    """Fold py-spy's raw (collapsed stack) output: `frame;frame;… count` per line."""
    summary = ProfileSummary()
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        summary.samples += count
        leaf = frames[-1]
        summary.threads[_thread_kind(frames)] += count
        frames = frames[1:] if frames[0].startswith("thread (") else frames
        summary.leaves[_short(leaf)] += count
        summary.categories[_category(leaf)] += count
        summary.passes[_pass(frames)] += count
    return summary


def _category(frame: str) -> str:
    for needle, category in CATEGORIES:
        if needle in frame:
            return category
    if "(" not in frame or frame.endswith("(<native>)"):
        return "native"
    return "other Python"


def _thread_kind(frames: list[str]) -> str:
    """The thread's name (py-spy's first frame with --threads), numbers folded."""
    first = frames[0]
    if not first.startswith("thread ("):
        return "?"
    name = first.split(": ", 1)[1] if ": " in first else first
    if name == "MainThread":
        return "trio thread (event loop and every task)"
    if " from " in name:  # trio names a worker thread after the first job it ran
        return "trio worker threads (one statement at a time)"
    return re.sub(r"\d+", "#", name)


def _pass(frames: list[str]) -> str:
    for frame in frames:
        name = frame.split(" (", 1)[0]
        if name in PASSES:
            return PASSES[name]
    if any("/qtg/db/hub.py" in f for f in frames):
        return "LISTEN hub"
    if any("trio/_core/_thread_cache.py" in f for f in frames):
        return "statements in worker threads (not attributable to a pass)"
    return "trio scheduler / other"


def _short(frame: str) -> str:
    """`fn (/long/path/pkg/mod.py:12)` → `fn (pkg/mod.py:12)`."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    parts = where.split("/")
    return f"{name} ({'/'.join(parts[-2:])})" if where else name
