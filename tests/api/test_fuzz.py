"""A small schema-driven fuzzer: every operation of /openapi.json, bad and odd inputs, no 5xx.

Deterministic (seeded), a few hundred requests. For each operation it sends
values generated from the document's own schemas — valid ones, wrong types,
boundary numbers, odd text (NUL, surrogates, very long, control characters),
unknown fields and parameters — and requires a non-5xx answer in the API's
error shape. The fixture additionally proves that nothing reached the
catch-all 500 or the database's data-exception net.
"""

from __future__ import annotations

import json
import random
from typing import Any

from .conftest import Api, make_movement, make_template

ODD_TEXT = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\ud800",
    "💸",
    "x" * 5000,
    "../../etc/passwd",
    "%00",
    "'; DROP TABLE movement_requests; --",
    "\u202e",
    "NaN",
    "-1",
    "1e309",
    "null",
    "{}",
    "00000000-0000-0000-0000-000000000000",
]
ODD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**63,
    2**64 + 1,
    1.5,
    -0.0,
    [],
    {},
    [None],
    {"": None},
    {"\x00": 1},
    "x" * 100_000,
    *ODD_TEXT,
]


class Gen:
    def __init__(self, doc: dict[str, Any], seed: int) -> None:
        self.schemas = doc["components"]["schemas"]
        self.rng = random.Random(seed)

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = self.schemas[schema["$ref"].rsplit("/", 1)[1]]
        return schema

    def value(self, schema: dict[str, Any], depth: int = 0, bad: float = 0.15) -> Any:
        if self.rng.random() < bad or depth > 4:
            return self.rng.choice(ODD_VALUES)
        schema = self.resolve(schema)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return self.rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf", "allOf"):
            if key in schema:
                return self.value(self.rng.choice(schema[key]), depth + 1, bad)
        kind = schema.get("type")
        if kind == "string":
            if schema.get("format") == "uuid":
                return f"00000000-0000-4000-8000-{self.rng.randrange(10**6):012d}"
            if schema.get("pattern", "").startswith("^[0-9]"):
                return self.rng.choice(["1", "125.50", "0.000001", "99999"])
            return self.rng.choice(
                ["demo.x", "withdraw", "alice", "USDC", "0xabc", "t.fuzz", *ODD_TEXT[:4]]
            )
        if kind == "integer":
            return self.rng.choice([0, 1, 50, 200, 201, -5, 10**12])
        if kind == "number":
            return self.rng.choice([0, 1.5, -3])
        if kind == "boolean":
            return self.rng.choice([True, False])
        if kind == "array":
            return [
                self.value(schema.get("items", {}), depth + 1, bad)
                for _ in range(self.rng.randrange(3))
            ]
        if kind == "object" or "properties" in schema:
            out = {}
            for name, prop in schema.get("properties", {}).items():
                if name in schema.get("required", []) or self.rng.random() < 0.5:
                    out[name] = self.value(prop, depth + 1, bad)
            if self.rng.random() < 0.1:
                out[self.rng.choice([*ODD_TEXT[:6], "extra"])] = 1
            return out
        return self.rng.choice(ODD_VALUES)

    def text(self, schema: dict[str, Any]) -> str:
        v = self.value(schema, bad=0.4)
        if isinstance(v, str):
            return v
        return json.dumps(v) if not isinstance(v, bool) else str(v).lower()


async def test_no_input_makes_a_5xx(api: Api) -> None:
    await make_template(api)
    real = (await make_movement(api))["id"]
    doc = (await api["anon"].get("/openapi.json")).json()
    gen = Gen(doc, seed=20240607)
    client = api["admin"]
    sent = 0
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            if path == "/openapi.json":
                continue
            for _ in range(12):
                url = path
                query: dict[str, str] = {}
                headers: dict[str, str] = {}
                for param in op.get("parameters", []):
                    value = gen.text(param["schema"])[:1500]  # clients cap URLs too
                    if param["in"] == "path":
                        if param["name"] == "request_id" and gen.rng.random() < 0.3:
                            value = real
                        url = url.replace("{" + param["name"] + "}", _path_safe(value))
                    elif param["in"] == "query" and gen.rng.random() < 0.7:
                        query[param["name"]] = value
                    elif param["in"] == "header" and gen.rng.random() < 0.8:
                        headers[param["name"]] = _header_safe(value)
                if gen.rng.random() < 0.1:
                    query["unknown"] = "1"
                content: bytes | None = None
                if "requestBody" in op:
                    schema = op["requestBody"]["content"]["application/json"]["schema"]
                    roll = gen.rng.random()
                    if roll < 0.1:
                        content = gen.rng.choice([b"{", b"[]", b"null", b"\xff", b"", b"1"])
                    else:
                        body = gen.value(schema)
                        content = json.dumps(
                            body, ensure_ascii=gen.rng.random() < 0.5, allow_nan=True
                        ).encode("utf-8", "surrogatepass")
                    headers["Content-Type"] = "application/json"
                if query:
                    url += "?" + "&".join(
                        f"{_path_safe(k)}={_path_safe(v)}" for k, v in query.items()
                    )
                r = await client.request(method.upper(), url, content=content, headers=headers)
                sent += 1
                assert r.status_code < 500, (method, url, query, content, r.text)
                if r.status_code >= 400:
                    assert set(r.json()["error"]) == {"code", "message", "detail"}, r.text
    assert sent > 250


def _path_safe(value: str) -> str:
    from urllib.parse import quote

    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def _header_safe(value: str) -> str:
    return "".join(ch for ch in value if 0x20 <= ord(ch) < 0x7F)[:300].strip() or "k"


async def test_the_document_is_as_strict_as_validation(api: Api) -> None:
    """callback_url and graph are described as tightly as they are checked (issue 17 item 11)."""
    from qtg.domain.plan import NODE_KINDS

    doc = (await api["anon"].get("/openapi.json")).json()
    schemas = doc["components"]["schemas"]
    [url, _null] = schemas["MovementCreate"]["properties"]["callback_url"]["anyOf"]
    assert url["format"] == "uri" and url["pattern"].startswith("^[Hh][Tt][Tt][Pp][Ss]?://")
    for model in ("TemplateCreate", "ProposalCreate"):
        graph = schemas[model]["properties"]["graph"]
        assert graph["additionalProperties"] is False and graph["required"] == ["nodes"]
        node = graph["properties"]["nodes"]["items"]
        assert node["additionalProperties"] is False
        assert node["properties"]["kind"]["enum"] == list(NODE_KINDS)
        assert node["required"] == ["key", "kind", "action_type"]
        edge = graph["properties"]["edges"]["items"]
        assert (edge["minItems"], edge["maxItems"]) == (2, 2)
    # what the document says is refused, validation refuses too
    r = await api["admin"].post(
        "/v3/templates",
        json={
            "template_key": "t.doc",
            "name": "x",
            "graph": {"nodes": [{"key": "a", "kind": "teleport", "action_type": "x"}]},
        },
    )
    assert r.status_code == 422 and r.json()["error"]["detail"]["field"].startswith("graph")
    await make_template(api)
    r = await api["alice"].post(
        "/v3/movements",
        headers={"Idempotency-Key": "doc-1"},
        json={
            "template_key": "t.manual",
            "callback_url": "ftp://example.test/x",
            "intent": {"asset": "USDC", "amount": "1", "destination": "0xabc"},
        },
    )
    assert r.status_code == 422 and r.json()["error"]["detail"]["field"] == "callback_url"
