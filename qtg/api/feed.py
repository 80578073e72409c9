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
Every event id comes from `qtg_next_event_id()` (migrations/0006), which
first takes the shared transaction-level advisory lock K = (7435367, 1) and
only then calls nextval. A probe runs two statements, in this order: read L,
the last event id handed out so far (committed or not: sequences are not
transactional); then list W, the transactions of this database holding K
(pg_locks). The probe is *settled* once a later look at pg_locks finds none
of W still holding K.

Claim: once probe (L, W) is settled, every event with id <= L is visible to
every later snapshot, or will never exist.

Proof. Let event g <= L be inserted by transaction T. T took K before g was
taken, g was taken before L was read (L is the largest value handed out at
that moment), and L was read before W was listed. A transaction releases K
only at its end, after its commit (or abort) is visible to new snapshots
(PostgreSQL releases locks after marking the transaction finished). So either
T had released K before W was listed — T's outcome was already visible — or T
held K then, so T is in W, and the settling look found T no longer holding
K: its outcome is visible from then on. Visible outcome: committed, and g is
visible to every later snapshot; or aborted (or its subtransaction rolled
back), and g never appears. No transaction takes an id <= L later, because
nextval only goes up.                                              ∎

Delivery
--------
`position` P is the feed's horizon: every event with id <= P has been read
and offered to every subscriber. A round probes (a new pending probe only when
L moved), settles pending probes against the writers running now (oldest
first), and when probe (L, W) has settled reads the rows in (P, L] in id order, offers each to the
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

Why a lock and not xids: "deliver only rows whose xact_id is below the
snapshot's xmin" also works, but xmin is cluster-wide: any long write
transaction in any database of the server (a batch job, an idle-in-
transaction session, another application) would freeze the stream. K is per
database and held only by transactions that write events, so the stream waits
exactly for the transactions that can change what it must deliver, and for
nothing else. Costs: one shared lock per event-writing transaction (shared
locks never wait for each other), and one read of pg_locks per round (rounds
are rate-limited). Rows inserted with an explicit id, or a sequence set
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
#: While a probe waits to settle, look again after this long, doubling to the max.
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
    writers: frozenset[str]  # virtual transaction ids holding the writer lock at probe time


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
            # Drop the newest pending one: the new probe has a larger id, and
            # its writer list includes every writer of the dropped one still
            # running, so it settles no sooner and covers more.
            self.pending.pop()
        self.pending.append(probe)

    def settle(self, running: frozenset[str]) -> int | None:
        """Pop the probes (oldest first) none of whose writers still runs; the largest id."""
        settled = None
        while self.pending and not (self.pending[0].writers & running):
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

    def close_subscribers(self) -> None:
        """End every subscription (shutdown): clients drain their queue and are told why."""
        for sub in list(self._subscribers):
            sub.close()

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
                except Exception as exc:
                    # A round is safe to repeat: `position` only moves past events
                    # already offered. A database outage (or a bug) must not take
                    # the API, let alone the runtime around it, down with the feed.
                    self.stats.errors += 1
                    log.warning(
                        "event feed round failed; retrying",
                        exc_info=not isinstance(exc, psycopg.Error),
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
            self.close_subscribers()

    async def _start(self) -> None:
        last_id, writers = await readmodels.probe_event_horizon(self.db)
        self._probes.add(Probe(last_id, writers))
        wait = SETTLE_POLL_MIN_SECONDS
        while True:
            _, running = await readmodels.probe_event_horizon(self.db)
            if self._probes.settle(running) is not None:
                break
            self.stats.unsettled_checks += 1
            await trio.sleep(wait)  # polling the database for the condition, with backoff
            wait = min(wait * 2, SETTLE_POLL_MAX_SECONDS)
        self.position = last_id
        self.ready.set()

    async def _round(self) -> None:
        self.stats.rounds += 1
        last_id, running = await readmodels.probe_event_horizon(self.db)
        newest = self._probes.newest
        if last_id > (self.position if newest is None else newest):
            self.stats.probes += 1
            self._probes.add(Probe(last_id, running))
        if not self._probes.pending:
            return
        settled = self._probes.settle(running)
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
