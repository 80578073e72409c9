"""The docs' Stargate session (docs/providers/stargate.md), for real: its block run by bash as
written (ports moved off the defaults so parallel runs never clash), against a fresh database."""

from __future__ import annotations

import os
import shutil
import sys

import pytest
from cctp.test_cctp_session import session_deadline
from doc_blocks import run_block
from evm.anvil import find_binary, free_port
from runtime.rt_procs import base_env

pytestmark = pytest.mark.slow


@pytest.mark.skipif(
    not (shutil.which("curl") and shutil.which("jq")),
    reason="the docs session uses curl and jq, which this machine does not have",
)
def test_docs_stargate_session_moves_12_5_usdt(dsn: str, tmp_path) -> None:
    if find_binary() is None:
        pytest.skip("anvil needs npm")
    env = base_env(
        MG_DATABASE_URL=dsn,
        MG_API_PORT=str(free_port()),
        A_PORT=str(free_port()),
        B_PORT=str(free_port()),
        PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        QTG_PYTHON=sys.executable,
    )
    # the CCTP session's budget (six Python starts, two chains): this one does less
    returncode, out, err = run_block("stargate-session", env, session_deadline(), tmp_path)
    assert returncode == 0, out + err
    lines = out.strip().splitlines()
    assert lines[-2].endswith("-> COMPLETED") and "request:" in lines[-2], out
    assert int(lines[-1], 16) == 12_500_000, out
