"""The request state implied by its node states (reference: "derive_request_state() details").

The rules are applied in the reference's priority order; the first that matches wins:

1. every node COMPLETED or SKIPPED                              -> COMPLETED
2. a FAILED or UNKNOWN node and a completed side-effect node    -> MANUAL_INTERVENTION
3. a FAILED node (and no completed side effect)                 -> FAILED
4. a READY `manual_*` node and no node SUBMITTING/SUBMITTED/OBSERVING -> WAITING_MANUAL_ACTION
5. otherwise                                                    -> None (leave the request as it is)

Beyond the reference (issue 10), between rules 2 and 3: an UNKNOWN node that no
worker will resolve by itself (an observation timeout, which recovery leaves
for an operator, reference §2) with nothing in flight -> MANUAL_INTERVENTION.
Without it a timed-out node beside a FAILED sibling derived None, the request
stayed EXECUTING and nobody was paged. Every path that leaves such a request
(the observer's timeout, a sibling failing later, recovery) goes through this
one rule, so a request in which nothing more can happen without a person
always reaches MANUAL_INTERVENTION (and its request_attention event).

An UNKNOWN node with no completed side effect derives None on purpose: node_recovery
resolves it, and only after that is the request's fate known.

Beyond the reference, one guard, for DAGs with parallel branches: rules 2-4 wait
while another branch still has money in flight. The observer and recovery only
work on EXECUTING requests, so moving the request to FAILED, MANUAL_INTERVENTION
or WAITING_MANUAL_ACTION while a sibling is SUBMITTING/SUBMITTED/OBSERVING would
stop watching a transfer that is really happening (and rule 3 also waits for
UNKNOWN siblings, whose outcome recovery has yet to find; rule 4 also for READY
non-manual siblings, which the dispatcher would otherwise never start). Once the
siblings settle, the same rules apply. For a chain, which has no siblings, this
is exactly the reference's list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from qtg.domain.plan import MANUAL_PREFIX
from qtg.domain.states import NodeState, RequestState

N = NodeState
_DONE = frozenset({N.COMPLETED, N.SKIPPED})
_EXECUTING = frozenset({N.SUBMITTING, N.SUBMITTED, N.OBSERVING})
#: UNKNOWN nodes with these error codes are left for an operator: recovery skips them.
#: EVM_EFFECT_UNVERIFIED (issue 24): a token transfer mined without its Transfer log —
#: money may have gone elsewhere, and no chain evidence will decide it by itself.
OPERATOR_ONLY_CODES = frozenset({"OBSERVATION_TIMEOUT", "EVM_EFFECT_UNVERIFIED"})


@dataclass(frozen=True, slots=True)
class NodeView:
    """The few facts about a request node that the derivation needs."""

    node_key: str
    node_kind: str
    action_type: str
    node_state: NodeState
    error_code: str | None = None

    def __post_init__(self) -> None:
        # Rows arrive with plain text states; refuse an unknown one rather than mis-derive.
        object.__setattr__(self, "node_state", NodeState(self.node_state))


def has_side_effect(node: NodeView) -> bool:
    """An action node that COMPLETED: money moved, so a later failure needs a human."""
    return node.node_kind == "action" and node.node_state == N.COMPLETED


def waits_for_operator(node: NodeView) -> bool:
    """An UNKNOWN node that no worker will resolve by itself."""
    return node.node_state == N.UNKNOWN and node.error_code in OPERATOR_ONLY_CODES


def derive_request_state(nodes: Sequence[NodeView]) -> RequestState | None:
    """The reference's derivation; None means "no change". No nodes derive None."""
    if not nodes:
        return None
    states = {n.node_state for n in nodes}
    if states <= _DONE:
        return RequestState.COMPLETED
    side_effect = any(has_side_effect(n) for n in nodes)
    in_flight = bool(states & _EXECUTING)
    if side_effect and (N.FAILED in states or N.UNKNOWN in states) and not in_flight:
        return RequestState.MANUAL_INTERVENTION
    if not in_flight and any(waits_for_operator(n) for n in nodes):
        return RequestState.MANUAL_INTERVENTION
    if N.FAILED in states and not in_flight and N.UNKNOWN not in states:
        return RequestState.FAILED
    ready = [n for n in nodes if n.node_state == N.READY]
    manual_ready = any(n.action_type.startswith(MANUAL_PREFIX) for n in ready)
    other_ready = any(not n.action_type.startswith(MANUAL_PREFIX) for n in ready)
    if manual_ready and not (in_flight or other_ready or N.UNKNOWN in states):
        return RequestState.WAITING_MANUAL_ACTION
    return None
