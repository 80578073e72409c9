"""The durability policy for irreversible steps (issue 27).

qtg reads the primary's replication state (sql/durability/replication_state.sql)
at start-up and every MG_DURABILITY_CHECK_INTERVAL_SECONDS; the verdict
(qtg.domain.durability) is shown in /readyz and /metrics. With
MG_REQUIRE_SYNCHRONOUS_REPLICATION (`auto` by default: while standbys
stream; `true`: always; `false`: never, qtg.domain.durability.required) the
dispatcher asks `holds_submits` at the start of every pass, from a fresh
reading: while no synchronous standby acknowledges, it claims nothing (nodes
stay READY) and one notification (`durability_hold`, critical) pages until the
hold ends — until a synchronous standby streams again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from qtg.db import Database, sql_family
from qtg.domain.durability import Durability, holds, judge
from qtg.services.notifications import raise_notification, resolve_notification

if TYPE_CHECKING:
    from qtg.services.context import ServiceContext

log = logging.getLogger("qtg.services.durability")

SQL = sql_family("durability", "replication_state")

HOLD_KIND = "durability_hold"
HOLD_DEDUPE_KEY = "durability:hold"


async def read_durability(db: Database) -> Durability:
    """One reading of the replication state, judged."""
    row = await db.fetchrow(SQL.replication_state)
    assert row is not None
    return judge(row)


class DurabilityWatch:
    """The latest verdict of this process, shared by the dispatcher, /readyz and /metrics."""

    def __init__(
        self,
        *,
        require_synchronous: str,
        observer: Callable[[Durability, bool], None] | None = None,
    ) -> None:
        self.require_synchronous = require_synchronous
        self.latest: Durability | None = None
        self.holding = False
        #: told every reading and hold (the runtime's gauges), as they happen
        self._observer = observer

    def _observe(self) -> None:
        if self._observer is not None and self.latest is not None:
            self._observer(self.latest, self.holding)

    async def check(self, db: Database) -> Durability:
        previous = self.latest
        self.latest = state = await read_durability(db)
        if previous is not None and previous.synchronous != state.synchronous:
            if state.synchronous:
                log.info("a synchronous standby acknowledges commits again")
            else:
                log.warning(
                    "commits are no longer synchronously replicated",
                    extra={"reason": state.reason},
                )
        self._observe()
        return state

    async def holds_submits(self, ctx: ServiceContext) -> bool:
        """Whether this dispatch pass must claim nothing (a fresh reading);
        pages when a hold starts and resolves the page when it ends."""
        if self.require_synchronous == "false":
            return False
        state = await self.check(ctx.db)
        hold = holds(state, self.require_synchronous)
        if hold != self.holding:
            async with ctx.db.transaction() as tx:
                if hold:
                    await raise_notification(
                        tx,
                        kind=HOLD_KIND,
                        severity="critical",
                        dedupe_key=HOLD_DEDUPE_KEY,
                        subject="irreversible submits held: no synchronous standby acknowledges",
                        body=(
                            f"{state.reason}. MG_REQUIRE_SYNCHRONOUS_REPLICATION="
                            f"{self.require_synchronous}: READY nodes wait until a "
                            "synchronous standby streams again (or the setting is false)."
                        ),
                    )
                else:
                    await resolve_notification(tx, HOLD_DEDUPE_KEY)
            if hold:
                log.warning("dispatch held: no synchronous standby", extra={"reason": state.reason})
            else:
                log.info("dispatch hold lifted: a synchronous standby acknowledges")
            self.holding = hold
            self._observe()
        return hold
