"""The money path's right of way over waiting work (issue 29: a fresh node's pickup while
thousands of movements wait).

One runtime's workers share one trio thread and one pool. While the observer keeps
dozens of observations in flight, every step of a dispatch pass — the claim's round
trip, each prepare, the write-ahead commit — waits its turn behind theirs, and a fresh
node's pickup took 3.3 times its idle time at 10,000 in flight. The dispatcher holds
`RightOfWay.dispatching()` from its claim to its write-ahead commit; the observer calls
`give_way()` before each claim and each provider call, and waits while a dispatch is
in that stretch — for at most MG_NODE_OBSERVE_GIVE_WAY_MS from the stretch's
start: a stretch that runs long (a prepare that asks a slow chain) holds the observer
back by that much once, not for as long as it runs, and a dispatcher that drains back
to back still leaves the observer the gaps between its passes — waiting work slows
while money moves, it never stops.

Off by default (MG_NODE_OBSERVE_GIVE_WAY_MS=0) since the observer's provider calls
in flight together are one batch call (qtg/providers/coalesce.py) and its outcomes one
statement per kind (qtg/db/deferred.py): they no longer crowd the dispatcher out, and
giving way only held observation back while approvals arrived — three runs each of
`python -m bench.waiting --sizes 10000 --runtimes 1` (docs/benchmarks.md): the lag p99
right after a burst of 10,000 approvals 15.6 to 26.4 s with 50 ms, 1.5 to 9.8 s with 0; a
fresh node's pickup while they wait 1.2 to 2.6x its idle time with 50 ms, 1.0 to 1.9x with 0.
A runtime whose providers cannot batch may want it back (50 was the default).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio


class RightOfWay:
    """Dispatch stretches in progress in this process, and the event that ends them."""

    def __init__(self) -> None:
        self._dispatching = 0
        self._since = 0.0  # trio.current_time() when the stretches running began
        self._clear: trio.Event | None = None

    @property
    def busy(self) -> bool:
        return self._dispatching > 0

    @contextmanager
    def dispatching(self) -> Iterator[None]:
        """A dispatch pass from its claim to its write-ahead commit."""
        if self._dispatching == 0:
            self._since = trio.current_time()
        self._dispatching += 1
        try:
            yield
        finally:
            self._dispatching -= 1
            if self._dispatching == 0 and self._clear is not None:
                self._clear.set()
                self._clear = None

    async def give_way(self, bound: float) -> None:
        """Return at once unless a dispatch stretch is running, younger than `bound`
        seconds; else once none is, or once it is that old. A stretch takes a few
        milliseconds (claim, prepare, write-ahead commit: two round trips, with the
        sandbox); the bound matters when one runs long."""
        if self._dispatching == 0:
            return
        left = self._since + bound - trio.current_time()
        if left <= 0:
            return
        if self._clear is None:
            self._clear = trio.Event()
        with trio.move_on_after(left):
            await self._clear.wait()
