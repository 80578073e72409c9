"""POST/GET /v3/capital-transfers over real HTTP: create, replay, refuse, follow to completed."""

from __future__ import annotations

import uuid

from engine.helpers import drive

from qtg.providers.registry import build_registry
from qtg.services.context import ServiceContext

from .conftest import Api, make_template

GRAPH = {
    "nodes": [
        {"key": "withdraw", "kind": "action", "action_type": "cex_withdrawal"},
        {"key": "receive", "kind": "observe", "action_type": "destination_chain_receive_observe"},
    ],
    "edges": [["withdraw", "receive"]],
}
BODY = {
    "asset": "USDC",
    "amount": "1000.00",
    "source": "binance:treasury",
    "destination": "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed",
    "template_key": "treasury.route",
    "note": "rebalance",
}


async def test_a_capital_transfer_created_through_the_api_ends_completed(api: Api) -> None:
    await make_template(api, "treasury.route", GRAPH)
    r = await api["alice"].post(
        "/v3/capital-transfers", json=BODY, headers={"Idempotency-Key": "ct-api-1"}
    )
    assert r.status_code == 201, r.text
    transfer = r.json()
    assert transfer["status"] == "movement_created"
    assert transfer["request_state"] == "PENDING_APPROVAL" and transfer["created_by"] == "alice"

    replay = await api["alice"].post(
        "/v3/capital-transfers", json=BODY, headers={"Idempotency-Key": "ct-api-1"}
    )
    assert replay.status_code == 200 and replay.json()["id"] == transfer["id"]
    other = await api["alice"].post(
        "/v3/capital-transfers",
        json={**BODY, "amount": "999.00"},
        headers={"Idempotency-Key": "ct-api-1"},
    )
    assert other.status_code == 409
    assert other.json()["error"]["detail"]["field"] == "Idempotency-Key"

    # the movement still needs its own four-eyes approval
    own = await api["alice"].post(f"/v3/movements/{transfer['request_id']}/approve")
    assert own.status_code == 403
    approved = await api["bob"].post(f"/v3/movements/{transfer['request_id']}/approve")
    assert approved.status_code == 200, approved.text
    svc = ServiceContext(api.db, api.settings, build_registry(api.settings, api.db))
    try:
        assert (await drive(svc, transfer["request_id"]))["request_state"] == "COMPLETED"
    finally:
        await svc.providers.aclose()

    got = await api["vic"].get(f"/v3/capital-transfers/{transfer['id']}")
    assert got.status_code == 200
    assert (got.json()["status"], got.json()["request_state"]) == ("completed", "COMPLETED")
    page = await api["vic"].get("/v3/capital-transfers", params={"status": "completed"})
    assert [t["id"] for t in page.json()["items"]] == [transfer["id"]]
    assert page.json()["next_cursor"] is None
    empty = await api["vic"].get("/v3/capital-transfers", params={"status": "pending"})
    assert empty.json()["items"] == []


async def test_capital_transfer_input_is_refused_with_the_field_named(api: Api) -> None:
    await make_template(api, "treasury.route", GRAPH)
    key = {"Idempotency-Key": "ct-bad"}
    cases = [
        ({**BODY, "amount": 1000}, 422, "amount"),
        ({**BODY, "amount": "0"}, 422, "amount"),
        ({**BODY, "surprise": 1}, 422, "surprise"),
        ({k: v for k, v in BODY.items() if k != "template_key"}, 422, "template_key"),
        ({**BODY, "template_key": "no.such"}, 404, "template_key"),
    ]
    for body, status, field in cases:
        r = await api["alice"].post("/v3/capital-transfers", json=body, headers=key)
        assert r.status_code == status, (body, r.text)
        assert r.json()["error"]["detail"]["field"] == field, r.text
    missing = await api["alice"].post("/v3/capital-transfers", json=BODY)
    assert missing.status_code == 400
    viewer = await api["vic"].post("/v3/capital-transfers", json=BODY, headers=key)
    assert viewer.status_code == 403
    unknown = await api["vic"].get(f"/v3/capital-transfers/{uuid.uuid4()}")
    assert unknown.status_code == 404
    not_an_id = await api["vic"].get("/v3/capital-transfers/nope")
    assert not_an_id.status_code == 422
    assert (await api["vic"].get("/v3/capital-transfers")).json()["items"] == []
