"""Two runtime processes run the same workers; one's sidecar crashes (issue 17 item 5).

Each process owns its heartbeat rows (host, pid, instance id), so the live
process's beats cannot overwrite the dead instance's `crashed`, and
`GET /v3/workers` (served by the live process itself) says the worker is
crashed, with one live and one dead instance.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import psycopg
import pytest
import trio

from qtg.db import Database
from qtg.services import tokens
from runtime.rt_procs import RuntimeProcess, base_env, query, terminate_all, wait_until
from runtime.rt_workload import SETUP

pytestmark = pytest.mark.slow

ROWS = (
    "SELECT instance_id, host, pid, status FROM worker_heartbeats"
    " WHERE worker_name = 'sidecar_crasher' ORDER BY pid"
)


def _token(dsn: str) -> str:
    async def create() -> str:
        db = Database(dsn, min_size=1, max_size=1, statement_timeout_ms=5_000)
        await db.open()
        try:
            return (await tokens.create_token(db, name="ops", role="viewer", actor="test"))["token"]
        finally:
            await db.close()

    return trio.run(create)


def test_a_live_instance_does_not_mask_a_crashed_one(dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SETUP.text)
    procs: list[RuntimeProcess] = []
    try:
        triggers = [tmp_path / "crash-a", tmp_path / "crash-b"]
        for trigger in triggers:
            procs.append(
                RuntimeProcess.entry(
                    base_env(
                        MG_DATABASE_URL=dsn,
                        RT_WORKERS="job_runner,sidecar_crasher",
                        RT_CRASH_FILE=str(trigger),
                        MG_HEARTBEAT_MIN_INTERVAL_SECONDS="0.05",
                    )
                )
            )
        live, dying = procs
        readies = [p.wait_ready() for p in procs]
        assert readies[0]["instance_id"] != readies[1]["instance_id"]
        rows = wait_until(
            lambda: len(query(dsn, ROWS)) == 2 and query(dsn, ROWS), 10, "one row per process"
        )
        assert {r[2] for r in rows} == {live.pid, dying.pid}
        assert {r[1] for r in rows} == {os.uname().nodename}

        triggers[1].touch()  # the second process's sidecar crashes; the first runs on
        wait_until(
            lambda: dict((r[2], r[3]) for r in query(dsn, ROWS)).get(dying.pid) == "crashed",
            10,
            "the dying instance's row to say crashed",
        )
        url = live.wait_for(lambda r: r.get("msg") == "API listening")["url"]
        headers = {"Authorization": f"Bearer {_token(dsn)}"}
        # The live instance keeps beating, and the view still says crashed.
        before = query(
            dsn, "SELECT max(last_beat_at) FROM worker_heartbeats WHERE worker_name = 'job_runner'"
        )[0][0]
        query(dsn, "INSERT INTO rt_jobs (payload) SELECT '' FROM generate_series(1, 5)")
        wait_until(
            lambda: (
                query(
                    dsn,
                    "SELECT max(last_beat_at) FROM worker_heartbeats"
                    " WHERE worker_name = 'job_runner'",
                )[0][0]
                > before
            ),
            10,
            "a later beat",
        )
        body = httpx.get(f"{url}/v3/workers", headers=headers, timeout=10).json()
        worker = {w["worker_name"]: w for w in body["items"]}["sidecar_crasher"]
        assert worker["status"] == "crashed"
        assert worker["last_error"] == "RuntimeError: kaput: injected crash"
        assert (worker["live_instances"], worker["dead_instances"]) == (1, 1)
        by_pid = {i["pid"]: i["status"] for i in worker["instances"]}
        assert by_pid[dying.pid] == "crashed" and by_pid[live.pid] in ("starting", "running")

        for p in procs:
            p.send(signal.SIGTERM)
            assert p.wait_exit(15) == 0
        statuses = dict((r[2], r[3]) for r in query(dsn, ROWS))
        assert statuses == {live.pid: "stopped", dying.pid: "crashed"}
    finally:
        terminate_all(procs)
