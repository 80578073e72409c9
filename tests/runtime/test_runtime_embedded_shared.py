"""Two runtimes on one `.qtg`: only the one that starts (or stops) the embedded server says so.

A second runtime on the same data folder adopts the server the first started; it
used to log "embedded PostgreSQL started" at start and "embedded PostgreSQL stopped"
at exit, though the server ran on for the first (issue 44). Real processes, one real
embedded server: the second says it uses a running server and leaves it running;
the first, exiting last, really stops it.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from runtime.rt_procs import RuntimeProcess, alive, base_env
from runtime.test_runtime_end_to_end import POOL, data_root  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

STARTED = "embedded PostgreSQL started"
ADOPTED = "embedded PostgreSQL already running: using it"
STOPPED = "embedded PostgreSQL stopped"
LEFT = "embedded PostgreSQL left running: another process still uses it"


def _messages(proc: RuntimeProcess) -> list[str]:
    return [str(r.get("msg")) for r in proc.records()]


def test_a_second_runtime_neither_starts_nor_stops_the_server(data_root: Path, procs) -> None:  # noqa: F811
    env = base_env(MG_EMBEDDED_DATA_DIR=str(data_root / "qtg-data"), **POOL)
    first = RuntimeProcess.launcher(env)
    procs.append(first)
    pid = first.wait_for(lambda r: r.get("msg") == STARTED, 60)["pid"]
    first.wait_ready(60)

    second = RuntimeProcess.launcher(env)
    procs.append(second)
    adopted = second.wait_for(lambda r: r.get("msg") == ADOPTED, 60)
    assert adopted["pid"] == pid  # the same postmaster
    second.wait_ready(60)
    second.send(signal.SIGTERM)
    assert second.wait_exit(30) == 0
    assert LEFT in _messages(second), second.log()
    assert STARTED not in _messages(second) and STOPPED not in _messages(second), second.log()
    assert alive(pid), "the second runtime stopped the first one's server"

    first.send(signal.SIGTERM)
    assert first.wait_exit(30) == 0
    assert STOPPED in _messages(first), first.log()
    assert not alive(pid)
