"""What one process's dispatcher knows of the READY nodes waiting out a transient
fault (issue 24 item 5: `dispatch_not_before`), so that a pass releases due
waits only when one may be due (issue 29 item 5: the pickup).

Waiting nodes are out of the claim's walk until `sql/dispatch/release_due.sql`
puts them back. That statement used to ride ahead of every dispatch claim — a
transaction and a statement more in the pickup's first round trip, almost
always for nothing: a wait is an outage's backoff, rare and seconds long. The
dispatcher's loop already reads the earliest wait after every pass that found
nothing (`next_dispatch_due`, to sleep until it); that reading is kept here, and
a pass releases when no reading is known, when the earliest wait it read is
due, or when the reading is older than `max_age`.

Why the age bound: a reading can miss a wait — another runtime may defer a node
after it and then die, a wait held by someone at the reading is skipped, and
the reading's due time is the database's clock compared with this host's. The
age bound makes this process release such a wait no later than `max_age` after
it is due even while it drains back to back (an idle dispatcher reads again
after every empty pass anyway). This process's own
waits (a deferral, a lane sent back to READY with a wait) forget the reading,
so each pass releases until the next reading.
"""

from __future__ import annotations

from datetime import datetime


class KnownWaits:
    """The last reading of the earliest transient wait, and when it was taken."""

    def __init__(self) -> None:
        self._earliest: datetime | None = None
        self._read_at: float | None = None  # monotonic seconds; None: nothing known

    def read(self, earliest: datetime | None, at: float) -> None:
        """`next_dispatch_due` read `earliest` (None: nothing waits) at `at`."""
        self._earliest, self._read_at = earliest, at

    def forget(self) -> None:
        """This process made a node wait: release on every pass until the next reading."""
        self._earliest, self._read_at = None, None

    def release_needed(self, *, at: float, wall: datetime, max_age: float) -> bool:
        """Whether a pass at monotonic `at` (wall clock `wall`) must release due waits."""
        if self._read_at is None or at - self._read_at > max_age:
            return True
        return self._earliest is not None and self._earliest <= wall
