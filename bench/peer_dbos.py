"""DBOS Transact as a peer (issue 47 item 1): the durable-execution engine that does qtg's kind
of work, each workflow step checkpointed in PostgreSQL, on the same private server.

    python -m bench.peer_run {dbos|dbos-1ms} {pickup|drain} DSN COUNT [WARMUP]

The work is a 3-step no-op workflow (qtg's unit is a 3-node movement), enqueued by this process
through DBOS's client onto a DBOS queue, and run by a worker process of its own
(`python -m bench.peer_dbos worker …`, started here): enqueue and execution in different
processes, as qtg's API and runtime are. The queue polls at DBOS's default (1 s, `dbos`) or at
1 ms (`dbos-1ms`): DBOS's queue accepts any positive interval, and 1 ms is the least its
documentation names for its pollers (notification_listener_polling_interval_sec); below it
the poll is a busy loop.

- pickup: the enqueue's commit → the first step's checkpoint commit (its operation_outputs row),
  both from PostgreSQL's commit timestamps, as PgQueuer's and qtg's pickups are taken; the
  enqueue runs in a transaction of this process's own (DBOSClient.enqueue_in_transaction), whose
  id is read before it commits. One workflow at a time, on an idle worker, each enqueued at a
  random phase of the queue's poll (a pause of up to one interval before it).
- drain: COUNT workflows enqueued before the worker starts, from the first step's start until
  the last workflow is done, as steps per second (3 a workflow); the worker's and PostgreSQL's
  CPU over the same window (procs.CpuWindow, as the other peers' and qtg's drains).
- exactly once: the worker counts each step's executions per workflow; every workflow's three
  steps ran once, and PostgreSQL holds three checkpoints and SUCCESS for each. A breach fails
  the run (a peer that repeats work is not measured, as qtg's runs are not).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import threading
import time
from collections import Counter
from typing import Any

from bench.procs import CpuWindow
from bench.queries import bench_sql

SQL = bench_sql("peer_dbos_pickup", "peer_dbos_checked", "peer_dbos_xid")
QUEUE = "qtg_bench"
APP = "qtg-bench"
STEPS = 3
#: The queue's polling interval per peer name: the least DBOS names, and its default.
POLLING_SECONDS = {"dbos-1ms": 0.001, "dbos": 1.0}
SAMPLE_DEADLINE_SECONDS = 60.0

#: (workflow id, step) → executions, in the worker process
_ran: Counter[tuple[str, int]] = Counter()
_ran_lock = threading.Lock()
_first_step: list[float] = []
#: the drain's CPU, the worker's and PostgreSQL's, from the first step to the last workflow
_cpu = CpuWindow()
_done: list[str] = []
_all_done = threading.Event()
_expect = [0]
_out_lock = threading.Lock()


def _say(line: dict[str, Any]) -> None:
    """One JSON line on stdout, whole: workflows finish on several threads."""
    with _out_lock:
        print(json.dumps(line), flush=True)


def _url(dsn: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    p = conninfo_to_dict(dsn)
    return f"postgresql://{p['user']}@{p['host']}:{p['port']}/{p['dbname']}"


def _step(n: int) -> None:
    from dbos import DBOS

    with _ran_lock:
        if not _first_step:
            _first_step.append(time.perf_counter())
            _cpu.start()
        _ran[(str(DBOS.workflow_id), n)] += 1


def _finished(workflow_id: str) -> None:
    _say({"done": workflow_id})
    with _ran_lock:
        _done.append(workflow_id)
        if len(_done) >= _expect[0]:
            _all_done.set()


def _register() -> None:
    """The workflow and its steps, registered with DBOS's decorators (module level: the
    client names the workflow by its registered name)."""
    from dbos import DBOS

    global noop_workflow

    @DBOS.step()
    def step_one() -> None:
        _step(1)

    @DBOS.step()
    def step_two() -> None:
        _step(2)

    @DBOS.step()
    def step_three() -> None:
        _step(3)

    @DBOS.workflow(name="noop_workflow")
    def noop_workflow() -> None:
        step_one()
        step_two()
        step_three()
        _finished(str(DBOS.workflow_id))


def worker(dsn: str, polling: float, expect: int) -> int:
    """Run the queue until `expect` workflows are done, then report the step counts."""
    from dbos import DBOS

    _register()
    DBOS(config={"name": APP, "system_database_url": _url(dsn), "log_level": "WARNING"})
    _expect[0] = expect
    if expect == 0:
        _all_done.set()
    DBOS.launch()  # the queue is DBOS's system database's: registered once it is up
    DBOS.register_queue(QUEUE, polling_interval_sec=polling)
    # a drain's backlog may start before this line (the queue is registered in the
    # database already): the enqueuer reads past it
    _say({"ready": True})
    # the enqueuer gives up on a sample after SAMPLE_DEADLINE_SECONDS; so does this wait
    _all_done.wait(SAMPLE_DEADLINE_SECONDS * max(1, expect))
    end = time.perf_counter()
    cpu_s = _cpu.stop()
    with _ran_lock:
        workflows = {w for w, _ in _ran}
        repeated = {f"{w}/{n}": c for (w, n), c in _ran.items() if c != 1}
        missing = [w for w in workflows if any((w, n) not in _ran for n in range(1, STEPS + 1))]
    _say(
        {
            "workflows": len(workflows),
            "repeated": repeated,
            "missing": missing,
            "wall_s": end - _first_step[0] if _first_step else None,
            "cpu_s": cpu_s,
        }
    )
    DBOS.destroy(workflow_completion_timeout_sec=5)
    return 0


async def _lines(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        line = await asyncio.wait_for(proc.stdout.readline(), SAMPLE_DEADLINE_SECONDS)
        if not line:
            raise RuntimeError("the DBOS worker exited")
        text = line.decode().strip()
        if text.startswith("{"):
            parsed: dict[str, Any] = json.loads(text)
            return parsed


async def _start_worker(
    dsn: str, polling: float, expect: int, *, ready: bool = True
) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.peer_dbos",
        "worker",
        dsn,
        str(polling),
        str(expect),
        stdout=asyncio.subprocess.PIPE,
    )
    if ready:  # DBOS's schema is made: the enqueuer may start
        line = await _lines(proc)
        assert line == {"ready": True}, line
    return proc


def _enqueue(client: Any, engine: Any, n: int) -> list[tuple[str, str]]:
    """`n` workflows enqueued in one transaction of ours: [(workflow id, its xid)]."""
    out = []
    with engine.begin() as conn:
        xid = str(conn.exec_driver_sql(SQL.peer_dbos_xid.text).scalar_one())
        for _ in range(n):
            handle = client.enqueue_in_transaction(
                conn, {"queue_name": QUEUE, "workflow_name": "noop_workflow"}
            )
            out.append((handle.get_workflow_id(), xid))
    return out


async def run(peer: str, figure: str, dsn: str, count: int, warmup: int) -> dict[str, Any]:
    import sqlalchemy as sa
    from dbos import DBOSClient

    polling = POLLING_SECONDS[peer]
    total = warmup + count if figure == "pickup" else count
    engine = sa.create_engine(sa.make_url(_url(dsn)).set(drivername="postgresql+psycopg"))
    result: dict[str, Any]
    if figure == "pickup":
        proc = await _start_worker(dsn, polling, total)  # it makes DBOS's schema
        client = DBOSClient(system_database_url=_url(dsn))
        enqueued = []
        for _ in range(total):
            # each enqueue at a random phase of the queue's poll: right after the last
            # workflow finished (just after a poll) every sample would wait a whole interval
            await asyncio.sleep(random.uniform(0, polling))
            [(wid, xid)] = await asyncio.to_thread(_enqueue, client, engine, 1)
            enqueued.append((wid, xid))
            done = await _lines(proc)
            assert done == {"done": wid}, (done, wid)
        report = await _lines(proc)
        with engine.connect() as conn:
            ms = [
                float(
                    conn.exec_driver_sql(
                        SQL.peer_dbos_pickup.text, {"workflow_id": wid, "xid": xid}
                    ).scalar_one()
                )
                for wid, xid in enqueued[warmup:]
            ]
        result = {"pickup_ms": ms}
    else:
        # DBOS's schema first (a worker expecting nothing), then the backlog, then the drain
        setup = await _start_worker(dsn, polling, 0)
        await _lines(setup)
        await setup.wait()
        client = DBOSClient(system_database_url=_url(dsn))
        await asyncio.to_thread(_enqueue, client, engine, count)
        proc = await _start_worker(dsn, polling, count, ready=False)
        while "workflows" not in (report := await _lines(proc)):
            pass  # "ready", then a "done" a workflow, then the report
        wall = float(report["wall_s"])
        steps_per_s = STEPS * count / wall
        result = {
            "jobs": count,
            "unit": "steps",
            "units": STEPS * count,
            "wall_s": wall,
            "jobs_per_s": steps_per_s,
            "cpu_s": report["cpu_s"],
        }
    await proc.wait()
    client.destroy()
    _check_once(engine, report, total)
    engine.dispose()
    return result


def _check_once(engine: Any, report: dict[str, Any], total: int) -> None:
    """Every workflow's steps ran once (the worker's counts), and PostgreSQL holds SUCCESS
    and one checkpoint per step for each (sql peer_dbos_checked)."""
    if report["workflows"] != total or report["repeated"] or report["missing"]:
        raise RuntimeError(f"DBOS ran steps other than once: {report}")
    with engine.connect() as conn:
        row = conn.exec_driver_sql(SQL.peer_dbos_checked.text, {"steps": STEPS}).one()
    if tuple(row) != (total, total):
        raise RuntimeError(f"DBOS's checkpoints: {tuple(row)} of {total} workflows")


noop_workflow: Any = None

if __name__ == "__main__":
    role, dsn, polling, expect = sys.argv[1:5]
    assert role == "worker"
    sys.exit(worker(dsn, float(polling), int(expect)))
