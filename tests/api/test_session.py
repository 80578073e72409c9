"""The README's API session, for real: bin/qtg-runtime --seed-demo, two tokens, curl-equivalent
requests, an approval by the second principal, and `qtg watch` until the movement completes."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import REPO, marked_block
from runtime.rt_procs import RuntimeProcess, base_env

QTG = str(Path(sys.executable).parent / "qtg")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _qtg(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [QTG, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


README = REPO / "README.md"
readme_block = marked_block  # the run, restart and test commands, and the session: README.md


def test_readme_run_command_is_the_one_the_session_needs() -> None:
    assert readme_block("ci:run-command").rstrip().endswith("bin/qtg-runtime --seed-demo")
    assert "bin/qtg-runtime --seed-demo" in README.read_text().split("<!-- session -->")[0]


def test_readme_top_says_how_to_start_again_without_reinstalling() -> None:
    """A re-run of the whole run command spent 58 of 67 s in pip (issue 26):
    the README's top gives the start command alone, right after it."""
    top = README.read_text().split("\n---\n", 1)[0]
    assert "<!-- restart-command -->" in top
    assert top.index("<!-- restart-command -->") > top.index("<!-- ci:run-command -->")
    restart = readme_block("restart-command").strip()
    assert "pip" not in restart and "venv" not in restart.replace("./.venv", "")
    assert readme_block("ci:run-command").strip().rsplit("&&", 1)[1].strip() == restart


@pytest.mark.slow
@pytest.mark.skipif(
    not (shutil.which("curl") and shutil.which("jq")),
    reason="the README session uses curl and jq, which this machine does not have",
)
def test_readme_session(dsn: str) -> None:
    """The session pasted into one terminal, twice in a row on the same (kept) data."""
    port = _free_port()
    env = base_env(MG_DATABASE_URL=dsn, MG_API_PORT=str(port))
    runtime = RuntimeProcess.launcher(env, "--seed-demo")
    session = readme_block("session")
    outputs: list[str] = []
    try:
        runtime.wait_ready(timeout=60)
        for _ in range(2):
            run = subprocess.run(
                ["bash", "-c", "set -euo pipefail\n" + session],
                env=env,
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert run.returncode == 0, run.stdout + run.stderr
            outputs.append(run.stdout)
    finally:
        if runtime.proc.poll() is None:
            runtime.send(signal.SIGTERM)
        code = runtime.wait_exit(timeout=20)
    assert code == 0, runtime.log()
    ids = []
    for out in outputs:
        lines = out.splitlines()
        assert lines[0].startswith("movement ") and lines[0] != "movement null", out
        ids.append(lines[0].split()[1])
        assert '"code":"FOUR_EYES"' in lines[1], out
        assert lines[2].startswith('{"request_state":"APPROVED","approved_by":"bob-'), out
        assert "request: created (PENDING_APPROVAL)" in lines[3], out
        assert any("node withdraw: READY -> SUBMITTING" in line for line in lines), out
        assert lines[-1].endswith("-> COMPLETED") and "request:" in lines[-1], out
    assert ids[0] != ids[1], "the second run replayed the first run's movement"
    assert not any("qtg_" in line for line in runtime.lines), "a token reached the log"


def test_api_and_workers_flags_are_exclusive() -> None:
    bin_ = Path(__file__).resolve().parents[2] / "bin" / "qtg-runtime"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MG_")}
    env["QTG_PYTHON"] = sys.executable
    r = subprocess.run(
        [str(bin_), "--api-only", "--workers-only"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2 and "not allowed with" in r.stderr
