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
after it and then die, or a wait held by someone at the reading is skipped.
The age bound makes this process release such a wait no later than `max_age`
after it is due even while it drains back to back (an idle dispatcher reads
again after every empty pass anyway). This process's own waits (a deferral, a
lane sent back to READY with a wait) forget the reading, so each pass releases
until the next reading.

The reading is kept as a deadline on this process's monotonic clock — the
seconds the database said were left, from when it was taken — never as the
database's timestamp against this host's wall clock: a host clock behind the
database's would hold a due wait back by the skew, pass after pass, each empty
pass taking a fresh reading that the age bound never sees grow old.
"""

from __future__ import annotations


class KnownWaits:
    """The last reading of the earliest transient wait, and when it was taken."""

    def __init__(self) -> None:
        self._due_at: float | None = None  # monotonic seconds; None: nothing waits
        self._read_at: float | None = None  # monotonic seconds; None: nothing known

    def read(self, seconds_left: float | None, at: float) -> None:
        """`next_dispatch_due` read at monotonic `at` that the earliest wait is due
        in `seconds_left` by the database's clock (None: nothing waits)."""
        self._due_at = None if seconds_left is None else at + seconds_left
        self._read_at = at

    def forget(self) -> None:
        """This process made a node wait: release on every pass until the next reading."""
        self._due_at, self._read_at = None, None

    def release_needed(self, *, at: float, max_age: float) -> bool:
        """Whether a pass at monotonic `at` must release due waits."""
        if self._read_at is None or at - self._read_at > max_age:
            return True
        return self._due_at is not None and self._due_at <= at
