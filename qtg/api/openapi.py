"""/openapi.json, generated from the route table and its pydantic models.

Nothing here is written by hand per route: paths, methods, parameters,
bodies, responses and roles all come from the `Endpoint`s the server really
runs, and the schemas from the models that really validate requests and
responses, so the document and the server cannot disagree.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from . import schemas as s
from .routing import Endpoint

REF = "#/components/schemas/{model}"

_STATUS_TEXT = {
    200: "OK",
    201: "Created",
    202: "Accepted: recorded, waiting for a second principal to confirm",
    400: "Malformed request (bad JSON, missing or invalid header)",
    401: "Missing, unknown or revoked bearer token",
    403: "The token's role is not enough, or four-eyes refused it",
    404: "Not found",
    409: "The object's current state does not allow this (detail.current_state)",
    413: "Request body too large",
    422: "Invalid input; detail.field names it. Besides the schema's shapes, the rules the "
    "fields' descriptions state (e.g. a cursor this list did not return, a venue no fetcher "
    "serves, a plan whose edge names an unknown node, a movement intent its executors refuse "
    "(an amount finer than the asset's decimals, a destination that is not an address of the "
    "chain): detail.field intent.<field>, detail.reason the executor's code) and, anywhere "
    "in a request, text with a NUL character or a lone surrogate",
    431: "Request head larger than MG_API_MAX_HEADER_BYTES (HEADERS_TOO_LARGE)",
    503: "Not ready",
}


def build_openapi(endpoints: list[Endpoint], *, title: str, version: str) -> dict[str, Any]:
    models: set[type[BaseModel]] = {s.ErrorResponse}
    for ep in endpoints:
        models.add(ep.response)
        if ep.body_model is not None:
            models.add(ep.body_model)
    ordered = sorted(models, key=lambda m: m.__name__)
    refs, defs = models_json_schema(
        [(m, "validation" if _is_input(m, endpoints) else "serialization") for m in ordered],
        ref_template=REF,
    )
    components: dict[str, Any] = dict(defs.get("$defs", {}))

    def ref(model: type[BaseModel]) -> dict[str, Any]:
        mode: JsonSchemaMode = "validation" if _is_input(model, endpoints) else "serialization"
        return refs[(model, mode)]

    paths: dict[str, dict[str, Any]] = {}
    for ep in endpoints:
        paths.setdefault(ep.path, {})[ep.method.lower()] = _operation(ep, ref, components)
    paths["/openapi.json"] = {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            "tags": ["health"],
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                }
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": title,
            "version": version,
            "description": 'qtg V3 API. Errors are {"error": {"code", "message", '
            '"detail"}}. The event stream is a WebSocket at /v3/stream '
            "(?after=&request_id=&types=&token=), not described by OpenAPI. No text "
            "anywhere in a request (values or object keys) may contain a NUL character "
            "(U+0000) or a lone surrogate: 422 naming the field.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _is_input(model: type[BaseModel], endpoints: list[Endpoint]) -> bool:
    return any(ep.body_model is model for ep in endpoints)


def _operation(ep: Endpoint, ref: Any, components: dict[str, Any]) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": ep.operation_id,
        "summary": ep.summary,
        "tags": [ep.tag],
    }
    if ep.description:
        op["description"] = ep.description
    if ep.role is not None:
        op["security"] = [{"bearer": []}]
        op["x-qtg-role"] = ep.role.name
        op["description"] = (op.get("description", "") + f" Role: {ep.role.name}.").strip()
    else:
        op["security"] = []
    parameters = []
    for location, model in (("path", ep.path_model), ("query", ep.query_model)):
        if model is not None:
            parameters.extend(_parameters(model, location, components))
    for header in ep.headers:
        parameters.append(
            {
                "name": header.name,
                "in": "header",
                "required": header.required,
                "description": header.description,
                "schema": {
                    "type": "string",
                    "pattern": f"^{header.pattern}$",
                    "maxLength": header.max_length,
                },
            }
        )
    if parameters:
        op["parameters"] = parameters
    if ep.body_model is not None:
        op["requestBody"] = {
            "required": ep.body_required,
            "content": {"application/json": {"schema": ref(ep.body_model)}},
        }
    responses: dict[str, Any] = {}
    for status in (ep.status, *ep.also):
        responses[str(status)] = {
            "description": _STATUS_TEXT.get(status, "OK"),
            "content": {"application/json": {"schema": ref(ep.response)}},
        }
    errors = set(ep.errors)
    if ep.role is not None:
        errors |= {401, 403}
    if ep.body_model is not None:
        errors |= {400, 413}
    if ep.body_model or ep.query_model or ep.path_model:
        errors.add(422)
    errors.add(431)  # the header limit sits in front of every route
    for status in sorted(errors):
        if str(status) in responses:
            continue
        schema = ref(ep.response) if status == 503 and ep.role is None else ref(s.ErrorResponse)
        responses[str(status)] = {
            "description": _STATUS_TEXT.get(status, "Error"),
            "content": {"application/json": {"schema": schema}},
        }
    op["responses"] = responses
    return op


def _parameters(
    model: type[BaseModel], location: str, components: dict[str, Any]
) -> list[dict[str, Any]]:
    schema = model.model_json_schema(ref_template=REF)
    components.update(schema.get("$defs", {}))
    required = set(schema.get("required", []))
    out = []
    for name, prop in schema.get("properties", {}).items():
        param: dict[str, Any] = {
            "name": name,
            "in": location,
            "required": location == "path" or name in required,
            "schema": {k: v for k, v in prop.items() if k not in ("title", "description")},
        }
        if "description" in prop:
            param["description"] = prop["description"]
        out.append(param)
    return out
