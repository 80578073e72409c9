"""worker_heartbeats writes: seed at start-up, beats, crash marks (reference "Worker heartbeats").

Each process seeds one row per worker it is about to run, for its network
class (`MG_NETWORK_CLASS`), keyed by its own identity (host, pid, instance id:
`ProcessId`), so an operator sees in the database which processes are
expected to run which workers and which of them stopped beating; one process
never writes another's row (qtg/domain/workers.py folds them per worker). The rate of
beats is bounded by `qtg.runtime.heartbeats.Heartbeat`; this module only
writes. Every write is its own short transaction, never part of a worker's
pass, so a heartbeat can neither hold a pass's locks nor roll back with it.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from qtg.db import Database, sql_family

SQL = sql_family("heartbeats", "seed", "prune", "beat", "mark_crashed", "list")


@dataclass(frozen=True, slots=True)
class Beat:
    """What one heartbeat write says; counters are increments since the last write."""

    worker: str
    status: str  # 'running' | 'backoff' | 'crashed' | 'stopped'
    iterations: int
    items: int
    consecutive_errors: int
    last_success_at: datetime | None
    last_error: str | None


@dataclass(frozen=True, slots=True)
class ProcessId:
    """Who writes a heartbeat row: this process, on this host, in this start."""

    host: str
    pid: int
    #: Unique per process start, so a reused pid (a container restart) is a
    #: new row rather than the continuation of a dead process's row.
    instance_id: str

    @classmethod
    def current(cls) -> ProcessId:
        host, pid = socket.gethostname(), os.getpid()
        return cls(host, pid, f"{host}:{pid}:{secrets.token_hex(4)}")

    def params(self) -> dict[str, Any]:
        return {"instance_id": self.instance_id, "host": self.host, "pid": self.pid}


@dataclass(frozen=True, slots=True)
class HeartbeatRow:
    """What a seeded row needs to know about its worker."""

    name: str
    group: str  # 'core' | 'sidecar'
    interval_seconds: float


async def seed_heartbeats(
    db: Database,
    network_class: str,
    process: ProcessId,
    workers: Sequence[HeartbeatRow],
    *,
    retention_seconds: float | None = None,
) -> None:
    """Create or re-arm (status `starting`) the rows of the workers this process runs.

    With `retention_seconds`, first forget other processes' rows of this
    network class untouched for that long (`prune.sql` says why): start-up is
    the one moment every deployment passes through, and it needs no worker.
    """
    if not workers:
        return
    if retention_seconds is not None:
        await db.execute(
            SQL.prune,
            {
                "network_class": network_class,
                "instance_id": process.instance_id,
                "retention_seconds": float(retention_seconds),
            },
        )
    await db.execute(
        SQL.seed,
        {
            "network_class": network_class,
            **process.params(),
            "names": [w.name for w in workers],
            "groups": [w.group for w in workers],
            "intervals": [float(w.interval_seconds) for w in workers],
        },
    )


async def write_beat(
    db: Database, network_class: str, process: ProcessId, worker: HeartbeatRow, beat: Beat
) -> None:
    await db.execute(
        SQL.beat,
        {
            "network_class": network_class,
            "worker_name": worker.name,
            "worker_group": worker.group,
            "interval_seconds": float(worker.interval_seconds),
            **process.params(),
            "status": beat.status,
            "last_success_at": beat.last_success_at,
            "iterations": beat.iterations,
            "items": beat.items,
            "consecutive_errors": beat.consecutive_errors,
            "last_error": beat.last_error,
        },
    )


async def mark_crashed(
    db: Database, network_class: str, process: ProcessId, worker_name: str, error: str
) -> None:
    await db.execute(
        SQL.mark_crashed,
        {
            "network_class": network_class,
            **process.params(),
            "worker_name": worker_name,
            "last_error": error,
        },
    )


async def list_heartbeats(db: Database, network_class: str) -> list[dict[str, Any]]:
    return await db.fetch(SQL.list, {"network_class": network_class})
