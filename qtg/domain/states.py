"""Node and request states and their allowed transitions.

The same lists are loaded into `node_state_transitions` and
`request_state_transitions` by migrations/0001_core.sql, where a trigger
refuses everything else; tests/test_schema.py proves the two agree. Keep them
in step: a transition allowed here but refused there is a 409 at 3 a.m.
"""

from __future__ import annotations

from enum import StrEnum


class NodeState(StrEnum):
    BLOCKED = "BLOCKED"
    READY = "READY"
    SUBMITTING = "SUBMITTING"
    SUBMITTED = "SUBMITTED"
    OBSERVING = "OBSERVING"
    COMPLETED = "COMPLETED"
    SKIPPED = "SKIPPED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"


class RequestState(StrEnum):
    PENDING_APPROVAL = "PENDING_APPROVAL"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    EXECUTING = "EXECUTING"
    WAITING_MANUAL_ACTION = "WAITING_MANUAL_ACTION"
    MANUAL_INTERVENTION = "MANUAL_INTERVENTION"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


N, R = NodeState, RequestState

NODE_TRANSITIONS: frozenset[tuple[NodeState, NodeState]] = frozenset(
    {
        (N.BLOCKED, N.READY),
        (N.BLOCKED, N.SKIPPED),  # request cancelled before the node ran
        (N.READY, N.SUBMITTING),  # write-ahead step of an action node
        (N.READY, N.OBSERVING),  # observe-only node: no side effect
        (N.READY, N.COMPLETED),  # manual node completed by an operator
        (N.READY, N.FAILED),  # plan drift, unresolved $ref, preflight refusal
        (N.READY, N.SKIPPED),
        (N.SUBMITTING, N.SUBMITTED),
        (N.SUBMITTING, N.COMPLETED),  # recovered: it happened and is final
        (N.SUBMITTING, N.FAILED),  # refused before any side effect, or recovered: never happened
        (N.SUBMITTING, N.UNKNOWN),  # submit outcome cannot be determined
        (N.SUBMITTING, N.READY),  # recovered: provably never happened, new attempt (0007)
        (N.SUBMITTED, N.OBSERVING),
        (N.SUBMITTED, N.COMPLETED),
        (N.SUBMITTED, N.FAILED),
        (N.SUBMITTED, N.UNKNOWN),
        (N.OBSERVING, N.COMPLETED),
        (N.OBSERVING, N.FAILED),
        (N.OBSERVING, N.UNKNOWN),
        (N.UNKNOWN, N.SUBMITTED),  # recovery: re-observe
        (N.UNKNOWN, N.OBSERVING),
        (N.UNKNOWN, N.COMPLETED),
        (N.UNKNOWN, N.FAILED),
        (N.UNKNOWN, N.READY),  # recovered: provably never happened, new attempt (0007)
        (N.FAILED, N.READY),  # operator retry (attempt_no + 1)
    }
)

REQUEST_TRANSITIONS: frozenset[tuple[RequestState, RequestState]] = frozenset(
    {
        (R.PENDING_APPROVAL, R.APPROVED),
        (R.PENDING_APPROVAL, R.REJECTED),
        (R.PENDING_APPROVAL, R.EXPIRED),
        (R.PENDING_APPROVAL, R.CANCELLED),
        (R.APPROVED, R.EXECUTING),
        (R.APPROVED, R.WAITING_MANUAL_ACTION),
        (R.APPROVED, R.FAILED),
        (R.APPROVED, R.CANCELLED),
        (R.EXECUTING, R.COMPLETED),
        (R.EXECUTING, R.FAILED),
        (R.EXECUTING, R.MANUAL_INTERVENTION),
        (R.EXECUTING, R.WAITING_MANUAL_ACTION),
        (R.EXECUTING, R.CANCELLED),
        (R.WAITING_MANUAL_ACTION, R.EXECUTING),
        (R.WAITING_MANUAL_ACTION, R.COMPLETED),
        (R.WAITING_MANUAL_ACTION, R.FAILED),
        (R.WAITING_MANUAL_ACTION, R.MANUAL_INTERVENTION),
        (R.WAITING_MANUAL_ACTION, R.CANCELLED),
        (R.MANUAL_INTERVENTION, R.EXECUTING),  # resume
        (R.MANUAL_INTERVENTION, R.CANCELLED),
        (R.FAILED, R.EXECUTING),  # a FAILED node was retried
    }
)

TERMINAL_NODE_STATES = frozenset({N.COMPLETED, N.SKIPPED})
TERMINAL_REQUEST_STATES = frozenset({R.REJECTED, R.EXPIRED, R.COMPLETED, R.CANCELLED})
#: Nodes whose side effect may be in flight: never cancelled under a request.
IN_FLIGHT_NODE_STATES = frozenset({N.SUBMITTING, N.SUBMITTED, N.OBSERVING, N.UNKNOWN})


def node_transition_allowed(src: NodeState | str, dst: NodeState | str) -> bool:
    return src == dst or (NodeState(src), NodeState(dst)) in NODE_TRANSITIONS


def request_transition_allowed(src: RequestState | str, dst: RequestState | str) -> bool:
    return src == dst or (RequestState(src), RequestState(dst)) in REQUEST_TRANSITIONS
