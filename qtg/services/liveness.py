"""runtime_processes writes: this process says it is alive (issue 43 item 7).

A node left SUBMITTING by a process that is gone must be recovered in seconds,
not after MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS. The write-ahead records
the owning process (`submitting_owner`, its instance id); each runtime
process beats its row every fifth of MG_NODE_RECOVERY_DEAD_OWNER_SECONDS
(`qtg.runtime.liveness`); recovery takes a SUBMITTING node whose owner has not
beaten for that long at once (sql/recover/list_candidates.sql). Each beat is
its own one-statement transaction, never part of a pass.
"""

from __future__ import annotations

from qtg.db import Database, sql_family
from qtg.services.heartbeats import ProcessId

SQL = sql_family("liveness", "beat", "prune")


async def beat(db: Database, process: ProcessId, network_class: str) -> None:
    """This process is alive now."""
    await db.execute(SQL.beat, {**process.params(), "network_class": network_class})


async def prune(db: Database, retention_seconds: float) -> int:
    """Forget processes gone for `retention_seconds` that own no SUBMITTING node."""
    return await db.execute(SQL.prune, {"retention_seconds": retention_seconds})
