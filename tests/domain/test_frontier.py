"""The pure rules of a movement's first steps: what an approval releases, and the
frontier it makes (qtg.domain.execution)."""

from __future__ import annotations

from typing import Any

from qtg.domain.execution import approval_releases, frontier_keys


def _node(key: str, state: str, *predecessors: str) -> dict[str, Any]:
    return {"node_key": key, "node_state": state, "predecessor_keys": list(predecessors)}


def test_an_approval_releases_the_blocked_roots_in_plan_order() -> None:
    nodes = [
        _node("b", "BLOCKED"),
        _node("join", "BLOCKED", "b", "a"),
        _node("a", "BLOCKED"),
        _node("after_a", "BLOCKED", "a"),
    ]
    assert approval_releases(nodes) == ["b", "a"]
    # a root already moved on (an operator's skip, a retry) is not released again
    nodes[0]["node_state"] = "SKIPPED"
    assert approval_releases(nodes) == ["a"]


def test_the_frontier_is_the_started_unfinished_nodes_in_plan_order() -> None:
    nodes = [
        _node("a", "READY"),
        _node("b", "BLOCKED", "a"),
        _node("c", "COMPLETED"),
        _node("d", "OBSERVING", "c"),
        _node("e", "UNKNOWN"),
    ]
    assert frontier_keys(nodes) == ["a", "d", "e"]
