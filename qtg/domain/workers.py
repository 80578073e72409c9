"""The per-worker view, folded from per-process heartbeat rows (issue 17 item 5).

Every process writes its own row for each worker it runs, keyed by
(network_class, worker_name, instance_id) with its host and pid. An operator
asks about workers, so the view folds those rows into one entry per worker,
under one rule: **a live instance never masks a dead one**. A crashed
instance, or one that claims to run but stopped beating (stale), makes the
worker `crashed` / `stale` even while another process runs it fine.

The one exception is a restart: a dead instance is *superseded* when an
instance on the same host started after the dead one's last sign of life
(systemd, a container restart, an operator running it again). Without it a
crash from last week would flag the worker forever.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

LIVE = frozenset({"starting", "running", "backoff"})
#: Which instance speaks for the worker: the most severe first.
SEVERITY = {"crashed": 0, "stale": 1, "backoff": 2, "running": 3, "starting": 4, "stopped": 5}

INSTANCE_FIELDS = (
    "instance_id", "host", "pid", "status", "started_at", "last_beat_at", "last_success_at",
    "iterations", "items", "consecutive_errors", "last_error", "beat_age_seconds", "stale",
)  # fmt: skip


def _dead(row: Mapping[str, Any]) -> bool:
    return row["status"] == "crashed" or bool(row["stale"])


def _last_sign_of_life(row: Mapping[str, Any]) -> datetime:
    when: datetime = row["last_beat_at"] or row["started_at"] or row["updated_at"]
    return when


def superseded(row: Mapping[str, Any], rows: Iterable[Mapping[str, Any]]) -> bool:
    """A dead instance whose host has started the worker again since it died."""
    if not _dead(row):
        return False
    died = _last_sign_of_life(row)
    return any(
        other is not row
        and other["host"] == row["host"]
        and other["started_at"] is not None
        and other["started_at"] > died
        for other in rows
    )


def _severity(row: Mapping[str, Any]) -> int:
    return SEVERITY["stale"] if row["stale"] else SEVERITY[row["status"]]


def fold_worker(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """One worker's entry from its instances' rows (all of one worker, at least one)."""
    instances = [
        {**{k: r[k] for k in INSTANCE_FIELDS}, "superseded": superseded(r, rows)} for r in rows
    ]
    current = [r for r, i in zip(rows, instances, strict=True) if not i["superseded"]]
    live = [r for r in current if r["status"] in LIVE and not r["stale"]]
    dead = [r for r in current if _dead(r)]
    # The instance that speaks for the worker: the most severe of the current
    # ones, the most recent among equals.
    speaker = min(current, key=lambda r: (_severity(r), -_last_sign_of_life(r).timestamp()))
    latest = max(rows, key=_last_sign_of_life)
    return {
        "network_class": latest["network_class"],
        "worker_name": latest["worker_name"],
        "worker_group": latest["worker_group"],
        "status": speaker["status"],
        "instance_id": speaker["instance_id"],
        "interval_seconds": latest["interval_seconds"],
        "started_at": speaker["started_at"],
        "last_beat_at": _latest(r["last_beat_at"] for r in rows),
        "last_success_at": _latest(r["last_success_at"] for r in rows),
        "iterations": sum(r["iterations"] for r in rows),
        "items": sum(r["items"] for r in rows),
        "consecutive_errors": speaker["consecutive_errors"],
        "last_error": speaker["last_error"],
        "beat_age_seconds": speaker["beat_age_seconds"],
        "stale_after_seconds": speaker["stale_after_seconds"],
        "stale": any(r["stale"] for r in current),
        "live_instances": len(live),
        "dead_instances": len(dead),
        "instances": instances,
    }


def fold_workers(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per-process rows (ordered by worker) → one entry per worker, in that order."""
    by_worker: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_worker.setdefault(row["worker_name"], []).append(row)
    return [fold_worker(group) for group in by_worker.values()]


def _latest(values: Iterable[datetime | None]) -> datetime | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None
