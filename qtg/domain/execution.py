"""Pure rules of node execution: building the ExecutionContext and SignRequest,
the plan's risk controls, the frontier and which successors a completion releases.

Inputs are plain row mappings already loaded by the services (see
sql/progress/load_request.sql and load_nodes.sql); nothing here does I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec

from qtg.domain.context import ExecutionContext, SigningIntent, SignRequest
from qtg.domain.plan import Plan, compile_graph, compiled_plan_hash
from qtg.domain.refs import resolve_refs
from qtg.domain.states import NodeState

N = NodeState

#: Nodes that are started and not finished: what `current_frontier` lists.
#: FAILED stays on the frontier so that an operator sees where the DAG stopped.
_ON_FRONTIER = frozenset({N.READY, N.SUBMITTING, N.SUBMITTED, N.OBSERVING, N.UNKNOWN, N.FAILED})
_DONE = frozenset({N.COMPLETED, N.SKIPPED})

Row = Mapping[str, Any]


def idempotency_key(request_node_id: object, attempt_no: int) -> str:
    """The write-ahead key of one attempt: the same node and attempt, the same key."""
    return f"{request_node_id}:{attempt_no}"


def frontier_keys(nodes: Sequence[Row]) -> list[str]:
    """Keys of the started, unfinished nodes, in plan order."""
    return [n["node_key"] for n in nodes if n["node_state"] in _ON_FRONTIER]


def approval_releases(nodes: Sequence[Row]) -> list[str]:
    """Keys of the nodes an approval makes READY: the BLOCKED ones with no
    predecessor (the plan's roots), in plan order."""
    return [
        n["node_key"] for n in nodes if n["node_state"] == N.BLOCKED and not n["predecessor_keys"]
    ]


def releasable_successors(completed_key: str, nodes: Sequence[Row]) -> list[str]:
    """Successors of `completed_key` that are BLOCKED and whose predecessors are all done.

    The reference releases every BLOCKED successor of a completed node; a node
    with several predecessors (a join after a branch) must also wait for the
    others, or it would run before its inputs exist.
    """
    by_key = {n["node_key"]: n for n in nodes}
    completed = by_key[completed_key]
    released = []
    for key in completed["successor_keys"]:
        successor = by_key[key]
        if successor["node_state"] != N.BLOCKED:
            continue
        if all(by_key[p]["node_state"] in _DONE for p in successor["predecessor_keys"]):
            released.append(key)
    return released


def _graph_from_rows(nodes: Sequence[Row], edges: Sequence[Row]) -> dict[str, Any]:
    return {
        "nodes": [
            {
                "key": n["node_key"],
                "kind": n["node_kind"],
                "action_type": n["action_type"],
                "executor_key": n["executor_key"],
                "config": n["config"],
                "timeout_policy": n["timeout_policy"],
            }
            for n in sorted(nodes, key=lambda n: n["position"])
        ],
        "edges": [[e["from_key"], e["to_key"]] for e in edges],
    }


def plan_from_rows(nodes: Sequence[Row], edges: Sequence[Row]) -> Plan:
    """Rebuild the plan from the plan_nodes/plan_edges rows as they are *now*."""
    return compile_graph(_graph_from_rows(nodes, edges))


def plan_hash_drifted(request: Row, nodes: Sequence[Row], edges: Sequence[Row]) -> bool:
    """True when the stored plan, intent or input_params no longer hash to what was approved.

    Every dispatch asks this; the hash of the same content is computed once
    (`_current_plan_hash` is keyed on the whole content as it is now, so any
    change to a node, an edge, the intent or the params is a new key)."""
    content = msgspec.json.encode(
        (_graph_from_rows(nodes, edges), request["intent"], request["input_params"])
    )
    return bool(_current_plan_hash(content) != request["compiled_plan_hash"])


@functools.lru_cache(maxsize=512)
def _current_plan_hash(content: bytes) -> str:
    graph, intent, input_params = msgspec.json.decode(content)
    return compiled_plan_hash(compile_graph(graph), intent, input_params)


def build_execution_context(
    request: Row, node: Row, nodes: Sequence[Row], *, in_flight: bool = False
) -> ExecutionContext:
    """The reference's build_execution_context().

    The dispatcher builds the context of the attempt it is about to start
    (attempt_no + 1); observe and recover build it for the attempt in flight
    (`in_flight=True`: attempt_no as recorded).

    prior_artifacts and provider_context come from the *direct* predecessors
    that COMPLETED; `$ref:` resolution sees every COMPLETED node's
    provider_refs, namespaced by node key, but those are not merged into
    provider_context. Raises ConfigRefResolutionError for an unresolved ref.
    """
    by_key = {n["node_key"]: n for n in nodes}
    predecessors = [by_key[k] for k in node["predecessor_keys"]]
    completed_predecessors = [p for p in predecessors if p["node_state"] == N.COMPLETED]
    provider_context: dict[str, Any] = {}
    for p in completed_predecessors:
        provider_context.update(p["provider_refs"])
    refs_by_node = {
        n["node_key"]: n["provider_refs"] for n in nodes if n["node_state"] == N.COMPLETED
    }
    node_config = resolve_refs(node["node_key"], node["config"], refs_by_node)
    return ExecutionContext(
        request_id=str(request["id"]),
        request_node_id=str(node["id"]),
        compiled_plan_hash=request["compiled_plan_hash"],
        template_key=request["template_key"],
        template_version=request["template_version"],
        node_key=node["node_key"],
        node_kind=node["node_kind"],
        action_type=node["action_type"],
        attempt_no=node["attempt_no"] if in_flight else node["attempt_no"] + 1,
        intent=dict(request["intent"]),
        input_params=dict(request["input_params"]),
        resolved_bindings={k: v for k, v in node_config.items() if node["config"].get(k) != v},
        risk_controls=dict(request["risk_controls"]),
        prior_artifacts=[
            {"node_key": p["node_key"], "artifacts": p["artifacts"]} for p in completed_predecessors
        ],
        node_config=node_config,
        provider_context=provider_context,
        timeout_policy=dict(node["timeout_policy"]),
        idempotency_key=node.get("idempotency_key"),
        node_provider_refs=dict(node["provider_refs"]),
        observe_count=node.get("observe_count", 0),
    )


def build_sign_request(ctx: ExecutionContext, prepared: Any) -> SignRequest:
    """The reference's SignRequest construction."""
    destination = ctx.node_config.get("destination", ctx.intent.get("destination", ""))
    return SignRequest(
        request_id=ctx.request_id,
        request_node_id=ctx.request_node_id,
        signing_intent=SigningIntent(
            action=prepared.action_type,
            asset=str(ctx.intent.get("asset", "")),
            amount=str(ctx.intent.get("amount", "")),
            destination=str(destination),
            max_fee_usd=None,
            chain_family=str(ctx.input_params.get("chain_family", "evm")),
            allowed_payload_hash=prepared.payload_hash,
        ),
        payload_format=prepared.payload_format,
        payload=prepared.payload or "",
        payload_hash=prepared.payload_hash,
        metadata=dict(ctx.input_params),
    )


def risk_control_violation(risk_controls: Row, intent: Row) -> str | None:
    """The plan's risk controls, checked before any executor sees the node.

    Known controls: `max_amount` (decimal string), `allowed_assets` and
    `allowed_destinations` (lists of strings). Returns why the intent is
    refused, or None.
    """
    max_amount = risk_controls.get("max_amount")
    if max_amount is not None:
        try:
            if Decimal(str(intent.get("amount"))) > Decimal(str(max_amount)):
                return f"amount {intent.get('amount')} exceeds max_amount {max_amount}"
        except InvalidOperation:
            return f"amount {intent.get('amount')!r} cannot be compared with max_amount"
    allowed_assets = risk_controls.get("allowed_assets")
    if allowed_assets is not None and intent.get("asset") not in allowed_assets:
        return f"asset {intent.get('asset')!r} is not in allowed_assets"
    allowed_destinations = risk_controls.get("allowed_destinations")
    if allowed_destinations is not None and intent.get("destination") not in allowed_destinations:
        return f"destination {intent.get('destination')!r} is not in allowed_destinations"
    return None
