"""The docs' CCTP session (docs/providers/cctp.md), for real: its block run by bash as
written (ports moved off the defaults so parallel runs never clash), against a fresh database."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
from doc_blocks import run_block
from evm.anvil import find_binary, free_port
from runtime.rt_procs import base_env

pytestmark = pytest.mark.slow

#: The session's Python processes: tests/cctp/serve.py, the runtime, three
#: `qtg token create` and `qtg watch`; each pays qtg's imports on start.
PYTHON_STARTS = 6
#: Its movement's hops that wait on a poll (the attestation, the mint's status)
#: and on the runtime's reactions (four nodes), at MG_CCTP_*_POLL_SECONDS=1.
MOVEMENT_SECONDS = 40.0
#: Two anvils, the test CCTP's deployment on both, the shell's own steps.
FIXED_SECONDS = 60.0


def session_deadline() -> float:
    """The session's deadline, from what it does on this machine now (issue 44
    item 8: a fixed 180 s ran out on a loaded machine): a Python start with
    qtg's imports is measured, and each of the session's starts is given three
    times that, beside the movement's polls and the fixed steps."""
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", "import qtg.runtime.launcher, qtg.cli"], check=True, timeout=600
    )
    one_start = time.monotonic() - started
    return FIXED_SECONDS + MOVEMENT_SECONDS + PYTHON_STARTS * 3 * one_start


@pytest.mark.skipif(
    not (shutil.which("curl") and shutil.which("jq")),
    reason="the README session uses curl and jq, which this machine does not have",
)
def test_readme_cctp_session_moves_12_5_usdc(dsn: str, tmp_path) -> None:
    if find_binary() is None:
        pytest.skip("anvil needs npm")
    env = base_env(
        MG_DATABASE_URL=dsn,
        MG_API_PORT=str(free_port()),
        A_PORT=str(free_port()),
        B_PORT=str(free_port()),
        ATTESTER_PORT=str(free_port()),
        PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        QTG_PYTHON=sys.executable,
    )
    deadline = session_deadline()
    returncode, out, err = run_block("cctp-session", env, deadline, tmp_path)
    assert returncode == 0, out + err
    lines = out.strip().splitlines()
    assert lines[-2].endswith("-> COMPLETED") and "request:" in lines[-2], out
    assert int(lines[-1], 16) == 12_500_000, out
