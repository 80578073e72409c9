"""Bad input is a 4xx naming the field — never a 500 (the fixture asserts no 500 happened)."""

from __future__ import annotations

import uuid
from typing import Any

from .conftest import INTENT, Api, make_movement, make_template


def _field(r: Any) -> str:
    return r.json()["error"]["detail"].get("field")


async def _create(api: Api, body: Any, *, raw: bytes | None = None, key: str | None = "k1") -> Any:
    headers = {"Idempotency-Key": key} if key is not None else {}
    if raw is not None:
        headers["Content-Type"] = "application/json"
        return await api["alice"].post("/v3/movements", content=raw, headers=headers)
    return await api["alice"].post("/v3/movements", json=body, headers=headers)


BAD_BODIES: list[tuple[Any, str]] = [
    ({"intent": INTENT}, "template_key"),
    ({"template_key": "t.manual"}, "intent"),
    ({"template_key": "BAD KEY", "intent": INTENT}, "template_key"),
    ({"template_key": "t.manual", "intent": {**INTENT, "amount": 125.5}}, "intent.amount"),
    ({"template_key": "t.manual", "intent": {**INTENT, "amount": 125}}, "intent.amount"),
    ({"template_key": "t.manual", "intent": {**INTENT, "amount": "1e5"}}, "intent.amount"),
    ({"template_key": "t.manual", "intent": {**INTENT, "amount": "-3"}}, "intent.amount"),
    ({"template_key": "t.manual", "intent": {**INTENT, "amount": "0"}}, "intent.amount"),
    ({"template_key": "t.manual", "intent": {**INTENT, "amount": "NaN"}}, "intent.amount"),
    (
        {"template_key": "t.manual", "intent": {"asset": "USDC", "amount": "1"}},
        "intent.destination",
    ),
    ({"template_key": "t.manual", "intent": {**INTENT, "asset": 7}}, "intent.asset"),
    ({"template_key": "t.manual", "intent": INTENT, "input_params": []}, "input_params"),
    ({"template_key": "t.manual", "intent": INTENT, "surprise": 1}, "surprise"),
    ({"template_key": "t.manual", "intent": INTENT, "callback_url": 5}, "callback_url"),
    (
        {"template_key": "t.manual", "intent": {**INTENT, "destination": "a\u0000b"}},
        "intent.destination",
    ),
    (
        {"template_key": "t.manual", "intent": INTENT, "input_params": {"k\u0000": 1}},
        "input_params.k\u0000",
    ),
    ([1, 2], "body"),
    ("just a string", "body"),
]


async def test_a_json_number_amount_is_told_amounts_are_decimal_strings(api: Api) -> None:
    await make_template(api)
    for amount in (125.5, 125, 1e30):
        r = await _create(api, {"template_key": "t.manual", "intent": {**INTENT, "amount": amount}})
        assert r.status_code == 422, r.text
        assert r.json()["error"]["message"] == (
            'intent.amount: amounts are decimal strings such as "125.50", not JSON numbers'
        )


async def test_workers_list_has_a_next_cursor_like_every_list(api: Api) -> None:
    r = await api["vic"].get("/v3/workers")
    assert r.status_code == 200
    assert "next_cursor" in r.json() and r.json()["next_cursor"] is None


async def test_bad_movement_bodies_name_the_field(api: Api) -> None:
    await make_template(api)
    for body, field in BAD_BODIES:
        r = await _create(api, body)
        assert r.status_code == 422, (body, r.text)
        assert _field(r) == field, (body, r.json())
        assert r.json()["error"]["code"] == "VALIDATION_FAILED"


async def test_malformed_json_and_headers(api: Api) -> None:
    for raw in (b"{not json", b"", b"   ", b'{"a": 1', b"\xff\xfe"):
        r = await _create(api, None, raw=raw)
        assert r.status_code == 400, (raw, r.text)
        assert r.json()["error"]["code"] == "MALFORMED_JSON"
        assert _field(r) == "body"
    r = await _create(api, {"template_key": "t.manual", "intent": INTENT}, key=None)
    assert r.status_code == 400 and _field(r) == "Idempotency-Key"
    assert r.json()["error"]["code"] == "MISSING_HEADER"
    r = await _create(api, {"template_key": "t.manual", "intent": INTENT}, key="has space")
    assert r.status_code == 400 and _field(r) == "Idempotency-Key"
    r = await api["alice"].post(
        "/v3/movements",
        content=b"{" + b" " * (1024 * 1024 + 10) + b"}",
        headers={"Idempotency-Key": "k"},
    )
    assert r.status_code == 413


async def test_bad_path_and_query_parameters(api: Api) -> None:
    cases = [
        ("GET", "/v3/movements/not-a-uuid", "request_id"),
        ("POST", "/v3/movements/123/approve", "request_id"),
        (
            "POST",
            "/v3/movements/00000000-0000-0000-0000-000000000000/nodes/Bad-Key/retry",
            "node_key",
        ),
        ("GET", "/v3/movements?limit=0", "limit"),
        ("GET", "/v3/movements?limit=201", "limit"),
        ("GET", "/v3/movements?limit=ten", "limit"),
        ("GET", "/v3/movements?limit=99999999999999999999999", "limit"),
        ("GET", "/v3/movements?state=DONE", "state"),
        ("GET", "/v3/movements?cursor=%25%25", "cursor"),
        ("GET", "/v3/movements?cursor=bm90IGEgY3Vyc29y", "cursor"),  # "not a cursor"
        ("GET", "/v3/movements?cursor=AA", "cursor"),  # a NUL byte
        ("GET", "/v3/movements?surprise=1", "surprise"),
        ("GET", "/v3/movements?limit=1&limit=2", "limit"),
        ("GET", "/v3/audit-events?cursor=Zm9v", "cursor"),  # "foo"
        ("GET", "/v3/audit-events?actor=a%00b", "actor"),
        ("GET", "/v3/template-proposals/xyz", "proposal_id"),
        ("GET", "/v3/template-proposals?state=MAYBE", "state"),
        ("GET", "/v3/templates/UPPER", "template_key"),
        ("GET", "/v3/workers?network_class=a%20b", "network_class"),
        ("GET", "/v3/executors?x=1", "x"),
    ]
    for method, path, field in cases:
        r = await api["admin"].request(method, path)
        assert r.status_code == 422, (path, r.text)
        assert _field(r) == field, (path, r.json())


async def test_other_bad_bodies(api: Api) -> None:
    await make_template(api)
    rid = (await make_movement(api))["id"]
    r = await api["admin"].post(
        "/v3/templates", json={"template_key": "t.x", "name": "x", "graph": {"nodes": []}}
    )
    assert r.status_code == 422 and _field(r).startswith("graph")
    r = await api["admin"].post(
        "/v3/templates",
        json={
            "template_key": "t.x",
            "name": "x",
            "graph": {"nodes": [{"key": "a", "kind": "teleport", "action_type": "x"}]},
        },
    )
    assert r.status_code == 422 and _field(r) == "graph.nodes[0].kind", r.json()
    r = await api["admin"].post("/v3/templates", json={"template_key": "t.x", "name": ""})
    assert r.status_code == 422 and _field(r) in {"name", "graph"}
    r = await api["bob"].post(f"/v3/movements/{rid}/reject", json={"reason": 12})
    assert r.status_code == 422 and _field(r) == "reason"
    r = await api["bob"].post(f"/v3/movements/{rid}/approve", json={"note": "x"})
    assert r.status_code == 422 and _field(r) == "note"
    r = await api["bob"].post(
        f"/v3/movements/{rid}/nodes/confirm/complete", json={"artifacts": "yes"}
    )
    assert r.status_code == 422 and _field(r) == "artifacts"
    r = await api["admin"].put(
        "/v3/signers/s1/expected-identity", json={"expected_signer_address": "0x123"}
    )
    assert r.status_code == 422 and _field(r) == "expected_signer_address"
    r = await api["alice"].post(
        "/v3/movements",
        json={"template_key": "t.manual", "intent": INTENT, "callback_url": "ftp://example.com/x"},
        headers={"Idempotency-Key": "cb"},
    )
    assert r.status_code == 422 and _field(r) == "callback_url"


async def test_unknown_routes_and_methods(api: Api) -> None:
    r = await api["alice"].get("/v3/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"
    r = await api["alice"].delete("/v3/movements")
    assert r.status_code == 405 and r.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    r = await api["alice"].get(f"/v3/movements/{uuid.uuid4()}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "NOT_FOUND"
    r = await api["alice"].post(
        "/v3/movements",
        json={"template_key": "t.none", "intent": INTENT},
        headers={"Idempotency-Key": "none"},
    )
    assert r.status_code == 404


async def test_a_key_given_twice_is_refused_on_every_body(api: Api) -> None:
    """`"amount":"1.00","amount":"9999999.00"` was stored as the last one while a
    front end may show the first (issue 26): a body that means two things is a
    400 naming the key, and nothing is created."""
    await make_template(api)
    await make_template(api, "t.other")
    cases = [
        (
            b'{"template_key": "t.manual", "intent": {"asset": "USDC", "amount": "1.00",'
            b' "amount": "9999999.00", "destination": "0xabc"}}',
            "intent.amount",
        ),
        (
            b'{"template_key": "t.manual", "template_key": "t.other",'
            b' "intent": {"asset": "USDC", "amount": "1.00", "destination": "0xabc"}}',
            "template_key",
        ),
        (
            b'{"template_key": "t.manual", "intent": {"asset": "USDC", "amount": "1.00",'
            b' "destination": "0xabc"}, "input_params": {"a": [{"b": 1, "b": 2}]}}',
            "input_params.a[0].b",
        ),
    ]
    for raw, field in cases:
        r = await _create(api, None, raw=raw, key=uuid.uuid4().hex)
        assert r.status_code == 400, (raw, r.text)
        assert r.json()["error"]["code"] == "DUPLICATE_KEY", r.text
        assert _field(r) == field, r.text
    listed = await api["alice"].get("/v3/movements")
    assert listed.status_code == 200 and listed.json()["items"] == []
    # Every body goes through the same parser: a template, too.
    r = await api["admin"].post(
        "/v3/templates",
        content=b'{"template_key": "t.x", "name": "x", "name": "y", "graph": {}}',
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 400 and _field(r) == "name", r.text
    # The same key at different levels, or in sibling objects, is no duplicate.
    r = await _create(
        api,
        None,
        raw=b'{"template_key": "t.manual", "intent": {"asset": "USDC", "amount": "1.00",'
        b' "destination": "0xabc"}, "input_params": {"asset": 1, "l": [{"k": 1}, {"k": 2}]}}',
        key=uuid.uuid4().hex,
    )
    assert r.status_code == 201, r.text


async def test_a_body_nested_too_deep_is_a_400_before_any_parse(api) -> None:
    """Depth is bounded by a non-recursive scan, not by the recursion limit (issue 44):
    65 levels are refused naming the bound, 64 reach the model; nothing is stored."""
    inner = b'{"a":' * 62 + b"1" + b"}" * 62  # 62 + intent + the body itself = 64
    ok = b'{"template_key": "t.manual", "intent": {"x": ' + inner + b"}}"
    r = await _create(api, None, raw=ok, key=uuid.uuid4().hex)
    assert r.status_code == 422, r.text  # the model speaks: depth was accepted
    deep = b'{"template_key": "t.manual", "intent": {"x": [' + inner + b"]}}"
    r = await _create(api, None, raw=deep, key=uuid.uuid4().hex)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == {
        "code": "JSON_TOO_DEEP",
        "message": "the request body nests arrays and objects deeper than 64 levels",
        "detail": {"field": "body", "max_depth": 64},
    }
    listed = await api["alice"].get("/v3/movements")
    assert listed.status_code == 200 and listed.json()["items"] == []
