"""The runtime as a real process: start-up, work, signals, crashes, exit codes, DB state.

Each test starts `tests/runtime/rt_entry.py` (the real launcher with test
workers) or `bin/qtg-runtime` itself against a fresh database, and waits on
conditions (log lines, rows, exits) with deadlines.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psycopg
import pytest

from runtime.rt_procs import RuntimeProcess, base_env, query, wait_until
from runtime.rt_workload import SETUP

pytestmark = pytest.mark.slow

COUNTS = (
    "SELECT count(*) FILTER (WHERE state = 'done'), count(*) FILTER (WHERE state = 'pending'),"
    " coalesce(max(processed_count), 0) FROM rt_jobs"
)
HEARTBEAT = (
    "SELECT status, iterations, items, last_error FROM worker_heartbeats WHERE worker_name = %s"
)


@pytest.fixture
def jobs_dsn(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SETUP.text)
    return dsn


def add_jobs(dsn: str, n: int, payload: str = "") -> None:
    query(dsn, "INSERT INTO rt_jobs (payload) SELECT %s FROM generate_series(1, %s)", (payload, n))


def counts(dsn: str) -> tuple[int, int, int]:
    return query(dsn, COUNTS)[0]


def entry(procs: list, dsn: str, workers: str = "job_runner", **env: str) -> RuntimeProcess:
    proc = RuntimeProcess.entry(base_env(MG_DATABASE_URL=dsn, RT_WORKERS=workers, **env))
    procs.append(proc)
    return proc


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_works_reactively_then_stops_cleanly_on_signal(jobs_dsn, procs, sig) -> None:
    # a 60 s fallback interval: only the NOTIFY wake-up can explain a fast pickup
    proc = entry(procs, jobs_dsn, MG_NODE_DISPATCH_INTERVAL_SECONDS="60")
    ready = proc.wait_ready()
    assert ready["workers"] == ["job_runner"] and ready["reactive"] is True
    add_jobs(jobs_dsn, 23)
    wait_until(lambda: counts(jobs_dsn) == (23, 0, 1), 5, "23 jobs done once each")
    wait_until(
        lambda: query(jobs_dsn, HEARTBEAT, ("job_runner",))[0][2] == 23,
        5,
        "the heartbeat counted 23 items",
    )

    started = time.monotonic()
    proc.send(sig)
    assert proc.wait_exit(5) == 0
    assert time.monotonic() - started < 5
    [(status, _iterations, items, last_error)] = query(jobs_dsn, HEARTBEAT, ("job_runner",))
    assert (status, items, last_error) == ("stopped", 23, None)
    messages = [r["msg"] for r in proc.records()]
    assert f"received {sig.name}; stopping" in messages
    assert messages[-1] == "qtg runtime stopped"


def test_in_flight_transaction_rolls_back_on_sigterm(jobs_dsn, procs) -> None:
    proc = entry(procs, jobs_dsn)
    proc.wait_ready()
    add_jobs(jobs_dsn, 1, "hold")  # the pass marks it done, then holds its transaction open
    wait_until(
        lambda: query(
            jobs_dsn,
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s AND state = 'idle in transaction'",
            (f"qtg-runtime:{proc.pid}",),
        ),
        5,
        "the pass to be in flight",
    )
    proc.send(signal.SIGTERM)
    assert proc.wait_exit(5) == 0
    assert counts(jobs_dsn) == (0, 1, 0)  # its UPDATE rolled back: still pending, never done


def test_a_blocked_statement_does_not_hold_up_the_exit(jobs_dsn, procs) -> None:
    proc = entry(procs, jobs_dsn)
    proc.wait_ready()
    add_jobs(jobs_dsn, 1, "block")  # the pass marks it done, then runs a 60 s statement
    wait_until(
        lambda: query(
            jobs_dsn,
            "SELECT 1 FROM pg_stat_activity WHERE application_name = %s"
            " AND state = 'active' AND query LIKE '%%pg_sleep%%'",
            (f"qtg-runtime:{proc.pid}",),
        ),
        5,
        "the statement to be running",
    )
    started = time.monotonic()
    proc.send(signal.SIGTERM)
    assert proc.wait_exit(8) == 0
    # Cancelling the pass cancels its statement on the server (qtg/db/connection.py);
    # the watchdog (2 s into shutdown) is the fallback if that cancel went unanswered.
    assert time.monotonic() - started < 5
    assert not query(
        jobs_dsn,
        "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND state = 'active'",
        (f"qtg-runtime:{proc.pid}",),
    )
    assert counts(jobs_dsn) == (0, 1, 0)  # rolled back


def test_core_worker_failure_exits_non_zero_naming_it(jobs_dsn, procs, tmp_path: Path) -> None:
    trigger = tmp_path / "crash"
    proc = entry(procs, jobs_dsn, "job_runner,core_crasher", RT_CRASH_FILE=str(trigger))
    proc.wait_ready()
    add_jobs(jobs_dsn, 3)
    wait_until(lambda: counts(jobs_dsn)[0] == 3, 5, "jobs done")
    trigger.touch()
    assert proc.wait_exit(5) == 1
    errors = [r for r in proc.records() if r.get("level") == "error"]
    assert len(errors) == 1, proc.log()
    assert errors[0]["msg"] == (
        "core worker core_crasher failed: RuntimeError: kaput: injected crash"
    )
    assert errors[0]["worker"] == "core_crasher"
    # the rest of the core group was cancelled cleanly, not crashed
    [(status, *_)] = query(jobs_dsn, HEARTBEAT, ("job_runner",))
    assert status == "stopped"
    # ...and the failed core worker ends crashed, not stopped (issue 17 item 5)
    [(status, _, _, last_error)] = query(jobs_dsn, HEARTBEAT, ("core_crasher",))
    assert (status, last_error) == ("crashed", "RuntimeError: kaput: injected crash")


def test_sidecar_crash_is_recorded_and_the_rest_runs_on(jobs_dsn, procs, tmp_path: Path) -> None:
    trigger = tmp_path / "crash"
    proc = entry(procs, jobs_dsn, "job_runner,sidecar_crasher", RT_CRASH_FILE=str(trigger))
    proc.wait_ready()
    trigger.touch()
    wait_until(
        lambda: query(jobs_dsn, HEARTBEAT, ("sidecar_crasher",))[0][0] == "crashed",
        5,
        "the sidecar's heartbeat to say crashed",
    )
    [(_, _, _, last_error)] = query(jobs_dsn, HEARTBEAT, ("sidecar_crasher",))
    assert last_error == "RuntimeError: kaput: injected crash"
    add_jobs(jobs_dsn, 7)  # the core worker goes on
    wait_until(lambda: counts(jobs_dsn) == (7, 0, 1), 5, "jobs done after the crash")
    assert proc.proc.poll() is None
    crash_logs = [
        r
        for r in proc.records()
        if r.get("worker") == "sidecar_crasher" and r.get("level") == "error"
    ]
    assert len(crash_logs) == 1 and "crashed" in crash_logs[0]["msg"]
    proc.send(signal.SIGTERM)
    assert proc.wait_exit(5) == 0
    assert query(jobs_dsn, HEARTBEAT, ("sidecar_crasher",))[0][0] == "crashed"


def test_two_processes_share_the_work_exactly_once(jobs_dsn, procs) -> None:
    a = entry(procs, jobs_dsn)
    b = entry(procs, jobs_dsn)
    a.wait_ready()
    b.wait_ready()
    for _ in range(20):
        add_jobs(jobs_dsn, 25)  # 20 notifies, 500 jobs
    wait_until(lambda: counts(jobs_dsn) == (500, 0, 1), 20, "500 jobs done exactly once")
    by = dict(query(jobs_dsn, "SELECT processed_by, count(*) FROM rt_jobs GROUP BY 1"))
    assert set(by) == {str(a.pid), str(b.pid)}, by  # both took part


def test_workers_disabled_runs_none(dsn, procs) -> None:
    proc = RuntimeProcess.entry(base_env(MG_DATABASE_URL=dsn, MG_WORKERS_ENABLED="false"))
    procs.append(proc)
    ready = proc.wait_ready()
    assert ready["workers"] == []
    assert query(dsn, "SELECT count(*) FROM worker_heartbeats") == [(0,)]
    skipped = [r for r in proc.records() if r.get("worker") == "job_runner"]
    assert skipped[0]["reason"] == "MG_WORKERS_ENABLED=false"
    proc.send(signal.SIGTERM)
    assert proc.wait_exit(5) == 0


def test_bad_setting_exits_2_naming_the_variable() -> None:
    proc = RuntimeProcess.launcher(base_env(MG_NODE_OBSERVE_INTERVAL_SECONDS="5s"))
    assert proc.wait_exit(20) == 2
    assert proc.lines == [
        "qtg-runtime: MG_NODE_OBSERVE_INTERVAL_SECONDS: expected a number, got '5s'"
    ]


def test_an_out_of_range_port_stops_start_up_naming_it() -> None:
    """MG_API_PORT=99999 used to start on port 34463 (issue 26)."""
    proc = RuntimeProcess.launcher(base_env(MG_API_PORT="99999"))
    assert proc.wait_exit(20) == 2
    assert proc.lines == ["qtg-runtime: MG_API_PORT: must be at most 65535, got '99999'"]


def test_external_database_is_migrated_only_when_asked(empty_dsn, procs) -> None:
    refused = RuntimeProcess.launcher(base_env(MG_DATABASE_URL=empty_dsn))
    assert refused.wait_exit(20) == 1
    [error] = [r for r in refused.records() if r.get("level") == "error"]
    assert "pending migrations (0001_core, 0002_triggers" in error["msg"]
    assert "--migrate" in error["msg"]
    assert query(empty_dsn, "SELECT to_regclass('movement_requests')") == [(None,)]

    migrated = RuntimeProcess.launcher(base_env(MG_DATABASE_URL=empty_dsn), "--migrate")
    procs.append(migrated)
    migrated.wait_ready()
    migrated.send(signal.SIGTERM)
    assert migrated.wait_exit(5) == 0
    assert query(empty_dsn, "SELECT to_regclass('movement_requests') IS NOT NULL") == [(True,)]


def test_edited_migration_is_refused_naming_the_file(dsn) -> None:
    query(dsn, "UPDATE schema_migrations SET checksum = 'x' WHERE version = '0002_triggers'")
    proc = RuntimeProcess.launcher(base_env(MG_DATABASE_URL=dsn))
    assert proc.wait_exit(20) == 1
    [error] = [r for r in proc.records() if r.get("level") == "error"]
    assert "migrations/0002_triggers.sql was edited after it was applied" in error["msg"]


def test_secrets_never_reach_the_logs(dsn, procs) -> None:
    secret_dsn = dsn.replace("user=postgres", "user=postgres password=Pw-s3cret-XYZ")
    assert "Pw-s3cret-XYZ" in secret_dsn  # trust auth ignores it; the runtime must hide it
    env = base_env(
        MG_DATABASE_URL=secret_dsn,
        MG_CALLBACK_SIGNING_SECRET="cb-s3cret-ABC",
        MG_LOG_LEVEL="DEBUG",
    )
    proc = RuntimeProcess.launcher(env)
    procs.append(proc)
    proc.wait_ready()
    proc.send(signal.SIGTERM)
    assert proc.wait_exit(5) == 0
    # an unreachable database: the error line must not echo the password either
    bad = RuntimeProcess.launcher(
        base_env(MG_DATABASE_URL="postgresql://qtg:Pw-s3cret-XYZ@127.0.0.1:1/qtg")
    )
    assert bad.wait_exit(30) == 1
    for text in (proc.log(), "\n".join(bad.lines)):
        assert "Pw-s3cret-XYZ" not in text and "cb-s3cret-ABC" not in text
    assert "cannot reach the database" in "\n".join(bad.lines)
