"""Where a bounded sweep over a growing table stopped (issue 44 item 5).

The settle sweep (qtg.services.node_attention.settle_unsettled) reads a window
of EXECUTING requests per pass instead of all of them; the window's last key
is kept here, per process, so the next pass goes on from it and a pass past
the end starts again from the beginning. Losing it (a restart) only restarts
the round."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(slots=True)
class SweepCursor:
    #: The last (created_at, id) a pass read; None: start from the beginning.
    after: tuple[datetime, Any] | None = None

    def params(self) -> dict[str, Any]:
        created_at, row_id = self.after if self.after is not None else (None, None)
        return {"after_created_at": created_at, "after_id": row_id}
