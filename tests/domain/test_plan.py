"""Plan compilation: every refusal names its path and code; hashes cover what they must."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from qtg.domain.plan import PlanError, compile_graph, compiled_plan_hash, graph_hash


def node(key: str, kind: str = "action", action_type: str = "cex_withdrawal", **extra: Any) -> dict:
    return {"key": key, "kind": kind, "action_type": action_type, **extra}


def chain() -> dict:
    """DESIGN §7's example, with a branch: withdraw -> receive -> confirm, withdraw -> burn."""
    return {
        "nodes": [
            node(
                "withdraw",
                config={"venue": "sandbox"},
                timeout_policy={"observe_seconds": 3600},
                executor_key="sandbox",
            ),
            node(
                "receive",
                "observe",
                "destination_chain_receive_observe",
                config={"txid": "$ref:withdraw.txid", "chain": {"id": 1}},
            ),
            node("confirm", "manual", "manual_confirm"),
            node("burn", "action", "cctp_burn", config={"src": "$ref:withdraw.receipt.txid"}),
        ],
        "edges": [["withdraw", "receive"], ["receive", "confirm"], ["withdraw", "burn"]],
    }


def refused(graph: Any) -> PlanError:
    with pytest.raises(PlanError) as info:
        compile_graph(graph)
    return info.value


# ----------------------------------------------------------------------------- accepted


def test_compiles_nodes_in_order_with_defaults_and_sorted_edges() -> None:
    plan = compile_graph(chain())
    assert [n.key for n in plan.nodes] == ["withdraw", "receive", "confirm", "burn"]
    assert [n.position for n in plan.nodes] == [0, 1, 2, 3]
    assert plan.edges == (("receive", "confirm"), ("withdraw", "burn"), ("withdraw", "receive"))
    confirm = plan.node("confirm")
    assert (confirm.kind, confirm.action_type, confirm.executor_key) == (
        "manual",
        "manual_confirm",
        None,
    )
    assert confirm.config == {} and confirm.timeout_policy == {}
    assert plan.node("withdraw").executor_key == "sandbox"
    assert plan.node("withdraw").timeout_policy == {"observe_seconds": 3600}


def test_topology_queries() -> None:
    plan = compile_graph(chain())
    assert plan.roots() == ("withdraw",)
    assert plan.successors("withdraw") == ("receive", "burn")  # position order
    assert plan.successors("confirm") == ()
    assert plan.predecessors("confirm") == ("receive",)
    assert plan.predecessors("withdraw") == ()
    assert plan.ancestors("confirm") == {"withdraw", "receive"}
    with pytest.raises(KeyError, match="nope"):
        plan.node("nope")
    with pytest.raises(KeyError, match="nope"):
        plan.successors("nope")


def test_several_roots_and_a_join() -> None:
    graph = {
        "nodes": [node("b"), node("a"), node("join", "observe", "protocol_observe")],
        "edges": [["a", "join"], ["b", "join"]],
    }
    plan = compile_graph(graph)
    assert plan.roots() == ("b", "a")
    assert plan.predecessors("join") == ("b", "a")


def test_single_node_without_edges_field() -> None:
    plan = compile_graph({"nodes": [node("only")]})
    assert plan.roots() == ("only",) and plan.edges == ()


def test_plan_does_not_alias_the_submitted_graph() -> None:
    graph = chain()
    plan = compile_graph(graph)
    graph["nodes"][1]["config"]["chain"]["id"] = 999
    assert plan.node("receive").config["chain"] == {"id": 1}


# ----------------------------------------------------------------------------- refused


def with_nodes(*nodes: Any, edges: Any = None) -> dict:
    return {"nodes": list(nodes), "edges": [] if edges is None else edges}


GOOD = node("a")

CASES = [
    # graph shape
    ([], "graph", "GRAPH_NOT_OBJECT"),
    ("x", "graph", "GRAPH_NOT_OBJECT"),
    ({"nodes": [GOOD], "edges": [], "nodez": []}, "nodez", "UNKNOWN_GRAPH_FIELD"),
    ({"edges": []}, "nodes", "NODES_NOT_LIST"),
    ({"nodes": {"a": GOOD}}, "nodes", "NODES_NOT_LIST"),
    ({"nodes": []}, "nodes", "NODES_EMPTY"),
    ({"nodes": [GOOD], "edges": {}}, "edges", "EDGES_NOT_LIST"),
    ({"nodes": [GOOD], "edges": None}, "edges", "EDGES_NOT_LIST"),
    # node shape
    (with_nodes(GOOD, "b"), "nodes[1]", "NODE_NOT_OBJECT"),
    (with_nodes(GOOD, {"kind": "action", "action_type": "x"}), "nodes[1].key", "NODE_KEY_MISSING"),
    (with_nodes(node("")), "nodes[0].key", "NODE_KEY_MISSING"),
    (with_nodes(node(7)), "nodes[0].key", "NODE_KEY_INVALID"),  # type: ignore[arg-type]
    (with_nodes(node("Withdraw")), "nodes[0].key", "NODE_KEY_INVALID"),
    (with_nodes(node("1st")), "nodes[0].key", "NODE_KEY_INVALID"),
    (with_nodes(node("a-b")), "nodes[0].key", "NODE_KEY_INVALID"),
    (with_nodes(node("a" * 65)), "nodes[0].key", "NODE_KEY_INVALID"),
    (with_nodes(GOOD, node("b"), node("a")), "nodes[2].key", "DUPLICATE_NODE_KEY"),
    (with_nodes({"key": "a", "action_type": "x"}), "nodes[0].kind", "NODE_KIND_MISSING"),
    (with_nodes(node("a", "swap")), "nodes[0].kind", "UNKNOWN_NODE_KIND"),
    (with_nodes(node("a", "Action")), "nodes[0].kind", "UNKNOWN_NODE_KIND"),
    (with_nodes({"key": "a", "kind": "action"}), "nodes[0].action_type", "ACTION_TYPE_MISSING"),
    (with_nodes(node("a", action_type="")), "nodes[0].action_type", "ACTION_TYPE_MISSING"),
    (with_nodes(node("a", action_type="Cex")), "nodes[0].action_type", "ACTION_TYPE_INVALID"),
    (with_nodes(node("a", action_type=["x"])), "nodes[0].action_type", "ACTION_TYPE_INVALID"),
    (with_nodes(node("a", executor_key="")), "nodes[0].executor_key", "EXECUTOR_KEY_INVALID"),
    (with_nodes(node("a", executor_key=3)), "nodes[0].executor_key", "EXECUTOR_KEY_INVALID"),
    (with_nodes(node("a", config=[])), "nodes[0].config", "CONFIG_NOT_OBJECT"),
    (with_nodes(node("a", config=None)), "nodes[0].config", "CONFIG_NOT_OBJECT"),
    (
        with_nodes(node("a", timeout_policy="1h")),
        "nodes[0].timeout_policy",
        "TIMEOUT_POLICY_NOT_OBJECT",
    ),
    (with_nodes(node("a", confg={})), "nodes[0].confg", "UNKNOWN_NODE_FIELD"),
    (with_nodes(node("a", node_kind="action")), "nodes[0].node_kind", "UNKNOWN_NODE_FIELD"),
    # JSON-ness of config and timeout_policy
    (with_nodes(node("a", config={"x": float("nan")})), "nodes[0].config.x", "NOT_JSON"),
    (with_nodes(node("a", config={"x": {1: 2}})), "nodes[0].config.x", "NOT_JSON"),
    (with_nodes(node("a", config={"x": [object()]})), "nodes[0].config.x[0]", "NOT_JSON"),
    # manual_* rules
    (
        with_nodes(node("a", "manual", "confirm")),
        "nodes[0].action_type",
        "MANUAL_ACTION_TYPE_REQUIRED",
    ),
    (with_nodes(node("a", "action", "manual_confirm")), "nodes[0].kind", "MANUAL_KIND_REQUIRED"),
    (with_nodes(node("a", "observe", "manual_check")), "nodes[0].kind", "MANUAL_KIND_REQUIRED"),
    # edges
    (with_nodes(GOOD, node("b"), edges=[["a", "b"], "a->b"]), "edges[1]", "EDGE_INVALID"),
    (with_nodes(GOOD, node("b"), edges=[["a"]]), "edges[0]", "EDGE_INVALID"),
    (with_nodes(GOOD, node("b"), edges=[["a", "b", "c"]]), "edges[0]", "EDGE_INVALID"),
    (with_nodes(GOOD, node("b"), edges=[["a", 2]]), "edges[0]", "EDGE_INVALID"),
    (with_nodes(GOOD, node("b"), edges=[["a", "c"]]), "edges[0]", "UNKNOWN_EDGE_NODE"),
    (with_nodes(GOOD, node("b"), edges=[["z", "b"]]), "edges[0]", "UNKNOWN_EDGE_NODE"),
    (with_nodes(GOOD, node("b"), edges=[["a", "b"], ["b", "b"]]), "edges[1]", "SELF_LOOP"),
    (
        with_nodes(GOOD, node("b"), edges=[["a", "b"], ["b", "a"], ["a", "b"]]),
        "edges[2]",
        "DUPLICATE_EDGE",
    ),
]


@pytest.mark.parametrize(("graph", "path", "code"), CASES)
def test_refusals_name_path_and_code(graph: Any, path: str, code: str) -> None:
    err = refused(graph)
    assert (err.path, err.code) == (path, code), str(err)
    assert str(err).startswith(f"{path}: ")
    assert isinstance(err, ValueError)


@pytest.mark.parametrize(
    "value",
    [0, -1, -0.5, "3600", True, None, float("inf"), float("nan"), [3600]],
)
def test_observe_seconds_must_be_positive_number(value: Any) -> None:
    err = refused(with_nodes(GOOD, node("b", timeout_policy={"observe_seconds": value})))
    assert (err.path, err.code) == (
        "nodes[1].timeout_policy.observe_seconds",
        "OBSERVE_SECONDS_INVALID",
    )


@pytest.mark.parametrize("value", [1, 0.5, 3600])
def test_observe_seconds_positive_accepted(value: float) -> None:
    plan = compile_graph(with_nodes(node("a", timeout_policy={"observe_seconds": value})))
    assert plan.node("a").timeout_policy["observe_seconds"] == value


def test_unknown_field_error_names_field() -> None:
    err = refused(with_nodes(node("a", exector_key="sandbox")))
    assert "exector_key" in str(err)


@pytest.mark.parametrize(
    ("edges", "on_cycle"),
    [
        ([["a", "b"], ["b", "a"]], {"a", "b"}),
        ([["a", "b"], ["b", "c"], ["c", "a"]], {"a", "b", "c"}),
        ([["a", "b"], ["b", "c"], ["c", "b"]], {"b", "c"}),  # cycle not through the root
    ],
)
def test_cycles_are_refused_naming_a_node_on_the_cycle(
    edges: list[list[str]], on_cycle: set[str]
) -> None:
    keys = ["a", "b", "c"]
    err = refused(with_nodes(*(node(k) for k in keys), edges=edges))
    assert err.code == "CYCLE"
    named = keys[int(err.path.removeprefix("nodes[").removesuffix("]"))]
    assert named in on_cycle
    assert f"cycle through node {named!r}" in str(err)
    # the message spells the whole cycle, starting and ending at the named node
    cycle = str(err).rsplit(": ", 1)[1].split(" -> ")
    assert cycle[0] == cycle[-1] == named and set(cycle) == on_cycle


REF_CASES = [
    ({"x": "$ref:a"}, "MALFORMED_REF"),
    ({"x": "$ref:.txid"}, "MALFORMED_REF"),
    ({"x": "$ref:a."}, "MALFORMED_REF"),
    ({"x": "$ref:a..txid"}, "MALFORMED_REF"),
    ({"x": "$ref:A.txid"}, "MALFORMED_REF"),
    ({"x": "$ref:b.txid"}, "REF_SELF"),
    ({"x": "$ref:zz.txid"}, "REF_UNKNOWN_NODE"),
    ({"x": "$ref:c.txid"}, "REF_NOT_ANCESTOR"),  # sibling
    ({"x": "$ref:d.txid"}, "REF_NOT_ANCESTOR"),  # descendant
]


@pytest.mark.parametrize(("config", "code"), REF_CASES)
def test_ref_refusals(config: dict, code: str) -> None:
    # a -> b -> d, a -> c; the ref sits on b.
    graph = with_nodes(
        node("a"),
        node("b", config=config),
        node("c"),
        node("d"),
        edges=[["a", "b"], ["a", "c"], ["b", "d"]],
    )
    err = refused(graph)
    assert (err.path, err.code) == ("nodes[1].config.x", code), str(err)


@pytest.mark.parametrize(
    ("config", "path"),
    [
        ({"x": {"y": "$ref:a.txid"}}, "nodes[1].config.x.y"),
        ({"x": ["$ref:a.txid"]}, "nodes[1].config.x[0]"),
    ],
)
def test_nested_refs_are_refused_because_they_would_never_resolve(config: dict, path: str) -> None:
    err = refused(with_nodes(node("a"), node("b", config=config), edges=[["a", "b"]]))
    assert (err.path, err.code) == (path, "REF_NESTED")


def test_transitive_ancestor_ref_accepted() -> None:
    graph = with_nodes(
        node("a"),
        node("b"),
        node("c", config={"x": "$ref:a.deep.path", "y": "$ref:b.v", "z": "plain $ref: text"}),
        edges=[["a", "b"], ["b", "c"]],
    )
    assert compile_graph(graph).node("c").config["x"] == "$ref:a.deep.path"


# ----------------------------------------------------------------------------- hashes


def h(graph: dict) -> str:
    return compile_graph(graph).graph_hash


def test_hashes_are_sha256_hex_and_deterministic() -> None:
    plan = compile_graph(chain())
    assert len(plan.graph_hash) == 64 and int(plan.graph_hash, 16) >= 0
    assert plan.graph_hash == h(chain())
    cph = compiled_plan_hash(plan, {"asset": "USDC"}, {"n": 1})
    assert len(cph) == 64 and cph != plan.graph_hash
    assert graph_hash({"b": 1, "a": 2}) == graph_hash({"a": 2, "b": 1})


def _drop_timeouts(graph: dict) -> None:
    for n in graph["nodes"]:
        n.pop("timeout_policy", None)


def _change_timeouts(graph: dict) -> None:
    graph["nodes"][0]["timeout_policy"] = {"observe_seconds": 1800, "other": True}
    graph["nodes"][2]["timeout_policy"] = {"observe_seconds": 60}


@pytest.mark.parametrize("edit", [_drop_timeouts, _change_timeouts])
def test_timeout_policy_changes_neither_hash(edit: Any) -> None:
    before = compile_graph(chain())
    graph = chain()
    edit(graph)
    after = compile_graph(graph)
    assert after.graph_hash == before.graph_hash
    intent, params = {"asset": "USDC", "amount": "1.5"}, {"chain_family": "evm"}
    assert compiled_plan_hash(after, intent, params) == compiled_plan_hash(before, intent, params)


def test_key_order_and_edge_order_and_absent_defaults_do_not_matter() -> None:
    graph = chain()
    reordered = {
        "edges": list(reversed(graph["edges"])),
        "nodes": [dict(reversed(list(n.items()))) for n in graph["nodes"]],
    }
    reordered["nodes"][0]["config"] = {"venue": "sandbox"}
    assert h(reordered) == h(graph)
    explicit = copy.deepcopy(graph)
    explicit["nodes"][2].update(config={}, executor_key=None)
    assert h(explicit) == h(graph)


def _set(path: tuple, value: Any):
    def edit(graph: dict) -> None:
        target = graph
        for p in path[:-1]:
            target = target[p]
        target[path[-1]] = value

    return edit


HASHED_EDITS = {
    "key": lambda g: (
        _set(("nodes", 2, "key"), "confirm2")(g),
        _set(("edges", 1), ["receive", "confirm2"])(g),
    ),
    "kind": _set(("nodes", 1, "kind"), "action"),
    "action_type": _set(("nodes", 0, "action_type"), "cex_withdrawal_v2"),
    "executor_key": _set(("nodes", 0, "executor_key"), "other"),
    "executor_key_added": _set(("nodes", 1, "executor_key"), "sandbox"),
    "config_value": _set(("nodes", 0, "config", "venue"), "binance"),
    "config_nested": _set(("nodes", 1, "config", "chain", "id"), 2),
    "config_type": _set(("nodes", 1, "config", "chain", "id"), "1"),
    "config_added": _set(("nodes", 2, "config"), {"note": "x"}),
    "edge_removed": _set(("edges",), [["withdraw", "receive"], ["withdraw", "burn"]]),
    "edge_added": _set(
        ("edges",),
        [
            ["withdraw", "receive"],
            ["receive", "confirm"],
            ["withdraw", "burn"],
            ["burn", "confirm"],
        ],
    ),
    "node_order": lambda g: g["nodes"].reverse(),
}


@pytest.mark.parametrize("edit", HASHED_EDITS.values(), ids=HASHED_EDITS.keys())
def test_every_other_change_changes_both_hashes(edit: Any) -> None:
    before = compile_graph(chain())
    graph = chain()
    edit(graph)
    after = compile_graph(graph)
    assert after.graph_hash != before.graph_hash
    assert compiled_plan_hash(after, {}, {}) != compiled_plan_hash(before, {}, {})


def test_compiled_plan_hash_covers_intent_and_params_not_their_key_order() -> None:
    plan = compile_graph(chain())
    base = compiled_plan_hash(plan, {"asset": "USDC", "amount": "1"}, {"a": 1})
    assert compiled_plan_hash(plan, {"amount": "1", "asset": "USDC"}, {"a": 1}) == base
    assert compiled_plan_hash(plan, {"asset": "USDC", "amount": "2"}, {"a": 1}) != base
    assert compiled_plan_hash(plan, {"asset": "USDC", "amount": "1"}, {"a": 2}) != base
    assert compiled_plan_hash(plan, {"asset": "USDC", "amount": "1"}, {}) != base
    # intent and params are not interchangeable
    assert compiled_plan_hash(plan, {"a": 1}, {}) != compiled_plan_hash(plan, {}, {"a": 1})


def _rows(graph: dict) -> tuple[list[dict], list[dict]]:
    """plan_nodes/plan_edges rows as the dispatcher reads them."""
    nodes = [
        {
            "node_key": n["key"],
            "node_kind": n["kind"],
            "action_type": n["action_type"],
            "executor_key": n.get("executor_key"),
            "config": n.get("config", {}),
            "timeout_policy": n.get("timeout_policy", {}),
            "position": i,
        }
        for i, n in enumerate(graph["nodes"])
    ]
    edges = [{"from_key": a, "to_key": b} for a, b in graph["edges"]]
    return nodes, edges


def test_plan_hash_drift_sees_every_change_and_computes_each_content_once() -> None:
    from qtg.domain.execution import _current_plan_hash, plan_hash_drifted

    intent = {"amount": "12.5", "asset": "USDC", "nested": {"n": [1, 2.5, None]}}
    params = {"destination": "0xabc"}
    request = {
        "intent": intent,
        "input_params": params,
        "compiled_plan_hash": compiled_plan_hash(compile_graph(chain()), intent, params),
    }
    nodes, edges = _rows(chain())
    assert not plan_hash_drifted(request, nodes, edges)
    hits = _current_plan_hash.cache_info().hits
    assert not plan_hash_drifted(request, copy.deepcopy(nodes), copy.deepcopy(edges))
    assert _current_plan_hash.cache_info().hits == hits + 1  # same content: not recompiled

    changed = copy.deepcopy(nodes)
    changed[0]["config"]["venue"] = "elsewhere"
    assert plan_hash_drifted(request, changed, edges)
    renamed = copy.deepcopy(nodes)
    renamed[2]["action_type"] = "manual_other"
    assert plan_hash_drifted(request, renamed, edges)
    with pytest.raises(PlanError):  # an edge a $ref needs is gone: raised, never cached
        plan_hash_drifted(request, nodes, edges[:-1])
    assert plan_hash_drifted({**request, "intent": {**intent, "amount": "13"}}, nodes, edges)
    assert plan_hash_drifted({**request, "input_params": {}}, nodes, edges)
