"""Done-when of issue 4, with the real engine under `bin/qtg-runtime`.

- a movement created and approved flows to COMPLETED by itself: a 5-node chain
  of instant sandbox nodes well under a second in reactive mode; with
  MG_REACTIVE=false, at the pace the intervals imply;
- two runtime processes on one database share the work, no node submitted twice;
- the embedded database (no MG_DATABASE_URL) with --seed-demo: a new user's
  first run; Ctrl-C stops everything, embedded PostgreSQL included.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from qtg.config import Settings
from qtg.db import Database
from qtg.db.embedded import EmbeddedPostgres
from qtg.runtime.demo import DEMO_TEMPLATES
from qtg.services.movements import approve_movement, create_movement
from runtime.rt_procs import (
    RuntimeProcess,
    alive,
    all_completed,
    base_env,
    private_dir,
    query,
    wait_until,
)

pytestmark = pytest.mark.slow

CHAIN = "demo.cctp_bridge"  # 5 nodes: burn → attestation → mint → mint_status → finality
ELAPSED = (
    "SELECT extract(epoch FROM max(created_at) FILTER (WHERE to_state = 'COMPLETED')"
    "  - max(created_at) FILTER (WHERE to_state = 'APPROVED'))"
    " FROM movement_events WHERE request_id = %s AND event_type = 'request_state_changed'"
)


def create_and_approve(dsn: str, template_key: str, n: int = 1, batch: str = "a") -> list[str]:
    async def run() -> list[str]:
        settings = Settings.from_env({}).replace(database_url=dsn)
        ids = []
        async with Database(dsn, min_size=1, max_size=2) as db:
            for i in range(n):
                created, _ = await create_movement(
                    db,
                    settings,
                    template_key=template_key,
                    intent={"asset": "USDC", "amount": "10.00", "destination": "0xabc"},
                    input_params={"chain_family": "evm"},
                    idempotency_key=f"e2e-{template_key}-{batch}-{i}",
                    actor="alice",
                )
                await approve_movement(db, created["id"], actor="bob")
                ids.append(str(created["id"]))
        return ids

    return trio.run(run)


def submissions(dsn: str) -> tuple[int, int, int]:
    [(total, nodes, duplicates)] = query(
        dsn,
        "SELECT count(*), count(DISTINCT request_node_id), coalesce(sum(duplicate_submits), 0)"
        " FROM sandbox_submissions",
    )
    return total, nodes, duplicates


@pytest.fixture
def data_root():
    with private_dir("qtg-rt-e2e-") as path:
        yield path


# The sandbox provider keeps its "remote side" in the same database and takes a
# second pooled connection while a pass holds its own (observer: 5 at a time), so
# a small pool can starve itself; size it for the engine's worst case.
POOL = {"MG_DB_POOL_MAX_SIZE": "20"}


def launch(procs: list, dsn: str, *args: str, **env: Any) -> RuntimeProcess:
    proc = RuntimeProcess.launcher(base_env(MG_DATABASE_URL=dsn, **POOL, **env), *args)
    procs.append(proc)
    return proc


def test_five_node_chain_completes_by_itself_well_under_a_second(dsn, procs) -> None:
    proc = launch(procs, dsn, "--seed-demo")
    ready = proc.wait_ready()
    assert ready["workers"][:3] == ["node_dispatcher", "node_observer", "node_recovery"]
    [rid] = create_and_approve(dsn, CHAIN)
    wait_until(lambda: all_completed(dsn, [rid]), 5, "the movement to complete")
    [(elapsed,)] = query(dsn, ELAPSED, (rid,))
    # ~0.2 s on an idle 2-core machine; the bound leaves room for a busy CI box
    # (a polling runtime at the reference's intervals needs up to 5 * (2 + 5) s).
    assert float(elapsed) < 1.0, f"approve → COMPLETED took {elapsed} s"
    assert submissions(dsn) == (2, 2, 0)  # burn and mint, once each
    proc.send(signal.SIGINT)
    assert proc.wait_exit(5) == 0


def test_polling_mode_moves_at_the_pace_of_the_intervals(dsn, procs) -> None:
    dispatch_s, observe_s = 0.2, 0.5
    proc = launch(
        procs,
        dsn,
        "--seed-demo",
        MG_REACTIVE="false",
        MG_NODE_DISPATCH_INTERVAL_SECONDS=str(dispatch_s),
        MG_NODE_OBSERVE_INTERVAL_SECONDS=str(observe_s),
    )
    assert proc.wait_ready()["reactive"] is False
    [rid] = create_and_approve(dsn, CHAIN)
    wait_until(lambda: all_completed(dsn, [rid]), 15, "the movement to complete")
    [(elapsed,)] = query(dsn, ELAPSED, (rid,))
    # Each of the 5 nodes needs its own observer pass, one interval apart, after a
    # dispatcher pass: at least 4 observe intervals, at most 5 of each, plus slack.
    assert 4 * observe_s <= float(elapsed) <= 5 * (dispatch_s + observe_s) + 1.0, elapsed


def test_two_runtimes_share_the_work_and_never_submit_twice(dsn, procs) -> None:
    first = launch(procs, dsn, "--seed-demo", MG_LOG_LEVEL="DEBUG")
    first.wait_ready()
    second = launch(procs, dsn, MG_LOG_LEVEL="DEBUG")
    second.wait_ready()
    ids = create_and_approve(dsn, CHAIN, 30)
    wait_until(lambda: all_completed(dsn, ids), 30, "30 movements to complete")
    assert submissions(dsn) == (60, 60, 0)  # 2 action nodes each, one submit each
    for proc in (first, second):
        passes = [
            r
            for r in proc.records()
            if r.get("msg") == "pass" and r.get("worker") == "node_dispatcher"
        ]
        assert passes, "both runtimes dispatched"


# SIGHUP: the terminal running the runtime was closed (issue 17 item 10).
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_embedded_first_run_flows_and_stops_postgres(data_root: Path, procs, sig) -> None:
    data = data_root / "qtg-data"
    proc = RuntimeProcess.launcher(base_env(MG_EMBEDDED_DATA_DIR=str(data), **POOL), "--seed-demo")
    procs.append(proc)
    postgres = proc.wait_for(lambda r: r.get("msg") == "embedded PostgreSQL started", 60)
    pid = postgres["pid"]
    ready = proc.wait_ready(60)
    assert ready["database"] == "embedded"
    created = proc.wait_for(lambda r: r.get("msg") == "demo templates registered")
    assert created["templates"] == [t["template_key"] for t in DEMO_TEMPLATES]

    # a second user of the same server (this test) adopts it, then lets go
    server = EmbeddedPostgres(data)
    server.start()
    try:
        dsn = server.ensure_database("qtg")
        [rid] = create_and_approve(dsn, CHAIN)
        wait_until(lambda: all_completed(dsn, [rid]), 5, "the demo movement to complete")
    finally:
        server.stop()  # another live user (the runtime): the server keeps running
    assert alive(pid)

    proc.send(sig)
    assert proc.wait_exit(30) == 0
    assert not alive(pid), "embedded PostgreSQL still running after the runtime stopped"
    assert not (data / "pgdata" / "postmaster.pid").exists()


def test_embedded_postgres_stopped_when_the_runtime_fails(
    data_root: Path, tmp_path: Path, procs
) -> None:
    data = data_root / "qtg-data"
    trigger = tmp_path / "crash"
    proc = RuntimeProcess.entry(
        base_env(
            MG_EMBEDDED_DATA_DIR=str(data), RT_WORKERS="core_crasher", RT_CRASH_FILE=str(trigger)
        )
    )
    procs.append(proc)
    pid = proc.wait_for(lambda r: r.get("msg") == "embedded PostgreSQL started", 60)["pid"]
    proc.wait_ready(60)
    trigger.touch()
    assert proc.wait_exit(30) == 1
    assert not alive(pid)
