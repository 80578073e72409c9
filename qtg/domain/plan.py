"""Plan compilation: a template graph (DESIGN §7) validated into an immutable Plan.

Templates move money, so compilation is strict: every malformed, unknown or
ambiguous piece is refused with a PlanError whose `path` points at it
(`nodes[2].key`, `edges[1]`, `graph`) and whose `code` says what is wrong. Nothing
is guessed or silently dropped — a typo in a field name is an error, not a default.

Hashes (reference, "Observation timeout enforcement"): timeout_policy is not included
in the graph hash or the compiled-plan hash, so a post-approval edit of
observe_seconds changes paging timing only and never trips plan-hash drift. Every
other part of the normalised graph is hashed, including node order (it is the
stored `position`); edge order is not (edges are a set, normalised sorted).
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from qtg.domain.refs import REF_PREFIX, parse_ref

NODE_KINDS = ("action", "observe", "manual")
MANUAL_PREFIX = "manual_"

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_NODE_FIELDS = frozenset({"key", "kind", "action_type", "executor_key", "config", "timeout_policy"})
_GRAPH_FIELDS = frozenset({"nodes", "edges"})


class PlanError(ValueError):
    """An invalid template graph. `path` locates the fault, `code` classifies it."""

    def __init__(self, message: str, *, path: str, code: str) -> None:
        self.path = path
        self.code = code
        self.message = message
        super().__init__(f"{path}: {message}")


@dataclass(frozen=True, slots=True)
class PlanNode:
    key: str
    kind: str
    action_type: str
    executor_key: str | None
    config: dict[str, Any]
    timeout_policy: dict[str, Any]
    position: int


@dataclass(frozen=True, slots=True)
class Plan:
    nodes: tuple[PlanNode, ...]  # in submitted order (position)
    edges: tuple[tuple[str, str], ...]  # (from_key, to_key), sorted
    graph_hash: str
    _by_key: dict[str, PlanNode] = field(init=False, repr=False, compare=False)
    _succ: dict[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    _pred: dict[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_key = {n.key: n for n in self.nodes}
        succ: dict[str, list[str]] = {k: [] for k in by_key}
        pred: dict[str, list[str]] = {k: [] for k in by_key}
        for a, b in self.edges:
            succ[a].append(b)
            pred[b].append(a)

        def ordered(keys: list[str]) -> tuple[str, ...]:
            return tuple(sorted(keys, key=lambda k: by_key[k].position))

        object.__setattr__(self, "_by_key", by_key)
        object.__setattr__(self, "_succ", {k: ordered(v) for k, v in succ.items()})
        object.__setattr__(self, "_pred", {k: ordered(v) for k, v in pred.items()})

    def node(self, key: str) -> PlanNode:
        try:
            return self._by_key[key]
        except KeyError:
            raise KeyError(f"plan has no node {key!r}") from None

    def successors(self, key: str) -> tuple[str, ...]:
        """Direct successors, in node position order."""
        self.node(key)  # KeyError naming an unknown key
        return self._succ[key]

    def predecessors(self, key: str) -> tuple[str, ...]:
        """Direct predecessors, in node position order."""
        self.node(key)
        return self._pred[key]

    def roots(self) -> tuple[str, ...]:
        """Nodes with no predecessors (READY at approval), in position order."""
        return tuple(n.key for n in self.nodes if not self._pred[n.key])

    def ancestors(self, key: str) -> frozenset[str]:
        """Every transitive predecessor of `key` (not `key` itself)."""
        seen: set[str] = set()
        stack = list(self.predecessors(key))
        while stack:
            k = stack.pop()
            if k not in seen:
                seen.add(k)
                stack.extend(self._pred[k])
        return frozenset(seen)


# --------------------------------------------------------------------------- hashing


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no whitespace: the same value always gives the same bytes."""
    return msgspec.json.encode(value, order="sorted")


def graph_hash(graph_without_timeouts: Any) -> str:
    """sha256 hex of the canonical JSON of an already-normalised graph."""
    return hashlib.sha256(canonical_json(graph_without_timeouts)).hexdigest()


def _hashable_graph(
    nodes: tuple[PlanNode, ...], edges: tuple[tuple[str, str], ...]
) -> dict[str, Any]:
    return {
        "nodes": [
            {
                "key": n.key,
                "kind": n.kind,
                "action_type": n.action_type,
                "executor_key": n.executor_key,
                "config": n.config,
            }
            for n in nodes
        ],
        "edges": [list(e) for e in edges],
    }


def compiled_plan_hash(
    plan: Plan, intent: Mapping[str, Any], input_params: Mapping[str, Any]
) -> str:
    """The hash a movement request carries: plan (without timeouts), intent, input_params."""
    return hashlib.sha256(
        canonical_json(
            {
                "graph_hash": plan.graph_hash,
                "intent": dict(intent),
                "input_params": dict(input_params),
            }
        )
    ).hexdigest()


# --------------------------------------------------------------------------- compilation


def compile_graph(graph: Any) -> Plan:
    """Validate and normalise a template graph; raise PlanError naming the fault."""
    if not isinstance(graph, Mapping):
        raise PlanError("graph must be a JSON object", path="graph", code="GRAPH_NOT_OBJECT")
    for name in graph:
        if name not in _GRAPH_FIELDS:
            raise PlanError(
                f"unknown field {name!r} (allowed: edges, nodes)",
                path=str(name),
                code="UNKNOWN_GRAPH_FIELD",
            )
    raw_nodes = graph.get("nodes")
    if not isinstance(raw_nodes, list):
        raise PlanError("nodes must be a list", path="nodes", code="NODES_NOT_LIST")
    if not raw_nodes:
        raise PlanError("a plan needs at least one node", path="nodes", code="NODES_EMPTY")

    nodes: list[PlanNode] = []
    index_of: dict[str, int] = {}
    for i, raw in enumerate(raw_nodes):
        node = _compile_node(raw, i)
        if node.key in index_of:
            raise PlanError(
                f"duplicate node key {node.key!r} (first at nodes[{index_of[node.key]}])",
                path=f"nodes[{i}].key",
                code="DUPLICATE_NODE_KEY",
            )
        index_of[node.key] = i
        nodes.append(node)

    edges = _compile_edges(graph.get("edges", []), index_of)
    plan = Plan(
        nodes=tuple(nodes),
        edges=tuple(sorted(edges)),
        graph_hash="",  # replaced below, once the graph is known to be valid
    )
    _check_acyclic(plan)
    for i, node in enumerate(plan.nodes):
        _check_refs(plan, node, i)
    return Plan(
        nodes=plan.nodes,
        edges=plan.edges,
        graph_hash=graph_hash(_hashable_graph(plan.nodes, plan.edges)),
    )


def _compile_node(raw: Any, i: int) -> PlanNode:
    at = f"nodes[{i}]"
    if not isinstance(raw, Mapping):
        raise PlanError("node must be a JSON object", path=at, code="NODE_NOT_OBJECT")
    for name in raw:
        if name not in _NODE_FIELDS:
            raise PlanError(
                f"unknown node field {name!r} (allowed: {', '.join(sorted(_NODE_FIELDS))})",
                path=f"{at}.{name}",
                code="UNKNOWN_NODE_FIELD",
            )
    key = _name(raw, "key", at, "NODE_KEY")
    if "kind" not in raw:
        raise PlanError("kind is required", path=f"{at}.kind", code="NODE_KIND_MISSING")
    kind = raw["kind"]
    if kind not in NODE_KINDS:
        raise PlanError(
            f"unknown node kind {kind!r} (allowed: {', '.join(NODE_KINDS)})",
            path=f"{at}.kind",
            code="UNKNOWN_NODE_KIND",
        )
    action_type = _name(raw, "action_type", at, "ACTION_TYPE")
    if kind == "manual" and not action_type.startswith(MANUAL_PREFIX):
        raise PlanError(
            f"a manual node's action_type must start with {MANUAL_PREFIX!r}, got {action_type!r}",
            path=f"{at}.action_type",
            code="MANUAL_ACTION_TYPE_REQUIRED",
        )
    if kind != "manual" and action_type.startswith(MANUAL_PREFIX):
        raise PlanError(
            f"action_type {action_type!r} is reserved for manual nodes, but kind is {kind!r}",
            path=f"{at}.kind",
            code="MANUAL_KIND_REQUIRED",
        )
    executor_key = raw.get("executor_key")
    if executor_key is not None and (not isinstance(executor_key, str) or not executor_key.strip()):
        raise PlanError(
            "executor_key must be a non-empty string or absent",
            path=f"{at}.executor_key",
            code="EXECUTOR_KEY_INVALID",
        )
    config = _object(raw, "config", at, "CONFIG_NOT_OBJECT")
    _check_json(config, f"{at}.config", top_level=True)
    timeout_policy = _object(raw, "timeout_policy", at, "TIMEOUT_POLICY_NOT_OBJECT")
    if "observe_seconds" in timeout_policy:
        seconds = timeout_policy["observe_seconds"]
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds <= 0
        ):
            raise PlanError(
                f"observe_seconds must be a positive number, got {seconds!r}",
                path=f"{at}.timeout_policy.observe_seconds",
                code="OBSERVE_SECONDS_INVALID",
            )
    _check_json(timeout_policy, f"{at}.timeout_policy", top_level=False)
    return PlanNode(
        key=key,
        kind=kind,
        action_type=action_type,
        executor_key=executor_key,
        config=copy.deepcopy(dict(config)),
        timeout_policy=copy.deepcopy(dict(timeout_policy)),
        position=i,
    )


def _name(raw: Mapping[str, Any], name: str, at: str, code: str) -> str:
    if name not in raw or raw[name] in (None, ""):
        raise PlanError(f"{name} is required", path=f"{at}.{name}", code=f"{code}_MISSING")
    value = raw[name]
    if not isinstance(value, str) or not _NAME.match(value):
        raise PlanError(
            f"{name} must match ^[a-z][a-z0-9_]{{0,63}}$, got {value!r}",
            path=f"{at}.{name}",
            code=f"{code}_INVALID",
        )
    return value


def _object(raw: Mapping[str, Any], name: str, at: str, code: str) -> Mapping[str, Any]:
    if name not in raw:
        return {}
    value = raw[name]
    if not isinstance(value, Mapping):
        raise PlanError(f"{name} must be a JSON object", path=f"{at}.{name}", code=code)
    return value


def _check_json(value: Any, path: str, *, top_level: bool) -> None:
    """Plain JSON only (it is hashed and stored as jsonb); `$ref:` only at the top level."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise PlanError(f"object key {k!r} is not a string", path=path, code="NOT_JSON")
            if top_level and isinstance(v, str):
                continue  # a top-level string, possibly a $ref: checked by _check_refs
            _check_json(v, f"{path}.{k}", top_level=False)
    elif isinstance(value, list):
        for j, v in enumerate(value):
            _check_json(v, f"{path}[{j}]", top_level=False)
    elif isinstance(value, str):
        if value.startswith(REF_PREFIX):
            raise PlanError(
                f"{value!r}: $ref is resolved only in top-level config values",
                path=path,
                code="REF_NESTED",
            )
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise PlanError(f"{value!r} is not a JSON number", path=path, code="NOT_JSON")
    elif value is not None and not isinstance(value, bool | int):
        raise PlanError(
            f"value of type {type(value).__name__} is not JSON", path=path, code="NOT_JSON"
        )


def _compile_edges(raw_edges: Any, index_of: Mapping[str, int]) -> list[tuple[str, str]]:
    if not isinstance(raw_edges, list):
        raise PlanError(
            "edges must be a list of [from, to] pairs", path="edges", code="EDGES_NOT_LIST"
        )
    edges: list[tuple[str, str]] = []
    first_at: dict[tuple[str, str], int] = {}
    for j, raw in enumerate(raw_edges):
        at = f"edges[{j}]"
        if (
            not isinstance(raw, list | tuple)
            or len(raw) != 2
            or not all(isinstance(k, str) for k in raw)
        ):
            raise PlanError(
                f"edge must be a [from_key, to_key] pair of strings, got {raw!r}",
                path=at,
                code="EDGE_INVALID",
            )
        a, b = raw
        for k in (a, b):
            if k not in index_of:
                raise PlanError(
                    f"edge references unknown node {k!r}", path=at, code="UNKNOWN_EDGE_NODE"
                )
        if a == b:
            raise PlanError(f"self-loop on node {a!r}", path=at, code="SELF_LOOP")
        if (a, b) in first_at:
            raise PlanError(
                f"duplicate edge {a!r} -> {b!r} (first at edges[{first_at[(a, b)]}])",
                path=at,
                code="DUPLICATE_EDGE",
            )
        first_at[(a, b)] = j
        edges.append((a, b))
    return edges


def _check_acyclic(plan: Plan) -> None:
    """Depth-first search; a back edge closes a cycle, which the error spells out."""
    white, grey, black = 0, 1, 2
    colour = {n.key: white for n in plan.nodes}
    for start in plan.nodes:
        if colour[start.key] != white:
            continue
        colour[start.key] = grey
        path = [start.key]
        stack = [iter(plan.successors(start.key))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = black
                stack.pop()
            elif colour[nxt] == grey:
                cycle = [*path[path.index(nxt) :], nxt]
                raise PlanError(
                    f"cycle through node {nxt!r}: {' -> '.join(cycle)}",
                    path=f"nodes[{plan.node(nxt).position}]",
                    code="CYCLE",
                )
            elif colour[nxt] == white:
                colour[nxt] = grey
                path.append(nxt)
                stack.append(iter(plan.successors(nxt)))


def _check_refs(plan: Plan, node: PlanNode, i: int) -> None:
    ancestors = None
    for name, value in node.config.items():
        at = f"nodes[{i}].config.{name}"
        try:
            parsed = parse_ref(value)
        except ValueError as exc:
            raise PlanError(str(exc), path=at, code="MALFORMED_REF") from None
        if parsed is None:
            continue
        ref_node = parsed[0]
        if ref_node == node.key:
            raise PlanError(f"{value!r} references the node itself", path=at, code="REF_SELF")
        if ref_node not in plan._by_key:
            raise PlanError(
                f"{value!r} references unknown node {ref_node!r}", path=at, code="REF_UNKNOWN_NODE"
            )
        if ancestors is None:
            ancestors = plan.ancestors(node.key)
        if ref_node not in ancestors:
            raise PlanError(
                f"{value!r} references node {ref_node!r}, which is not a predecessor of "
                f"{node.key!r} (it may not have completed when {node.key!r} runs)",
                path=at,
                code="REF_NOT_ANCESTOR",
            )
