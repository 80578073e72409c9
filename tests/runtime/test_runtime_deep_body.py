"""A body nested 100,000 levels deep is refused by the full runtime, which lives on (issue 44).

The full runtime (API and workers in one process) imports eth-account for its
EVM providers, and eth-account's py_ecc raises the interpreter's recursion
limit to 100,000: a recursive JSON decoder then runs off the C stack before
the limit stops it, and one authenticated request segfaulted the process
(`--api-only`, without eth-account, answered 400). Here the request goes to
a real `bin/qtg-runtime` process, and the test first shows that the hazard is
real in this interpreter (the same import, the same body, a plain json.loads
dies by a signal), so that a pass means the bound held, not that the hazard
was absent.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from runtime.rt_procs import base_env
from runtime.test_runtime_end_to_end import launch

pytestmark = pytest.mark.slow

QTG = str(Path(sys.executable).parent / "qtg")
DEPTH = 100_000
DEEP = b"[" * DEPTH + b"]" * DEPTH
DEEP_OBJECT = b'{"template_key": ' + b'{"a": ' * DEPTH + b"1" + b"}" * DEPTH + b"}"


def _token(dsn: str, name: str) -> str:
    run = subprocess.run(
        [QTG, "token", "create", "--name", name, "--role", "admin"],
        env=base_env(MG_DATABASE_URL=dsn),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return run.stdout.strip().splitlines()[-1]


def test_the_hazard_is_real_here() -> None:
    """With the runtime's providers imported, an unbounded json.loads of the deep
    body kills the interpreter (a signal, not a RecursionError)."""
    probe = (
        "import json, sys\n"
        "import qtg.providers.evm.signer\n"
        "assert sys.getrecursionlimit() >= 100_000, sys.getrecursionlimit()\n"
        f"json.loads(b'[' * {DEPTH} + b']' * {DEPTH})\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode < 0, (run.returncode, run.stderr[-400:])


def test_a_deep_body_is_refused_and_the_full_runtime_serves_on(dsn, procs) -> None:
    proc = launch(procs, dsn, "--seed-demo")
    proc.wait_ready()
    url = proc.wait_for(lambda r: r.get("msg") == "API listening")["url"]
    token = _token(dsn, "deep-body-admin")
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with httpx.Client(base_url=url, timeout=30) as client:
        for path, body, extra in (
            ("/v3/movements", DEEP, {"Idempotency-Key": "deep-1"}),
            ("/v3/movements", DEEP_OBJECT, {"Idempotency-Key": "deep-2"}),
            ("/v3/templates", DEEP, {}),
        ):
            r = client.post(path, content=body, headers={**auth, **extra})
            assert r.status_code == 400, (path, r.status_code, r.text[:300])
            error = r.json()["error"]
            assert error["code"] == "JSON_TOO_DEEP", error
            assert error["detail"] == {"field": "body", "max_depth": 64}, error
            assert proc.proc.poll() is None, proc.log()
        # still alive and serving: an authenticated read answers
        assert client.get("/v3/movements", headers=auth).status_code == 200
        # and a body of legitimate depth still reaches the model (the 4xx names the field)
        r = client.post(
            "/v3/movements",
            json={"template_key": "demo.cctp_bridge", "intent": {"a": [[[[1]]]]}},
            headers={**auth, "Idempotency-Key": "shallow-1"},
        )
        assert r.status_code in (201, 422), r.text
    assert proc.proc.poll() is None, proc.log()
    proc.send(signal.SIGINT)
    assert proc.wait_exit(10) == 0
