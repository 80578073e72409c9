"""Heartbeats: bounded write rate (mock clock), real rows in worker_heartbeats (real DB)."""

from __future__ import annotations

import itertools

import trio

from qtg.db import Database
from qtg.db.queries import Query
from qtg.runtime.heartbeats import Beat, Heartbeat
from qtg.runtime.loop import run_loop
from qtg.services import readmodels
from qtg.services.heartbeats import (
    HeartbeatRow,
    ProcessId,
    list_heartbeats,
    mark_crashed,
    seed_heartbeats,
    write_beat,
)


class Recorder:
    def __init__(self, fail_until: float = -1.0) -> None:
        self.beats: list[tuple[float, Beat]] = []
        self.fail_until = fail_until
        self.failures = 0

    async def __call__(self, beat: Beat) -> None:
        await trio.lowlevel.checkpoint()
        if trio.current_time() < self.fail_until:
            self.failures += 1
            raise OSError("database is down")
        self.beats.append((trio.current_time(), beat))


async def test_busy_worker_writes_at_most_once_per_min_interval(autojump_clock) -> None:
    """1000 passes a second, each with an item: about one write a second, nothing lost."""
    passes = 0

    async def busy() -> int:
        nonlocal passes
        await trio.sleep(0.001)
        passes += 1  # counted when the pass completes
        return 1

    rec = Recorder()
    hb = Heartbeat("busy", rec, min_interval=1.0)
    with trio.move_on_after(10.0):
        await run_loop("busy", busy, 5.0, heartbeat=hb)
    times = [t for t, _ in rec.beats]
    assert passes > 9000
    assert len(rec.beats) <= 12  # ~1/s plus the first and the final one
    gaps = [b - a for a, b in itertools.pairwise(times[:-1])]  # the final one is on exit
    assert all(g >= 1.0 - 1e-9 for g in gaps)
    assert sum(b.iterations for _, b in rec.beats) == passes
    assert sum(b.items for _, b in rec.beats) == passes


async def test_idle_reactive_worker_still_beats_every_interval(autojump_clock) -> None:
    async def idle() -> int:
        await trio.lowlevel.checkpoint()
        return 0

    rec = Recorder()
    hb = Heartbeat("idle", rec, min_interval=1.0)
    with trio.move_on_after(30.5):
        await run_loop("idle", idle, 5.0, heartbeat=hb)
    times = [round(t) for t, b in rec.beats if b.status == "running"]
    assert times == [0, 5, 10, 15, 20, 25, 30]
    assert rec.beats[-1][1].status == "stopped"


async def test_failed_writes_never_stop_the_worker_and_lose_no_counts(
    autojump_clock, caplog
) -> None:
    passes = 0

    async def work() -> int:
        nonlocal passes
        passes += 1
        await trio.lowlevel.checkpoint()
        return 2

    rec = Recorder(fail_until=5.0)
    hb = Heartbeat("w", rec, min_interval=1.0)

    async def slow_work() -> int:
        await trio.sleep(0.5)
        return await work()

    with trio.move_on_after(8.2):
        await run_loop("w", slow_work, 5.0, heartbeat=hb)
    assert rec.failures >= 4
    assert passes == 16  # the loop never noticed
    assert sum(b.items for _, b in rec.beats) == 2 * passes
    warnings = [r for r in caplog.records if "heartbeat write failed" in r.getMessage()]
    assert len(warnings) == 1  # once per failure streak, not once per attempt


async def test_backoff_status_is_reported(autojump_clock) -> None:
    async def failing() -> int:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("no")

    rec = Recorder()
    hb = Heartbeat("f", rec, min_interval=0.5)
    with trio.move_on_after(4.5):
        await run_loop("f", failing, 1.0, heartbeat=hb)
    statuses = [(b.status, b.consecutive_errors) for _, b in rec.beats]
    assert statuses[0] == ("running", 1)
    assert ("backoff", 5) in statuses
    assert rec.beats[-1][1].status == "stopped"
    assert rec.beats[-1][1].last_error in (None, "RuntimeError: no")


# ---------------------------------------------------------------- real rows

ROWS = [
    HeartbeatRow("node_dispatcher", "core", 2.0),
    HeartbeatRow("callback_dispatcher", "sidecar", 3.0),
]


P1 = ProcessId("host-a", 1, "host-a:1:aa")
P2 = ProcessId("host-b", 2, "host-b:2:bb")
P3 = ProcessId("host-a", 3, "host-a:3:cc")


def _rows(rows: list[dict], worker: str) -> dict[str, dict]:
    return {r["instance_id"]: r for r in rows if r["worker_name"] == worker}


async def test_seed_beat_crash_rows(db: Database) -> None:
    await seed_heartbeats(db, "mainnet", P1, ROWS)
    await seed_heartbeats(db, "testnet", P1, ROWS[:1])
    rows = {r["worker_name"]: r for r in await list_heartbeats(db, "mainnet")}
    assert set(rows) == {"node_dispatcher", "callback_dispatcher"}
    assert rows["node_dispatcher"]["status"] == "starting"
    assert rows["node_dispatcher"]["worker_group"] == "core"
    assert (rows["node_dispatcher"]["host"], rows["node_dispatcher"]["pid"]) == ("host-a", 1)
    assert rows["callback_dispatcher"]["interval_seconds"] == 3.0
    assert [r["worker_name"] for r in await list_heartbeats(db, "testnet")] == ["node_dispatcher"]

    from datetime import UTC, datetime

    ok_at = datetime.now(UTC)
    await write_beat(
        db, "mainnet", P1, ROWS[0], Beat("node_dispatcher", "running", 3, 7, 0, ok_at, None)
    )
    await write_beat(
        db, "mainnet", P1, ROWS[0], Beat("node_dispatcher", "running", 1, 1, 0, None, None)
    )
    # a second process on the same database writes its own row, never the first's
    await seed_heartbeats(db, "mainnet", P2, ROWS)
    await write_beat(
        db,
        "mainnet",
        P2,
        ROWS[0],
        Beat("node_dispatcher", "backoff", 2, 1, 5, None, "OperationalError: gone"),
    )
    mine = _rows(await list_heartbeats(db, "mainnet"), "node_dispatcher")
    assert set(mine) == {P1.instance_id, P2.instance_id}
    first, second = mine[P1.instance_id], mine[P2.instance_id]
    assert (first["iterations"], first["items"], first["status"]) == (4, 8, "running")
    assert first["last_success_at"] == ok_at and first["last_error"] is None
    assert (second["iterations"], second["items"], second["status"]) == (2, 1, "backoff")
    assert second["consecutive_errors"] == 5 and second["last_error"] == "OperationalError: gone"
    assert second["last_beat_at"] is not None

    # a crash is recorded on the crashing process's row only
    await mark_crashed(db, "mainnet", P2, "callback_dispatcher", "RuntimeError: boom")
    crashed = _rows(await list_heartbeats(db, "mainnet"), "callback_dispatcher")
    assert (crashed[P2.instance_id]["status"], crashed[P2.instance_id]["last_error"]) == (
        "crashed",
        "RuntimeError: boom",
    )
    assert crashed[P1.instance_id]["status"] == "starting"
    # ...and the next beat of a live process does not overwrite it
    await write_beat(
        db, "mainnet", P1, ROWS[1], Beat("callback_dispatcher", "running", 1, 0, 0, None, None)
    )
    crashed = _rows(await list_heartbeats(db, "mainnet"), "callback_dispatcher")
    assert crashed[P2.instance_id]["status"] == "crashed"
    # testnet untouched
    [other] = await list_heartbeats(db, "testnet")
    assert other["iterations"] == 0 and other["status"] == "starting"


async def test_worker_view_shows_a_dead_instance_beside_a_live_one(db: Database) -> None:
    await seed_heartbeats(db, "default", P1, ROWS)
    await seed_heartbeats(db, "default", P2, ROWS)
    for p in (P1, P2):
        await write_beat(
            db, "default", p, ROWS[1], Beat("callback_dispatcher", "running", 2, 3, 0, None, None)
        )
    await mark_crashed(db, "default", P2, "callback_dispatcher", "RuntimeError: boom")
    await write_beat(
        db, "default", P1, ROWS[1], Beat("callback_dispatcher", "running", 1, 0, 0, None, None)
    )
    view = {w["worker_name"]: w for w in await readmodels.list_workers(db, network_class="default")}
    worker = view["callback_dispatcher"]
    assert worker["status"] == "crashed", "the live instance masked the dead one"
    assert worker["instance_id"] == P2.instance_id and worker["last_error"] == "RuntimeError: boom"
    assert (worker["live_instances"], worker["dead_instances"]) == (1, 1)
    assert (worker["iterations"], worker["items"]) == (5, 6)  # both processes' work
    assert {(i["host"], i["pid"], i["status"]) for i in worker["instances"]} == {
        ("host-a", 1, "running"),
        ("host-b", 2, "crashed"),
    }
    assert view["node_dispatcher"]["status"] == "starting"
    assert view["node_dispatcher"]["live_instances"] == 2

    # host-b starts the worker again: the restart supersedes its dead instance
    await seed_heartbeats(db, "default", ProcessId("host-b", 9, "host-b:9:dd"), ROWS)
    worker = {
        w["worker_name"]: w for w in await readmodels.list_workers(db, network_class="default")
    }["callback_dispatcher"]
    assert worker["status"] != "crashed" and worker["dead_instances"] == 0
    assert [i["superseded"] for i in worker["instances"] if i["status"] == "crashed"] == [True]


async def test_a_restart_on_another_host_does_not_supersede_a_crash(db: Database) -> None:
    await seed_heartbeats(db, "default", P1, ROWS[:1])
    await mark_crashed(db, "default", P1, "node_dispatcher", "RuntimeError: boom")
    await seed_heartbeats(db, "default", P2, ROWS[:1])  # another host
    [worker] = await readmodels.list_workers(db, network_class="default")
    assert worker["status"] == "crashed" and worker["dead_instances"] == 1
    await seed_heartbeats(db, "default", P3, ROWS[:1])  # host-a again, a later start
    [worker] = await readmodels.list_workers(db, network_class="default")
    assert worker["status"] == "starting" and worker["dead_instances"] == 0


async def test_beat_recreates_a_deleted_row(db: Database) -> None:
    await write_beat(
        db, "default", P1, ROWS[1], Beat("callback_dispatcher", "running", 1, 0, 0, None, None)
    )
    [row] = await list_heartbeats(db, "default")
    assert row["worker_group"] == "sidecar" and row["iterations"] == 1


AGE_ROWS = Query(
    "test/age_heartbeats",
    "UPDATE worker_heartbeats SET updated_at = now() - %(age)s::interval WHERE instance_id = %(i)s",
)


async def test_a_start_prunes_long_silent_rows_of_other_processes_only(db: Database) -> None:
    """Every start adds rows; a start forgets the ones silent past the retention."""
    slow = HeartbeatRow("balance_history_rollup", "sidecar", 86_400.0)
    await seed_heartbeats(db, "default", P1, [*ROWS, slow])
    await seed_heartbeats(db, "testnet", P1, ROWS)
    await seed_heartbeats(db, "default", P2, ROWS)
    # P1 died two hours ago; P2 is alive.
    await db.execute(AGE_ROWS, {"i": P1.instance_id, "age": "2 hours"})
    await seed_heartbeats(db, "default", P3, ROWS, retention_seconds=3600)

    left = {(r["instance_id"], r["worker_name"]) for r in await list_heartbeats(db, "default")}
    # P1's 2-second workers went; its daily worker is kept (ten of its intervals
    # have not passed), P2's live rows and P3's new ones stay.
    assert left == {
        (P1.instance_id, "balance_history_rollup"),
        *((p.instance_id, w.name) for p in (P2, P3) for w in ROWS),
    }
    # another network class is another deployment's: untouched
    assert len(await list_heartbeats(db, "testnet")) == len(ROWS)
    # without a retention nothing is pruned
    await db.execute(AGE_ROWS, {"i": P2.instance_id, "age": "30 days"})
    await seed_heartbeats(db, "default", P3, ROWS)
    assert {r["instance_id"] for r in await list_heartbeats(db, "default")} >= {P2.instance_id}
