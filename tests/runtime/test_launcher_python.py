"""`bin/qtg-runtime` and the interpreter it runs (issue 26).

From the repository folder any python3 can `import qtg` (the folder is on its
path), so the launcher's old check passed for an interpreter without a single
dependency, and the runtime then died on a bare ModuleNotFoundError. The
launcher names the interpreter and what it lacks; QTG_PYTHON picks the
interpreter (the tests launch with their own, sys.executable).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from runtime.rt_procs import BIN, REPO


def _run(python: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MG_")}
    env.pop("QTG_PYTHON", None)
    if python is not None:
        env["QTG_PYTHON"] = python
    return subprocess.run(
        [str(BIN), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    )


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with nothing installed: it can import qtg from the repository
    folder (cwd) but none of qtg's dependencies."""
    where = tmp_path_factory.mktemp("bare-venv")
    venv.EnvBuilder(with_pip=False).create(where)
    python = where / "bin" / "python"
    probe = subprocess.run([python, "-c", "import qtg"], cwd=REPO, capture_output=True)
    assert probe.returncode == 0  # the trap: qtg itself imports fine from here
    return python


def test_an_interpreter_without_the_dependencies_is_named_with_what_it_lacks(
    bare_python: Path,
) -> None:
    r = _run(str(bare_python), "--help")
    assert r.returncode == 2, r.stdout + r.stderr
    [line] = r.stderr.splitlines()
    assert line.startswith(f"qtg-runtime: {bare_python} lacks qtg's dependencies "), line
    for name in ("psycopg", "trio", "hypercorn", "eth-account"):
        assert name in line, line
    assert f"{bare_python} -m pip install" in line and "QTG_PYTHON" in line
    assert "Traceback" not in r.stderr


def test_qtg_python_is_the_interpreter_used() -> None:
    r = _run(sys.executable, "--help")
    assert r.returncode == 0, r.stderr
    assert "usage: qtg-runtime" in r.stdout
    # It really is QTG_PYTHON that runs: a missing one is named, not replaced.
    r = _run("/nonexistent/python3", "--help")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "qtg-runtime: QTG_PYTHON=/nonexistent/python3 is not an executable python"
    )
