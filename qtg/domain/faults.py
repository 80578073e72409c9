"""Rules for the money path under faults (issue 10): how often recovery asks
again, when a provably unsent attempt gets a new one, each lane's grace
cutoff, how far one claim walk goes, and who may decide what.

Pure functions, so that they survive any rewrite of the services that apply
them (batch claims, another database edge).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from qtg.domain.derive import NodeView, has_side_effect

#: Claims one dispatch transaction tries before it gives up and a new one goes
#: on: each claim is a savepoint (a subtransaction), and past 64 of them a
#: PostgreSQL backend's subtransaction cache overflows, which slows every
#: snapshot on the server.
CLAIM_TRIES_PER_TRANSACTION = 32
#: Claims one dispatch pass tries in all (over its transactions) before it
#: reports "nothing claimable" and waits for a wake-up or its interval.
CLAIM_TRIES_PER_PASS = 256


def recovery_retry_delay(undecided: int, base_seconds: float, max_seconds: float) -> float:
    """Seconds until a node whose recover() could not tell is asked again.

    `undecided` counts the undecided answers so far, this one included (>= 1):
    base, 2 * base, 4 * base … never more than `max_seconds`. The delay is
    stored on the node (next_recover_at), so it paces every process, not
    only the one that asked.
    """
    exponent = max(0, undecided - 1)
    if exponent >= 64:  # 2 ** 64 * base overflows nothing in Python, but is absurd
        return float(max_seconds)
    return float(min(base_seconds * 2**exponent, max_seconds))


def transient_retry_seconds(tries_before: int, hint_seconds: float, max_seconds: float) -> float:
    """Seconds a READY node waits after a transient fault before any side effect
    (issue 24 item 5: an RPC outage, a fee above its cap — not a failure).

    `tries_before` counts the transient faults in a row before this one: the
    provider's hint, then twice it, four times … capped at `max_seconds`, but
    never below the hint (a drift hold asks for 60 s whatever the cap)."""
    hint = max(float(hint_seconds), 0.1)
    exponent = min(max(0, tries_before), 32)
    return float(min(hint * 2**exponent, max(float(max_seconds), hint)))


def may_attempt_again(attempt_no: int, max_attempts: int) -> bool:
    """After recover() proved that attempt `attempt_no` never happened: True if
    the node may go back to READY for attempt `attempt_no + 1` (beyond the
    reference, which ends it FAILED); False once the attempts are used up."""
    return attempt_no < max_attempts


def submitting_grace_seconds(
    lane: str, per_lane: Mapping[str, float | None], default: float
) -> float:
    """The grace cutoff of a SUBMITTING node in recovery lane `lane`: the lane's
    own setting when it has one, else the general one (reference §3)."""
    own = per_lane.get(lane)
    return float(default if own is None else own)


def completed_side_effects(nodes: Iterable[NodeView]) -> list[str]:
    """Keys of the action nodes whose side effect completed (money moved)."""
    return [n.node_key for n in nodes if has_side_effect(n)]


def four_eyes_violation(
    decision: str, created_by: str, actor: str, node: Mapping[str, Any]
) -> str | None:
    """Why `actor` may not take `decision` on `node` alone, or None.

    The creator of a movement cannot approve it (DESIGN §7); by the same
    reasoning the creator alone may not make anything move money after the
    approval: retrying a FAILED action node (a new submission) or completing a
    manual node (which releases the nodes after it). Another principal must.
    """
    if actor != created_by:
        return None
    if decision == "retry" and node["node_kind"] == "action":
        return "four-eyes: the creator of a movement cannot retry its action node (it resubmits)"
    if decision == "complete_manual":
        return "four-eyes: the creator of a movement cannot complete its manual node"
    return None
