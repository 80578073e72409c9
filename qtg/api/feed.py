"""The event feed: movement_events in id order, with no gap and no duplicate.

Why this is not `SELECT … WHERE id > cursor`
-------------------------------------------
An event's id is a sequence value taken at INSERT; transactions commit in
another order (DESIGN §9). If transaction T takes id 100 and T' takes 101 and
commits first, a reader that delivers 101 and moves its cursor past it never
delivers 100. So the feed only ever delivers ids below a *settled horizon*:
an id H such that every event with id <= H is either visible now, or will
never exist.

How the horizon is found (a *probe*)
------------------------------------
In one short transaction, in this order: read L, the last event id handed out
so far (committed or not: sequences are not transactional), then give the
transaction an xid B with `pg_current_xact_id()`; commit. Then wait until a
later snapshot's xmin (the oldest transaction still running) is above B.

Claim: from then on, every event with id <= L is visible or never will be.

Proof. Let event g <= L be inserted by transaction T. Ids come from
`qtg_next_event_id()` (migrations/0006), which gives T its xid *before* it
calls nextval, so xid(T) was assigned before g was taken; g was taken before
L was read (L is the largest value handed out at that moment), and L was read
before B was assigned. xids are assigned in increasing order, so xid(T) < B.
A snapshot with xmin > B has no transaction with an xid <= B still running
(every running xid below the snapshot's xmax is listed, and xmin is the
smallest; B < xmin <= xmax). So T has ended: committed, and g is visible to
every snapshot from now on; or aborted, and g never appears. No transaction
takes an id <= L later, because nextval only goes up.            ∎

Delivery
--------
`position` P is the feed's horizon: every event with id <= P has been read
and offered to every subscriber. A round probes (only when L moved), checks
pending probes against the current xmin (oldest first), and when probe (L, B)
has settled reads the rows in (P, L] in id order, offers each to the
subscribers, and sets P = L. Every id in (P, L] that will ever exist is
visible at that read, so nothing is skipped; each id lies in exactly one such
interval, so nothing is delivered twice. Subscribers still drop any id at or
below the last one they sent, which makes the hand-over from a client's
backlog (read from the table up to the P at which it subscribed) to live
events exact.

Why not order by (xact_id, id), the other known fix: it is gap-free too, but
not causal. A transaction that got its xid early and then waited for a row
lock commits events that follow a younger transaction's events on the same
row, and would be delivered before them (a node's OBSERVING before its
SUBMITTED). Id order is causal for events of one row: the row lock is held to
commit, so the next writer takes its id afterwards.

Costs: a probe gives its own transaction an xid (one per round that found new
events; rounds are rate-limited). Delivery waits for the longest write
transaction that was running at probe time; xmin is cluster-wide, so a long
transaction in another database of the same server delays the stream — it
never makes it skip. Rows inserted with an explicit id, or a sequence set
backwards, are outside the argument (nothing in qtg does either).
"""

from __future__ import annotations

import logging
import math
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import psycopg
import trio

from qtg.db import Database, ListenHub
from qtg.services import readmodels

log = logging.getLogger("qtg.api.feed")

#: Events read per page (publishing and client backlogs).
PAGE_SIZE = 500
#: At most this many probes wait to settle; a newer probe dominates older ones.
MAX_PROBES = 32
#: Rounds are at least this far apart, so a notify storm costs bounded work.
MIN_ROUND_SECONDS = 0.005
#: While a probe waits to settle, re-check xmin after this long, doubling to the max.
SETTLE_POLL_MIN_SECONDS = 0.002
SETTLE_POLL_MAX_SECONDS = 0.25
#: After a database error, retry after this long (doubling to the max).
ERROR_BACKOFF_MAX_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class FeedEvent:
    """One event, encoded once and shared by every subscriber it is sent to."""

    id: int
    request_id: uuid.UUID
    event_type: str
    message: str  # the JSON text a client receives


def event_message(row: dict[str, Any]) -> FeedEvent:
    body = {
        "type": "event",
        "id": row["id"],
        "request_id": row["request_id"],
        "node_key": row["node_key"],
        "event_type": row["event_type"],
        "from_state": row["from_state"],
        "to_state": row["to_state"],
        "data": row["payload"],
        "occurred_at": row["created_at"],
    }
    return FeedEvent(
        id=row["id"],
        request_id=row["request_id"],
        event_type=row["event_type"],
        message=msgspec.json.encode(body).decode(),
    )


@dataclass(frozen=True, slots=True)
class Probe:
    last_id: int
    bound: int


@dataclass(slots=True)
class FeedStats:
    rounds: int = 0
    probes: int = 0
    unsettled_checks: int = 0  # a pending probe looked at and found not yet settled
    published: int = 0
    slow_closed: int = 0
    errors: int = 0


class Subscription:
    """A client's live events: a bounded queue the feed fills without ever waiting.

    When the queue is full the client is not keeping up: the feed marks the
    subscription `overflowed` and closes it; the client drains what was queued
    (a gap-free prefix) and is told where to resume.
    """

    def __init__(
        self,
        feed: EventFeed,
        *,
        request_id: uuid.UUID | None,
        types: frozenset[str] | None,
        buffer: int,
    ) -> None:
        self.feed = feed
        self.request_id = request_id
        self.types = types
        self.start = feed.position  # every event <= start is in the table, not the queue
        self._send, self.events = trio.open_memory_channel[FeedEvent](buffer)
        self.overflowed = False
        self.closed = False

    def matches(self, event: FeedEvent) -> bool:
        if self.request_id is not None and event.request_id != self.request_id:
            return False
        return self.types is None or event.event_type in self.types

    def offer(self, event: FeedEvent) -> None:
        if self.closed or not self.matches(event):
            return
        try:
            self._send.send_nowait(event)
        except trio.WouldBlock:
            self.overflowed = True
            self.feed.stats.slow_closed += 1
            self.close()

    def close(self) -> None:
        """No more events; the queue still yields what it holds, then ends."""
        if not self.closed:
            self.closed = True
            self._send.close()
            self.feed.unsubscribe(self)


@dataclass(slots=True)
class _Probes:
    pending: deque[Probe] = field(default_factory=deque)

    @property
    def newest(self) -> int | None:
        return self.pending[-1].last_id if self.pending else None

    def add(self, probe: Probe) -> None:
        if len(self.pending) >= MAX_PROBES:
            self.pending.pop()  # the new probe has a larger id and bound: it covers it
        self.pending.append(probe)

    def settle(self, xmin: int) -> int | None:
        """Pop every probe settled by `xmin`; return the largest settled id."""
        settled = None
        while self.pending and self.pending[0].bound < xmin:
            settled = self.pending.popleft().last_id
        return settled


class EventFeed:
    """One per process: reads the settled horizon once and fans events out."""

    def __init__(
        self,
        db: Database,
        hub: ListenHub,
        *,
        client_buffer: int = 10_000,
        poll_seconds: float = 1.0,
        page_size: int = PAGE_SIZE,
    ) -> None:
        self.db = db
        self.hub = hub
        self.client_buffer = client_buffer
        self.poll_seconds = poll_seconds
        self.page_size = page_size
        self.position = 0
        self.ready = trio.Event()
        self.stats = FeedStats()
        self._subscribers: set[Subscription] = set()
        self._probes = _Probes()

    # ---- subscribers
    def subscribe(
        self, *, request_id: uuid.UUID | None = None, types: Iterable[str] | None = None
    ) -> Subscription:
        if not self.ready.is_set():
            raise RuntimeError("the event feed is not running yet")
        sub = Subscription(
            self,
            request_id=request_id,
            types=frozenset(types) if types is not None else None,
            buffer=self.client_buffer,
        )
        self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subscribers.discard(sub)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    async def backlog_page(
        self,
        *,
        after: int,
        upto: int,
        request_id: uuid.UUID | None = None,
        types: Iterable[str] | None = None,
    ) -> list[FeedEvent]:
        """Up to one page of settled events in (after, upto], in id order."""
        if after >= upto:
            return []
        rows = await readmodels.events_page(
            self.db,
            after=after,
            upto=upto,
            request_id=request_id,
            types=sorted(types) if types is not None else None,
            limit=self.page_size,
        )
        return [event_message(r) for r in rows]

    # ---- the feed task
    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Find the first settled horizon, report started, then follow `qtg_events`."""
        wake = self.hub.subscribe("qtg_events")
        try:
            await self._start()
            task_status.started()
            backoff = SETTLE_POLL_MIN_SECONDS
            error_backoff = 0.1
            last_round = -math.inf
            while True:
                pause = last_round + MIN_ROUND_SECONDS - trio.current_time()
                if pause > 0:
                    await trio.sleep(pause)  # rate limit, not a wait for a condition
                wake.clear()
                last_round = trio.current_time()
                try:
                    await self._round()
                except psycopg.Error as exc:
                    self.stats.errors += 1
                    log.warning(
                        "event feed round failed; retrying",
                        extra={"error": str(exc).strip().splitlines()[0] if str(exc) else ""},
                    )
                    await trio.sleep(error_backoff)
                    error_backoff = min(error_backoff * 2, ERROR_BACKOFF_MAX_SECONDS)
                    continue
                error_backoff = 0.1
                if self._probes.pending:
                    with trio.move_on_after(backoff):
                        await wake.wait()
                    backoff = min(backoff * 2, SETTLE_POLL_MAX_SECONDS)
                else:
                    backoff = SETTLE_POLL_MIN_SECONDS
                    with trio.move_on_after(self.poll_seconds):
                        await wake.wait()
        finally:
            self.hub.unsubscribe("qtg_events", wake)
            for sub in list(self._subscribers):
                sub.close()

    async def _start(self) -> None:
        last_id, bound = await readmodels.probe_event_horizon(self.db, known=-1)
        assert bound is not None
        wait = SETTLE_POLL_MIN_SECONDS
        while await readmodels.snapshot_xmin(self.db) <= bound:
            self.stats.unsettled_checks += 1
            await trio.sleep(wait)  # polling the database for the condition, with backoff
            wait = min(wait * 2, SETTLE_POLL_MAX_SECONDS)
        self.position = last_id
        self.ready.set()

    async def _round(self) -> None:
        self.stats.rounds += 1
        known = self._probes.newest
        last_id, bound = await readmodels.probe_event_horizon(
            self.db, known=self.position if known is None else known
        )
        if bound is not None:
            self.stats.probes += 1
            self._probes.add(Probe(last_id, bound))
        if not self._probes.pending:
            return
        settled = self._probes.settle(await readmodels.snapshot_xmin(self.db))
        if self._probes.pending:
            self.stats.unsettled_checks += 1
        if settled is not None and settled > self.position:
            await self._publish_upto(settled)

    async def _publish_upto(self, horizon: int) -> None:
        while True:
            page = await self.backlog_page(after=self.position, upto=horizon)
            for event in page:
                for sub in list(self._subscribers):
                    sub.offer(event)
                self.position = event.id
                self.stats.published += 1
            if len(page) < self.page_size:
                break
        self.position = horizon
