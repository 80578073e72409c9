"""derive_request_state: each of the reference's rules, and their priority order."""

from __future__ import annotations

import pytest

from qtg.domain.derive import NodeView, derive_request_state, has_side_effect
from qtg.domain.states import NodeState, RequestState

N, R = NodeState, RequestState


def act(state: NodeState, key: str = "a") -> NodeView:
    return NodeView(key, "action", "cex_withdrawal", state)


def obs(state: NodeState, key: str = "o") -> NodeView:
    return NodeView(key, "observe", "cctp_attestation", state)


def manual(state: NodeState, key: str = "m") -> NodeView:
    return NodeView(key, "manual", "manual_confirm", state)


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (act(N.COMPLETED), True),
        (act(N.SUBMITTED), False),
        (act(N.SKIPPED), False),
        (obs(N.COMPLETED), False),
        (manual(N.COMPLETED), False),
    ],
)
def test_has_side_effect(node: NodeView, expected: bool) -> None:
    assert has_side_effect(node) is expected


CASES = {
    # rule 1: all COMPLETED/SKIPPED
    "all_completed": ([act(N.COMPLETED), obs(N.COMPLETED), manual(N.COMPLETED)], R.COMPLETED),
    "completed_and_skipped": ([act(N.COMPLETED), obs(N.SKIPPED)], R.COMPLETED),
    "all_skipped": ([act(N.SKIPPED), obs(N.SKIPPED)], R.COMPLETED),
    # rule 2: FAILED/UNKNOWN + completed side effect
    "failed_after_side_effect": ([act(N.COMPLETED), obs(N.FAILED)], R.MANUAL_INTERVENTION),
    "unknown_after_side_effect": ([act(N.COMPLETED), act(N.UNKNOWN, "b")], R.MANUAL_INTERVENTION),
    "rule2_beats_manual_ready": (
        [act(N.COMPLETED), obs(N.UNKNOWN), manual(N.READY)],
        R.MANUAL_INTERVENTION,
    ),
    # rule 3: FAILED without side effect (completed observe/manual nodes are not side effects)
    "failed_alone": ([act(N.FAILED), obs(N.BLOCKED)], R.FAILED),
    "failed_after_observe_only": ([obs(N.COMPLETED), act(N.FAILED)], R.FAILED),
    "failed_after_manual_only": ([manual(N.COMPLETED), act(N.FAILED)], R.FAILED),
    "failed_beats_manual_ready": ([act(N.FAILED), manual(N.READY)], R.FAILED),
    # beyond the reference: wait while a sibling's outcome is still to be found
    "failed_and_unknown_no_side_effect": ([act(N.FAILED), act(N.UNKNOWN, "b")], None),
    "failed_beside_in_flight_sibling": ([act(N.FAILED), act(N.OBSERVING, "b")], None),
    "failed_with_side_effect_beside_in_flight": (
        [act(N.COMPLETED, "c"), act(N.FAILED), act(N.SUBMITTED, "b")],
        None,
    ),
    # rule 4: READY manual_* and nothing executing
    "manual_ready": ([act(N.COMPLETED), manual(N.READY), obs(N.BLOCKED)], R.WAITING_MANUAL_ACTION),
    # beyond the reference: a READY action branch beside it still runs
    "manual_ready_with_other_ready": ([manual(N.READY), act(N.READY)], None),
    "manual_ready_but_submitting": ([manual(N.READY), act(N.SUBMITTING)], None),
    "manual_ready_but_submitted": ([manual(N.READY), act(N.SUBMITTED)], None),
    "manual_ready_but_observing": ([manual(N.READY), obs(N.OBSERVING)], None),
    "manual_blocked": ([act(N.OBSERVING), manual(N.BLOCKED)], None),
    # rule 5: otherwise None
    "unknown_without_side_effect": ([act(N.UNKNOWN), obs(N.BLOCKED)], None),
    "unknown_next_to_manual_ready": ([act(N.UNKNOWN), manual(N.READY)], None),
    "in_progress": ([act(N.COMPLETED), obs(N.OBSERVING), manual(N.BLOCKED)], None),
    "just_approved": ([act(N.READY), obs(N.BLOCKED)], None),
    "no_nodes": ([], None),
}


@pytest.mark.parametrize(("nodes", "expected"), CASES.values(), ids=CASES.keys())
def test_derive_request_state(nodes: list[NodeView], expected: RequestState | None) -> None:
    assert derive_request_state(nodes) == expected
    assert derive_request_state(list(reversed(nodes))) == expected  # order never matters


def test_manual_rule_uses_action_type_prefix() -> None:
    # a READY node whose action_type lacks the prefix is an ordinary dispatchable node
    assert derive_request_state([NodeView("x", "action", "manualish", N.READY)]) is None


def test_node_view_accepts_row_text_and_refuses_unknown_states() -> None:
    view = NodeView("a", "action", "cex_withdrawal", "COMPLETED")  # type: ignore[arg-type]
    assert view.node_state is N.COMPLETED and has_side_effect(view)
    with pytest.raises(ValueError):
        NodeView("a", "action", "cex_withdrawal", "DONE")  # type: ignore[arg-type]
