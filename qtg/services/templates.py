"""Templates and their versions: the plans movements are created from.

A template is a named DAG; each change is a new version (the previous ACTIVE
one is RETIRED), so a movement always points at the exact plan it was
approved against, and plan-hash drift can be detected at dispatch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from qtg.db import Database, Jsonb, Tx, sql_family
from qtg.domain.plan import Plan, compile_graph
from qtg.providers.registry import AmbiguousExecutorError, ProviderRegistry, UnknownExecutorError
from qtg.services.auditing import record_audit
from qtg.services.errors import InvalidInput, NotFound

SQL = sql_family(
    "templates",
    "upsert_template",
    "next_version",
    "retire_active",
    "insert_version",
    "insert_plan_nodes",
    "insert_plan_edges",
    "get_template",
    "list_templates",
)

_TEMPLATE_KEY = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,127}$")

#: MG_TEMPLATE_MAX_NODES's default (qtg.config keeps the setting).
DEFAULT_TEMPLATE_MAX_NODES = 200


def check_template_size(graph: Any, max_nodes: int) -> None:
    """Refuse a graph of more than `max_nodes` nodes (InvalidInput naming the
    limit), before compiling it: one very wide movement occupies the engine
    for hours and slows every other movement (issue 25 item 6)."""
    nodes = graph.get("nodes") if isinstance(graph, Mapping) else None
    if isinstance(nodes, list) and len(nodes) > max_nodes:
        raise InvalidInput(
            f"graph.nodes has {len(nodes)} nodes; at most {max_nodes} are allowed"
            " (MG_TEMPLATE_MAX_NODES)",
            code="TEMPLATE_TOO_LARGE",
            detail={
                "field": "graph.nodes",
                "nodes": len(nodes),
                "limit": max_nodes,
                "setting": "MG_TEMPLATE_MAX_NODES",
            },
        )


def check_template_header(template_key: Any, name: Any, risk_controls: Any) -> None:
    """Refuse a bad template key, name or risk_controls (InvalidInput naming the field)."""
    if not isinstance(template_key, str) or not _TEMPLATE_KEY.match(template_key):
        raise InvalidInput(
            "template_key must be 1-128 characters of a-z, 0-9, '_', '.', '-', starting "
            "with a letter or digit",
            detail={"field": "template_key"},
        )
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput("name must be a non-empty string", detail={"field": "name"})
    if not isinstance(risk_controls, Mapping):
        raise InvalidInput("risk_controls must be an object", detail={"field": "risk_controls"})


def check_executors(plan: Plan, providers: ProviderRegistry | None) -> None:
    """Refuse a plan whose action or observe node no registered executor serves.

    Such a template used to be stored (201) and its movements failed only after
    approval, at dispatch, with EXECUTOR_NOT_FOUND (issue 44). The check is the
    dispatcher's own lookup (`ProviderRegistry.executor_for`: by executor_key
    when the node names one, else the only executor of its action_type), so
    the two cannot disagree. Manual nodes are completed by an operator and
    need no executor. `providers` None (seeding and service-level tests, which
    run no dispatcher) skips the check; every API route passes its registry.
    """
    if providers is None:
        return
    for node in plan.nodes:
        if node.kind == "manual":
            continue
        try:
            executor = providers.executor_for(node.action_type, node.executor_key)
        except UnknownExecutorError as exc:
            ambiguous = isinstance(exc, AmbiguousExecutorError)
            field_name = f"graph.nodes[{node.position}]." + (
                "executor_key" if node.executor_key is not None else "action_type"
            )
            raise InvalidInput(
                f"{field_name}: node {node.key!r}: {exc}",
                code="EXECUTOR_AMBIGUOUS" if ambiguous else "EXECUTOR_NOT_FOUND",
                detail={
                    "field": field_name,
                    "node_key": node.key,
                    "action_type": node.action_type,
                    "executor_key": node.executor_key,
                    "registered_action_types": sorted(providers.action_types()),
                },
            ) from None
        # an executor may refuse where a node sits (`plan_problem`, optional, no I/O)
        check = getattr(executor, "plan_problem", None)
        problem = check(plan, node) if check is not None else None
        if problem is not None:
            code, message = problem
            field_name = f"graph.nodes[{node.position}]"
            raise InvalidInput(
                f"{field_name}: node {node.key!r}: {message}",
                code=code,
                detail={"field": field_name, "node_key": node.key, "action_type": node.action_type},
            )


async def create_template_version_in(
    tx: Tx,
    *,
    template_key: str,
    name: str,
    description: str = "",
    graph: Any,
    risk_controls: Mapping[str, Any] | None = None,
    actor: str,
    max_nodes: int = DEFAULT_TEMPLATE_MAX_NODES,
    providers: ProviderRegistry | None = None,
) -> dict[str, Any]:
    """Create the template if needed and add a new ACTIVE version, in `tx`.

    Raises PlanError (naming the node or edge at fault) for an invalid graph
    and InvalidInput for a bad key, name or risk_controls, a graph of more
    than `max_nodes` nodes (MG_TEMPLATE_MAX_NODES), or a node no executor of
    `providers` serves (EXECUTOR_NOT_FOUND) — all before anything is written.
    """
    risk_controls = {} if risk_controls is None else risk_controls
    check_template_header(template_key, name, risk_controls)
    check_template_size(graph, max_nodes)
    plan = compile_graph(graph)
    check_executors(plan, providers)
    template = await tx.fetchrow(
        SQL.upsert_template,
        {"template_key": template_key, "name": name, "description": description or ""},
    )
    assert template is not None
    version = await tx.fetchval(SQL.next_version, {"template_id": template["id"]})
    await tx.execute(SQL.retire_active, {"template_id": template["id"]})
    version_id = await tx.fetchval(
        SQL.insert_version,
        {
            "template_id": template["id"],
            "version": version,
            "graph": Jsonb(graph),
            "graph_hash": plan.graph_hash,
            "risk_controls": Jsonb(dict(risk_controls)),
            "created_by": actor,
        },
    )
    await tx.execute(
        SQL.insert_plan_nodes,
        {
            "template_version_id": version_id,
            "nodes": Jsonb(
                [
                    {
                        "key": n.key,
                        "kind": n.kind,
                        "action_type": n.action_type,
                        "executor_key": n.executor_key,
                        "config": n.config,
                        "timeout_policy": n.timeout_policy,
                        "position": n.position,
                    }
                    for n in plan.nodes
                ]
            ),
        },
    )
    if plan.edges:
        await tx.execute(
            SQL.insert_plan_edges,
            {
                "template_version_id": version_id,
                "edges": Jsonb([{"from_key": a, "to_key": b} for a, b in plan.edges]),
            },
        )
    result = {
        "template_key": template_key,
        "template_id": template["id"],
        "version": version,
        "template_version_id": version_id,
        "graph_hash": plan.graph_hash,
        "created": template["created"],
    }
    await record_audit(
        tx,
        actor=actor,
        action="template.version_created",
        object_type="template",
        object_id=template_key,
        detail={"version": version, "graph_hash": plan.graph_hash},
    )
    return result


async def create_template(
    db: Database,
    *,
    template_key: str,
    name: str,
    description: str = "",
    graph: Any,
    risk_controls: Mapping[str, Any] | None = None,
    actor: str,
    max_nodes: int = DEFAULT_TEMPLATE_MAX_NODES,
    providers: ProviderRegistry | None = None,
) -> dict[str, Any]:
    async with db.transaction() as tx:
        return await create_template_version_in(
            tx,
            template_key=template_key,
            name=name,
            description=description,
            graph=graph,
            risk_controls=risk_controls,
            actor=actor,
            max_nodes=max_nodes,
            providers=providers,
        )


async def get_template(db: Database, template_key: str) -> dict[str, Any]:
    row = await db.fetchrow(SQL.get_template, {"template_key": template_key})
    if row is None:
        raise NotFound(
            f"template {template_key!r} not found", detail={"template_key": template_key}
        )
    return row


async def list_templates(db: Database) -> list[dict[str, Any]]:
    return await db.fetch(SQL.list_templates)
