"""The docs' ccxt session (`<!-- session:ccxt -->`), run as written by bash against a fresh
database: only its ports are moved to free ones (anvil 8545, the local OKX 8600, the API 8000)
and the npm line is left out (anvil is already installed: tests/evm/anvil.py)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import marked_block
from evm.anvil import find_binary, free_port
from runtime.rt_procs import base_env

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_the_readme_ccxt_session_moves_the_amount_once(dsn: str, tmp_path: Path) -> None:
    if find_binary() is None:
        pytest.skip("anvil needs npm")
    block = marked_block("session:ccxt")  # docs/providers/exchanges.md
    assert "npm install @foundry-rs/anvil" in block.splitlines()[0]
    script = "\n".join(block.splitlines()[1:])
    ports = {port: str(free_port()) for port in ("8545", "8600", "8000")}
    for port, free in ports.items():
        script = script.replace(f"127.0.0.1:{port}", f"127.0.0.1:{free}")
        script = script.replace(f"--port {port}", f"--port {free}")
    for name in (".venv", ".tools", "bin", "tests"):
        (tmp_path / name).symlink_to(REPO / name)
    # the interpreter running the tests is the session's .venv/bin/python here
    env = base_env(MG_DATABASE_URL=dsn, QTG_PYTHON=sys.executable)
    env["MG_API_PORT"] = ports["8000"]
    # output to a file, not a pipe: the session's background jobs keep their stdout open
    # after bash itself has finished
    log = tmp_path / "session.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its background jobs (anvil, the venue, the runtime) too
        )
    try:
        proc.wait(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the session's own process group
    out = log.read_text()
    assert proc.returncode == 0, out
    lines = out.splitlines()  # the runtime's log lines are in there too
    assert "COMPLETED" in lines, out
    # the balance line: exactly 25.5 test USDC (6 decimals) at the destination
    [balance] = [line for line in lines if re.fullmatch(r"0x[0-9a-f]{64}", line)]
    assert int(balance, 16) == 25_500_000, out
