"""Prometheus instruments of one runtime process (issue 16, part 1).

One `RuntimeMetrics` per runtime, each with its own `CollectorRegistry` (never
the library's global default registry), so several runtimes or apps in one
test process never share or collide on series.

What is measured where:
- workers: `WorkerMetrics`, fed by the one worker loop (qtg/runtime/loop.py);
- nodes: pickup latency and time in each state (`node_left_state`), fed by
  the dispatcher and the observer from their claims' database clock (the
  state's start is movement_request_nodes.state_entered_at, migration 0016);
- API requests: `qtg.api.app.RequestMetrics` middleware, by route *template*;
- backlogs and the observer's lag: read from the database at scrape time by
  two bounded queries in one round trip (sql/metrics/backlog.sql,
  sql/metrics/observe_lag.sql), cached `BACKLOG_CACHE_SECONDS` so that many
  scrapers cost at most one read per second per process.

Process-wide facts (network class, worker set, instance id) are labels of one
info metric, `qtg_process_info`, not constant labels on every series — the
usual Prometheus practice (join with `* on(instance) group_left`). The label
is `instance_id` (the heartbeat rows' id), not `instance`, which Prometheus
sets itself from the scrape target.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

import trio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from qtg.db import Database, Query, sql_family
from qtg.domain.redaction import describe_error

__all__ = ["CONTENT_TYPE_LATEST", "RuntimeMetrics", "WorkerMetrics"]

log = logging.getLogger("qtg.services.metrics")

SQL = sql_family("metrics", "backlog", "walk_only", "observe_lag")

#: Many scrapers → at most one backlog query per this many seconds per process.
BACKLOG_CACHE_SECONDS = 1.0

#: An observable node counts as overdue once its observation has been due this
#: long: the observer's own lag at 10,000 in flight is a fraction of a second
#: (docs/benchmarks.md, Waiting work), so a node a second late is one it is
#: not keeping up with.
OBSERVE_OVERDUE_SECONDS = 1.0
#: The overdue count stops here: a scrape reads at most this many index entries
#: however far behind the observer is (the gauge then means "at least").
OBSERVE_OVERDUE_CAP = 10_000

#: Every (kind, state) the backlog query can return; reported as 0 when absent,
#: so a drained backlog reads 0 instead of vanishing.
BACKLOG_SERIES: tuple[tuple[str, str], ...] = (
    ("node", "READY"),
    ("node", "SUBMITTING"),
    ("node", "SUBMITTED"),
    ("node", "OBSERVING"),
    ("node", "UNKNOWN"),
    ("request", "MANUAL_INTERVENTION"),
    ("callback", "pending"),
    ("callback", "dlq"),
    ("audit_outbox", "pending"),
)

_PASS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Pickup: issue 15's target is p50 2 ms / p99 5 ms, so fine buckets at the bottom.
_PICKUP_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Time in a state: milliseconds (a sandbox node) to an hour (a bridge's attestation).
_STATE_BUCKETS = (
    0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0
)  # fmt: skip


class WorkerMetrics:
    """One worker's series, bound to its name once (no label lookup per pass)."""

    def __init__(self, metrics: RuntimeMetrics, name: str) -> None:
        self._passes_ok = metrics.worker_passes.labels(worker=name, outcome="ok")
        self._passes_error = metrics.worker_passes.labels(worker=name, outcome="error")
        self._items = metrics.worker_items.labels(worker=name)
        self._errors = metrics.worker_errors.labels(worker=name)
        self._duration = metrics.worker_pass_seconds.labels(worker=name)
        self._last_success = metrics.worker_last_success.labels(worker=name)
        self._in_backoff = metrics.worker_in_backoff.labels(worker=name)

    def succeeded(self, items: int, seconds: float) -> None:
        self._passes_ok.inc()
        if items > 0:
            self._items.inc(items)
        self._duration.observe(seconds)
        self._last_success.set(time.time())
        self._in_backoff.set(0)

    def failed(self, seconds: float, in_backoff: bool) -> None:
        self._passes_error.inc()
        self._errors.inc()
        self._duration.observe(seconds)
        self._in_backoff.set(1 if in_backoff else 0)


def backlog_reads(network_class: str) -> tuple[tuple[Query, dict[str, Any] | None], ...]:
    """The statements of one backlog read, in their order, for one transaction:
    the backlogs, then the observer's lag after sql/metrics/walk_only.sql (which
    holds for the rest of the transaction only; it says why)."""
    return (
        (SQL.backlog, {"network_class": network_class}),
        (SQL.walk_only, None),
        (
            SQL.observe_lag,
            {
                "network_class": network_class,
                "overdue_seconds": OBSERVE_OVERDUE_SECONDS,
                "cap": OBSERVE_OVERDUE_CAP,
            },
        ),
    )


class RuntimeMetrics:
    """The registry and every instrument of one process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.info = Info(
            "qtg_process", "This process: network class, worker set, instance", registry=r
        )
        self.worker_passes = Counter(
            "qtg_worker_passes", "Worker passes, by outcome", ["worker", "outcome"], registry=r
        )
        self.worker_items = Counter(
            "qtg_worker_items", "Items processed by worker passes", ["worker"], registry=r
        )
        self.worker_errors = Counter(
            "qtg_worker_errors", "Worker passes that raised", ["worker"], registry=r
        )
        self.worker_pass_seconds = Histogram(
            "qtg_worker_pass_duration_seconds",
            "Duration of one worker pass",
            ["worker"],
            buckets=_PASS_BUCKETS,
            registry=r,
        )
        self.worker_last_success = Gauge(
            "qtg_worker_last_success_timestamp_seconds",
            "Unix time of the worker's last successful pass",
            ["worker"],
            registry=r,
        )
        self.worker_in_backoff = Gauge(
            "qtg_worker_in_backoff",
            "1 while the worker waits out an error backoff",
            ["worker"],
            registry=r,
        )
        self.http_requests = Counter(
            "qtg_http_requests",
            "API requests, by method, route template and status",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_seconds = Histogram(
            "qtg_http_request_duration_seconds",
            "API request duration, by method and route template",
            ["method", "route"],
            buckets=_HTTP_BUCKETS,
            registry=r,
        )
        self.stream_clients = Gauge(
            "qtg_stream_clients", "Connected /v3/stream WebSocket clients", registry=r
        )
        self.backlog = Gauge(
            "qtg_backlog",
            "Backlog rows in the database at scrape time (cached 1 s), by kind and state",
            ["kind", "state"],
            registry=r,
        )
        self.observe_overdue = Gauge(
            "qtg_observe_overdue_nodes",
            "Observable nodes of this network class whose observation has been due for "
            f"over {OBSERVE_OVERDUE_SECONDS:g} s at scrape time (counted up to "
            f"{OBSERVE_OVERDUE_CAP:,}): the observer is not keeping up",
            registry=r,
        )
        self.observe_lag = Gauge(
            "qtg_observe_lag_seconds",
            "How long the longest-due observation of this network class has been due "
            "at scrape time (0 when none is due)",
            registry=r,
        )
        self.backlog_queries = Counter(
            "qtg_metrics_backlog_queries",
            "Backlog reads this process ran for scrapes (at most one per second)",
            registry=r,
        )
        self.backlog_errors = Counter(
            "qtg_metrics_backlog_errors",
            "Backlog reads that failed (the previous values are kept)",
            registry=r,
        )
        self.node_pickup_seconds = Histogram(
            "qtg_node_pickup_seconds",
            "READY to claimed by a dispatcher: the claim's database clock minus the time "
            "the node became READY",
            buckets=_PICKUP_BUCKETS,
            registry=r,
        )
        self.node_state_seconds = Histogram(
            "qtg_node_state_seconds",
            "Time a node spent in a state, observed when a worker of this process moved "
            "it on (READY: claimed; SUBMITTING: submit recorded; SUBMITTED, OBSERVING: "
            "observed on or finished)",
            ["state"],
            buckets=_STATE_BUCKETS,
            registry=r,
        )
        self.database_synchronous = Gauge(
            "qtg_database_synchronous_replication",
            "1 when a commit on the primary is acknowledged by a synchronous standby "
            "(survives a failover), 0 when not, -1 before the first reading (issue 27)",
            registry=r,
        )
        self.database_synchronous.set(-1)
        self.database_synchronous_standbys = Gauge(
            "qtg_database_synchronous_standbys",
            "Standbys streaming as sync or quorum, at the last durability check",
            registry=r,
        )
        self.dispatch_held = Gauge(
            "qtg_dispatch_held_for_durability",
            "1 while MG_REQUIRE_SYNCHRONOUS_REPLICATION holds the dispatcher",
            registry=r,
        )
        self._backlog_lock = trio.Lock()
        self._backlog_at: float | None = None

    def describe_process(
        self, *, network_class: str, workers: Iterable[str], instance: str
    ) -> None:
        """Set `qtg_process_info`; the worker set is the sorted names joined by '+'."""
        self.info.info(
            {
                "network_class": network_class,
                "workers": "+".join(sorted(workers)) or "none",
                "instance_id": instance,
            }
        )

    def durability(self, synchronous: bool | None, standbys: int, held: bool) -> None:
        """The durability check's verdict (None: the database did not answer)."""
        self.database_synchronous.set(-1 if synchronous is None else int(synchronous))
        self.database_synchronous_standbys.set(standbys)
        self.dispatch_held.set(int(held))

    def node_left_state(self, state: str, seconds: float) -> None:
        """A worker moved a node out of `state` after `seconds` in it (leaving
        READY is a pickup, so it also feeds qtg_node_pickup_seconds)."""
        seconds = max(0.0, float(seconds))
        self.node_state_seconds.labels(state=state).observe(seconds)
        if state == "READY":
            self.node_pickup_seconds.observe(seconds)

    def worker(self, name: str) -> WorkerMetrics:
        return WorkerMetrics(self, name)

    async def refresh_backlog(self, db: Database, network_class: str) -> None:
        """Re-read the backlogs and the observer's lag unless read less than
        BACKLOG_CACHE_SECONDS ago: both queries in one round trip, the lag's
        after sql/metrics/walk_only.sql (it says why).

        The lock makes concurrent scrapes wait for the one read in flight
        instead of each running their own.
        """
        async with self._backlog_lock:
            now = trio.current_time()
            if self._backlog_at is not None and now - self._backlog_at < BACKLOG_CACHE_SECONDS:
                return
            self.backlog_queries.inc()
            try:
                async with db.transaction() as tx:
                    rows, _, (lag,) = await tx.fetch_each(
                        *backlog_reads(network_class), commit=True
                    )
            except Exception as exc:  # a scrape still answers, with the last values
                self.backlog_errors.inc()
                log.warning("backlog query failed", extra={"error": describe_error(exc)})
                return
            finally:
                self._backlog_at = trio.current_time()
            found = {(row["kind"], row["state"]): row["total"] for row in rows}
            for kind, state in BACKLOG_SERIES:
                self.backlog.labels(kind=kind, state=state).set(found.get((kind, state), 0))
            self.observe_overdue.set(lag["overdue"])
            self.observe_lag.set(max(0.0, lag["lag_seconds"]))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
