"""Whether a commit on this primary survives its failover (issue 27): pure rules.

The write-ahead commit that keeps a submit from being repeated is only as
durable as the servers that acknowledged it. It survives the loss of the
primary when a synchronous standby flushed it before the commit returned:
synchronous_standby_names names a standby that is streaming as `sync` (or
`quorum`), and the session commits at `on` or `remote_apply`. Anything less
(no synchronous standby, synchronous_commit `local`, `off` or `remote_write`)
can lose an acknowledged commit in a failover.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: synchronous_commit levels at which a commit returns only once a synchronous
#: standby has it on disk (`on`) or applied (`remote_apply`).
SURVIVING_LEVELS = frozenset({"on", "remote_apply"})


@dataclass(frozen=True, slots=True)
class Durability:
    synchronous: bool  # a commit now survives the loss of this primary
    synchronous_standby_names: str
    synchronous_commit: str
    standbys: int
    synchronous_standbys: int
    reason: str  # why not synchronous ("" when it is)

    def as_dict(self) -> dict[str, Any]:
        return {
            "synchronous": self.synchronous,
            "synchronous_standby_names": self.synchronous_standby_names,
            "synchronous_commit": self.synchronous_commit,
            "standbys": self.standbys,
            "synchronous_standbys": self.synchronous_standbys,
            "reason": self.reason,
        }


def judge(row: Mapping[str, Any]) -> Durability:
    """The verdict on one reading of sql/durability/replication_state.sql."""
    names = str(row["synchronous_standby_names"] or "").strip()
    level = str(row["synchronous_commit"] or "")
    standbys = int(row["standbys"] or 0)
    synchronous_standbys = int(row["synchronous_standbys"] or 0)
    reason = ""
    if row.get("in_recovery"):
        reason = "the server is a standby (read-only)"
    elif not names:
        reason = "no synchronous standby configured (synchronous_standby_names is empty)"
    elif int(row.get("unreadable") or 0) and not synchronous_standbys:
        reason = (
            "pg_stat_replication is not readable by this role "
            "(grant pg_monitor or pg_read_all_stats)"
        )
    elif not synchronous_standbys:
        reason = f"no synchronous standby streaming ({standbys} standby(s) connected)"
    elif level not in SURVIVING_LEVELS:
        reason = f"synchronous_commit is {level!r} for qtg's sessions (needs on or remote_apply)"
    return Durability(
        synchronous=not reason,
        synchronous_standby_names=names,
        synchronous_commit=level,
        standbys=standbys,
        synchronous_standbys=synchronous_standbys,
        reason=reason,
    )


#: MG_REQUIRE_SYNCHRONOUS_REPLICATION's values.
REQUIRE_POLICIES = ("auto", "true", "false")


def required(state: Durability, policy: str) -> bool:
    """Whether MG_REQUIRE_SYNCHRONOUS_REPLICATION (`policy`) asks for a synchronous standby
    in this reading. `auto`: while standbys stream (a failover to one of them is possible)
    — a lone server has no failover to lose commits in; a restore from a backup is the
    ledger's check before it signs (qtg.domain.ledger)."""
    if policy == "true":
        return True
    if policy == "auto":
        return state.standbys > 0
    return False


def holds(state: Durability, policy: str) -> bool:
    """Whether irreversible submits wait: a synchronous standby is required and none
    acknowledges."""
    return required(state, policy) and not state.synchronous


def unknown(reason: str) -> Durability:
    """No reading (the database did not answer): not known to be synchronous."""
    return Durability(False, "", "", 0, 0, reason)
