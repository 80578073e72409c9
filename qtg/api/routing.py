"""The route table: one `Endpoint` per route, and the one wrapper that runs them all.

An endpoint declares what it takes (path, query, body and header models),
what role it needs and what it returns; `starlette_routes` turns the table
into Starlette routes and `qtg.api.openapi` turns the same table into the
API document, so the two cannot disagree. The wrapper does, in this order:
authenticate (401/403 before anything about the input is revealed), parse
path, query, headers and body (4xx naming the field), call the handler,
validate its result against the declared response model, and map any error
to `{"error": {...}}` (qtg.api.errors).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from qtg.db import ListenHub
from qtg.domain import bounded_json
from qtg.services.context import ServiceContext
from qtg.services.tokens import Principal, Role

from .auth import authenticate
from .errors import ApiError, error_response, json_response, validation_error

#: Largest request body accepted (templates are the biggest bodies).
MAX_BODY_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Header:
    """A request header an endpoint reads (documented as a parameter)."""

    name: str
    pattern: str
    description: str
    required: bool = True
    max_length: int = 200


@dataclass(slots=True)
class Call:
    """Everything a handler gets: who, what (parsed and valid), and the services."""

    request: Request
    ctx: ServiceContext
    hub: ListenHub
    principal: Principal | None
    path: Any = None
    query: Any = None
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def actor(self) -> str:
        assert self.principal is not None, "a public endpoint has no actor"
        return self.principal.name


@dataclass(frozen=True, slots=True)
class Reply:
    """A handler result with a status other than the endpoint's default."""

    body: Any
    status: int


Handler = Callable[[Call], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Endpoint:
    method: str
    path: str
    handler: Handler
    summary: str
    tag: str
    response: type[BaseModel]
    role: Role | None = Role.viewer
    status: int = 200
    path_model: type[BaseModel] | None = None
    query_model: type[BaseModel] | None = None
    body_model: type[BaseModel] | None = None
    #: False: an empty body means `{}` (decisions whose fields are all optional)
    body_required: bool = True
    headers: tuple[Header, ...] = ()
    #: statuses (besides 401/403/422 and the default) this route can answer
    errors: tuple[int, ...] = ()
    #: other success statuses (e.g. 200 for an idempotent replay of a 201)
    also: tuple[int, ...] = ()
    description: str = ""

    @property
    def operation_id(self) -> str:
        return self.handler.__name__


def starlette_routes(endpoints: list[Endpoint], ctx: ServiceContext, hub: ListenHub) -> list[Route]:
    """One Starlette Route per path, dispatching on method to its endpoint."""
    by_path: dict[str, dict[str, Endpoint]] = {}
    for ep in endpoints:
        methods = by_path.setdefault(ep.path, {})
        if ep.method in methods:
            raise ValueError(f"{ep.method} {ep.path} is declared twice")
        methods[ep.method] = ep
    routes = []
    for path, methods in by_path.items():
        runners = {m: _Runner(ep, ctx, hub) for m, ep in methods.items()}
        routes.append(Route(path, _dispatch(runners), methods=list(runners)))
    return routes


def _dispatch(runners: dict[str, _Runner]) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await runners[method](request)

    return endpoint


class _Runner:
    def __init__(self, ep: Endpoint, ctx: ServiceContext, hub: ListenHub) -> None:
        self.ep = ep
        self.ctx = ctx
        self.hub = hub
        self.where = f"{ep.method} {ep.path}"
        self.out = TypeAdapter(ep.response)

    async def __call__(self, request: Request) -> Response:
        ep = self.ep
        try:
            principal = (
                await authenticate(self.ctx.db, request.headers, ep.role)
                if ep.role is not None
                else None
            )
            call = Call(request=request, ctx=self.ctx, hub=self.hub, principal=principal)
            call.path = parse_params(ep.path_model, request.path_params, "path")
            call.query = parse_query(ep.query_model, request)
            call.headers = parse_headers(ep.headers, request)
            if ep.body_model is not None:
                raw = await read_body(request)
                if not ep.body_required and not raw.strip():
                    raw = b"{}"
                call.body = parse_body(ep.body_model, raw)
            result = await ep.handler(call)
            status = ep.status
            if isinstance(result, Reply):
                result, status = result.body, result.status
            body = self.out.dump_python(self.out.validate_python(result), mode="json")
            return json_response(body, status)
        except trio.Cancelled:
            raise
        except ClientDisconnect:
            return Response(status_code=499)
        except Exception as exc:
            response = error_response(exc, where=self.where)
            if response.status_code == 413:
                # The rest of the body was not read: end the connection after
                # answering rather than read (or wait for) megabytes for nothing.
                response.headers["Connection"] = "close"
            return response


# ------------------------------------------------------------------ parsing


def parse_params(model: type[BaseModel] | None, values: Mapping[str, Any], where: str) -> Any:
    if model is None:
        return None
    try:
        parsed = model.model_validate(dict(values))
    except ValidationError as exc:
        raise _invalid(exc, where) from None
    check_text(parsed.model_dump(), where)
    return parsed


def parse_query(model: type[BaseModel] | None, request: Request) -> Any:
    items = request.query_params.multi_items()
    if model is None:
        if items:
            raise ApiError(
                422,
                "VALIDATION_FAILED",
                f"{items[0][0]}: this route takes no query parameters",
                {"field": items[0][0]},
            )
        return None
    values: dict[str, Any] = {}
    for key, value in items:
        if key in values:
            raise ApiError(422, "VALIDATION_FAILED", f"{key}: given more than once", {"field": key})
        values[key] = value
    return parse_params(model, values, "query")


def parse_headers(headers: tuple[Header, ...], request: Request) -> dict[str, str]:
    out: dict[str, str] = {}
    for header in headers:
        value = request.headers.get(header.name)
        if value is None:
            if header.required:
                raise ApiError(
                    400,
                    "MISSING_HEADER",
                    f"the {header.name} header is required",
                    {"field": header.name},
                )
            continue
        if len(value) > header.max_length or not re.fullmatch(header.pattern, value):
            raise ApiError(
                400,
                "INVALID_HEADER",
                f"{header.name}: {header.description}",
                {"field": header.name},
            )
        out[header.name] = value
    return out


async def read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise _too_large()
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _too_large()
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large() -> ApiError:
    return ApiError(
        413,
        "BODY_TOO_LARGE",
        f"the request body is larger than {MAX_BODY_BYTES} bytes",
        {"field": "body", "max_bytes": MAX_BODY_BYTES},
    )


def parse_body(model: type[BaseModel], raw: bytes) -> Any:
    if not raw.strip():
        raise ApiError(
            400, "MALFORMED_JSON", "the request body must be a JSON object", {"field": "body"}
        )
    check_depth(raw)
    duplicate = duplicate_key(raw)
    if duplicate is not None:
        raise ApiError(
            400,
            "DUPLICATE_KEY",
            f"{duplicate}: given more than once in the request body",
            {"field": duplicate},
        )
    try:
        parsed = model.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        if any(e.get("type") == "json_invalid" for e in errors):
            first = next(e for e in errors if e.get("type") == "json_invalid")
            raise ApiError(
                400,
                "MALFORMED_JSON",
                f"the request body is not valid JSON: {first.get('msg')}",
                {"field": "body"},
            ) from None
        raise _invalid(exc, "body") from None
    check_text(parsed.model_dump(), "body")
    return parsed


def check_depth(raw: bytes) -> None:
    """400 JSON_TOO_DEEP before any recursive parser sees a body nested too deeply.

    The size is bounded already (read_body: 413); the depth must be too, and
    not by the interpreter's recursion limit, which a library may raise past
    what the stack holds (eth-account's py_ecc sets 100,000: a deep body then
    segfaulted the runtime, issue 44).
    """
    try:
        bounded_json.scan(raw, max_depth=bounded_json.MAX_DEPTH)
    except bounded_json.JsonTooDeep as exc:
        raise ApiError(
            400,
            exc.code,
            f"the request body nests arrays and objects deeper than {exc.max_depth} levels",
            {"field": "body", "max_depth": exc.max_depth},
        ) from None


class _Object(dict[str, Any]):
    """A decoded JSON object that remembers the first key path given twice in it."""

    duplicate: str | None = None


def _duplicate_below(value: Any) -> str | None:
    """The duplicated key path inside an already decoded value, relative to it."""
    if isinstance(value, _Object):
        return value.duplicate
    if isinstance(value, list):
        for i, item in enumerate(value):
            inner = _duplicate_below(item)
            if inner is not None:
                return f"[{i}]" + (inner if inner.startswith("[") else f".{inner}")
    return None


def _object_pairs(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object()
    for key, value in pairs:
        if obj.duplicate is None:
            if key in obj:
                obj.duplicate = key
            else:
                inner = _duplicate_below(value)
                if inner is not None:
                    obj.duplicate = key + (inner if inner.startswith("[") else f".{inner}")
        obj[key] = value
    return obj


def duplicate_key(raw: bytes) -> str | None:
    """The path (`intent.amount`) of the first key a JSON body gives twice, if any.

    JSON parsers disagree on `{"amount": "1.00", "amount": "9999999.00"}`:
    pydantic (and most) keep the last, a front end may show the first, so the
    amount approved would not be the amount executed (issue 26). Such a body
    means two things and is refused. A body that is not JSON at all is left
    to the model's own parse, which names that error.
    """
    try:
        value = json.loads(raw, object_pairs_hook=_object_pairs)
    except (ValueError, RecursionError):
        return None
    return _duplicate_below(value)


def _invalid(exc: ValidationError, where: str) -> ApiError:
    status, code, message, detail = validation_error(
        exc.errors(include_url=False, include_input=False), where
    )
    return ApiError(status, code, message, detail)


def check_text(value: Any, where: str, path: str = "") -> None:
    """Refuse text PostgreSQL cannot store (NUL, lone surrogates), naming the field."""
    if isinstance(value, str):
        if "\x00" in value or any("\ud800" <= ch <= "\udfff" for ch in value):
            field_name = path or where
            raise ApiError(
                422,
                "VALIDATION_FAILED",
                f"{field_name}: text must not contain NUL characters or lone surrogates",
                {"field": field_name},
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            key_path = f"{path}.{key}" if path else str(key)
            check_text(str(key), where, key_path)
            check_text(item, where, key_path)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_text(item, where, f"{path}[{i}]")


# ------------------------------------------------------------------ cursors


def encode_cursor(raw: str | int | None) -> str | None:
    """An opaque, URL-safe cursor wrapping whatever the operation uses."""
    if raw is None:
        return None
    return base64.urlsafe_b64encode(str(raw).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> str | None:
    if cursor is None:
        return None
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    if not text or not text.isprintable():
        raise ApiError(
            422, "VALIDATION_FAILED", "cursor: not a cursor this API returned", {"field": "cursor"}
        )
    return text
