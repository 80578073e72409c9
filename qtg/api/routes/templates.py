"""Templates and their versions."""

from __future__ import annotations

from typing import Any

from qtg.api import schemas as s
from qtg.api.routing import Call, Endpoint
from qtg.services import readmodels, templates
from qtg.services.errors import NotFound
from qtg.services.tokens import Role


async def create_template(call: Call) -> Any:
    body: s.TemplateCreate = call.body
    return await templates.create_template(
        call.ctx.db,
        template_key=body.template_key,
        name=body.name,
        description=body.description,
        graph=body.graph,
        risk_controls=body.risk_controls,
        actor=call.actor,
        max_nodes=call.ctx.settings.template_max_nodes,
        providers=call.ctx.providers,
    )


async def list_templates(call: Call) -> Any:
    return {"items": await templates.list_templates(call.ctx.db)}


async def get_template(call: Call) -> Any:
    return await templates.get_template(call.ctx.db, call.path.template_key)


async def list_template_versions(call: Call) -> Any:
    key = call.path.template_key
    versions = await readmodels.template_versions(call.ctx.db, key)
    if versions is None:
        raise NotFound(f"template {key!r} not found", detail={"template_key": key})
    return {"items": versions}


ENDPOINTS = [
    Endpoint(
        "POST",
        "/v3/templates",
        create_template,
        "Create a template, or a new version of one",
        "templates",
        s.TemplateCreated,
        role=Role.admin,
        status=201,
        body_model=s.TemplateCreate,
        errors=(),
        description="The graph is compiled and validated; a new version becomes ACTIVE and the "
        "previous one RETIRED. An invalid graph is a 422 whose detail.field names the node or "
        "edge at fault (graph.nodes[1].kind); a node no registered executor serves is a 422 "
        "EXECUTOR_NOT_FOUND naming the node and its action_type, and nothing is stored.",
    ),
    Endpoint(
        "GET",
        "/v3/templates",
        list_templates,
        "List templates with their active version",
        "templates",
        s.TemplateList,
    ),
    Endpoint(
        "GET",
        "/v3/templates/{template_key}",
        get_template,
        "One template with its active version (graph, risk_controls, graph_hash)",
        "templates",
        s.TemplateDetail,
        path_model=s.TemplateKeyPath,
        errors=(404,),
    ),
    Endpoint(
        "GET",
        "/v3/templates/{template_key}/versions",
        list_template_versions,
        "Every version of a template, newest first",
        "templates",
        s.TemplateVersionList,
        path_model=s.TemplateKeyPath,
        errors=(404,),
    ),
]
