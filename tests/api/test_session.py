"""The README's API session, for real: bin/qtg-runtime --seed-demo, two tokens, curl-equivalent
requests, an approval by the second principal, and `qtg watch` until the movement completes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
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


@pytest.mark.slow
def test_readme_session(dsn: str) -> None:
    port = _free_port()
    env = base_env(MG_DATABASE_URL=dsn, MG_API_PORT=str(port))
    runtime = RuntimeProcess.launcher(env, "--seed-demo")
    tokens: dict[str, str] = {}
    try:
        runtime.wait_for(lambda r: r.get("msg") == "API listening", timeout=60)
        runtime.wait_ready(timeout=30)
        base = f"http://127.0.0.1:{port}"

        for name in ("alice", "bob"):
            made = _qtg(env, "token", "create", "--name", name, "--role", "operator")
            assert made.returncode == 0, made.stderr
            tokens[name] = made.stdout.strip()

        # curl -s -X POST $API/v3/movements -H "Authorization: Bearer $ALICE" \
        #   -H "Idempotency-Key: demo-1" -H 'Content-Type: application/json' -d '{...}'
        created = httpx.post(
            f"{base}/v3/movements",
            headers={
                "Authorization": f"Bearer {tokens['alice']}",
                "Idempotency-Key": f"demo-{uuid.uuid4().hex[:8]}",
            },
            json={
                "template_key": "demo.cex_to_chain",
                "intent": {"asset": "USDC", "amount": "250.00", "destination": "0xabc"},
            },
            timeout=10,
        )
        assert created.status_code == 201, created.text
        rid = created.json()["id"]
        assert created.json()["request_state"] == "PENDING_APPROVAL"

        self_approval = httpx.post(
            f"{base}/v3/movements/{rid}/approve",
            headers={"Authorization": f"Bearer {tokens['alice']}"},
            timeout=10,
        )
        assert self_approval.status_code == 403
        approved = httpx.post(
            f"{base}/v3/movements/{rid}/approve",
            headers={"Authorization": f"Bearer {tokens['bob']}"},
            timeout=10,
        )
        assert approved.status_code == 200, approved.text

        watched = _qtg(
            {**env, "QTG_TOKEN": tokens["bob"]},
            "watch",
            "--after",
            "0",
            "--request-id",
            rid,
            "--until-final",
            timeout=90,
        )
        assert watched.returncode == 0, watched.stderr
        lines = watched.stdout.splitlines()
        assert "request: created (PENDING_APPROVAL)" in lines[0]
        assert any("node withdraw: READY -> SUBMITTING" in line for line in lines), lines
        assert lines[-1].endswith("-> COMPLETED"), lines

        final = httpx.get(
            f"{base}/v3/movements/{rid}",
            headers={"Authorization": f"Bearer {tokens['alice']}"},
            timeout=10,
        ).json()
        assert final["request_state"] == "COMPLETED"
        assert {n["node_state"] for n in final["nodes"]} == {"COMPLETED"}
    finally:
        if runtime.proc.poll() is None:
            runtime.send(signal.SIGTERM)
        code = runtime.wait_exit(timeout=20)
    assert code == 0, runtime.log()
    assert not any(t in line for t in tokens.values() for line in runtime.lines)


def test_api_and_workers_flags_are_exclusive() -> None:
    bin_ = Path(__file__).resolve().parents[2] / "bin" / "qtg-runtime"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MG_")}
    r = subprocess.run(
        [str(bin_), "--api-only", "--workers-only"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2 and "not allowed with" in r.stderr
