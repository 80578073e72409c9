"""This process's liveness beat (issue 43 item 7): its runtime_processes row,
written every fifth of MG_NODE_RECOVERY_DEAD_OWNER_SECONDS, so that another
runtime's recovery takes the nodes this process left SUBMITTING within seconds
of its death (qtg.services.liveness says how).

A failed beat is logged and retried at the next period: it must never take the
runtime down. A beat that cannot be written for the whole bound makes this
process look dead to the others — which costs a recover() call on a node
whose submit has not yet locked it, never a second side effect (the submit
holds its node row; recovery writes under a lease, migrations/0057).
"""

from __future__ import annotations

import logging

import trio

from qtg.db import Database
from qtg.services import liveness
from qtg.services.heartbeats import ProcessId

log = logging.getLogger("qtg.runtime.liveness")

#: Beats per MG_NODE_RECOVERY_DEAD_OWNER_SECONDS: four may fail before the
#: process looks dead.
BEATS_PER_BOUND = 5


async def keep_alive(
    db: Database,
    process: ProcessId,
    network_class: str,
    dead_owner_seconds: float,
    retention_seconds: float,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Beat once (before the workers start: a write-ahead names a live owner),
    then every `dead_owner_seconds / BEATS_PER_BOUND` for ever."""
    period = dead_owner_seconds / BEATS_PER_BOUND
    failing = False
    try:
        await liveness.beat(db, process, network_class)
        await liveness.prune(db, retention_seconds)
    except Exception as exc:
        failing = True
        log.warning("liveness beat failed; retrying", extra={"error": type(exc).__name__})
    task_status.started()
    while True:
        await trio.sleep(period)
        try:
            await liveness.beat(db, process, network_class)
        except Exception as exc:
            if not failing:
                log.warning(
                    "liveness beat failed; other runtimes may soon take this process for dead",
                    extra={"error": f"{type(exc).__name__}: {exc}"},
                )
            failing = True
        else:
            if failing:
                log.info("liveness beats work again")
            failing = False
