"""Every route's happy path, through a real server over loopback HTTP."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from qtg.db import Query

from .conftest import ACTION_GRAPH, INTENT, MANUAL_GRAPH, Api, make_movement, make_template

# What the dispatcher would do to a node whose preflight refuses (no worker runs here).
EXECUTE = Query(
    "t/execute",
    "UPDATE movement_requests SET request_state = 'EXECUTING' WHERE id = %(request_id)s",
)
FAIL_NODE = Query(
    "t/fail_node",
    "UPDATE movement_request_nodes SET node_state = 'FAILED', error_code = 'TEST' "
    "WHERE request_id = %(request_id)s AND node_key = %(node_key)s",
)


async def test_health_and_readiness(api: Api) -> None:
    r = await api["anon"].get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    r = await api["anon"].get("/readyz")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "status": "ready",
        "checks": {"database": True, "migrations": True, "listen": True},
        "reasons": [],
        # the test server has no standby: ready, and says a failover could lose commits
        "durability": {
            "synchronous": False,
            "synchronous_standby_names": "",
            "synchronous_commit": "on",
            "standbys": 0,
            "synchronous_standbys": 0,
            "reason": "no synchronous standby configured (synchronous_standby_names is empty)",
            "required": False,
            "held": False,
        },
    }


async def test_templates(api: Api) -> None:
    created = await make_template(api, "t.one", ACTION_GRAPH)
    assert created["version"] == 1 and created["created"] is True
    again = await api["admin"].post(
        "/v3/templates", json={"template_key": "t.one", "name": "One, v2", "graph": MANUAL_GRAPH}
    )
    assert again.status_code == 201 and again.json()["version"] == 2

    listed = (await api["vic"].get("/v3/templates")).json()["items"]
    assert [(t["template_key"], t["version"]) for t in listed] == [("t.one", 2)]
    one = (await api["vic"].get("/v3/templates/t.one")).json()
    assert one["graph"] == MANUAL_GRAPH and one["name"] == "One, v2"
    versions = (await api["vic"].get("/v3/templates/t.one/versions")).json()["items"]
    assert [(v["version"], v["status"]) for v in versions] == [(2, "ACTIVE"), (1, "RETIRED")]
    assert (await api["vic"].get("/v3/templates/nope")).status_code == 404
    assert (await api["vic"].get("/v3/templates/nope/versions")).status_code == 404


async def test_template_proposals(api: Api) -> None:
    r = await api["alice"].post(
        "/v3/template-proposals",
        json={"template_key": "t.prop", "name": "Proposed", "graph": MANUAL_GRAPH},
    )
    assert r.status_code == 201, r.text
    proposal = r.json()
    assert proposal["proposal_state"] == "PENDING_REVIEW" and proposal["proposed_by"] == "alice"
    pid = proposal["id"]
    assert (await api["vic"].get(f"/v3/template-proposals/{pid}")).json()["id"] == pid
    listed = (await api["vic"].get("/v3/template-proposals?state=PENDING_REVIEW")).json()
    assert [p["id"] for p in listed["items"]] == [pid]

    r = await api["admin"].post(f"/v3/template-proposals/{pid}/approve", json={"note": "ok"})
    assert r.status_code == 200, r.text
    assert r.json()["proposal_state"] == "APPROVED"
    assert r.json()["template_version"]["version"] == 1
    assert (await api["vic"].get("/v3/templates/t.prop")).json()["version"] == 1

    second = (
        await api["alice"].post(
            "/v3/template-proposals",
            json={"template_key": "t.prop", "name": "Proposed 2", "graph": MANUAL_GRAPH},
        )
    ).json()
    r = await api["admin"].post(f"/v3/template-proposals/{second['id']}/reject")
    assert r.status_code == 200 and r.json()["proposal_state"] == "REJECTED"


async def test_movement_lifecycle_by_two_principals(api: Api) -> None:
    await make_template(api)
    movement = await make_movement(api, who="alice")
    rid = movement["id"]
    assert movement["request_state"] == "PENDING_APPROVAL"
    assert movement["created_by"] == "alice"
    assert [n["node_key"] for n in movement["nodes"]] == ["confirm"]
    assert movement["intent"] == INTENT

    r = await api["bob"].post(f"/v3/movements/{rid}/approve")
    assert r.status_code == 200, r.text
    assert r.json()["approved_by"] == "bob"
    assert r.json()["request_state"] == "WAITING_MANUAL_ACTION"

    r = await api["bob"].post(
        f"/v3/movements/{rid}/nodes/confirm/complete", json={"artifacts": {"ticket": "T-1"}}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["request_state"] == "COMPLETED"
    assert body["nodes"][0]["node_state"] == "COMPLETED"
    assert body["nodes"][0]["artifacts"]["ticket"] == "T-1"

    got = (await api["vic"].get(f"/v3/movements/{rid}")).json()
    assert got == body


async def test_reject_cancel_resume_retry(api: Api) -> None:
    await make_template(api)
    await make_template(api, "t.action", ACTION_GRAPH)

    rejected = await make_movement(api)
    r = await api["bob"].post(f"/v3/movements/{rejected['id']}/reject", json={"reason": "no"})
    assert r.status_code == 200 and r.json()["request_state"] == "REJECTED"

    cancelled = await make_movement(api)
    r = await api["bob"].post(f"/v3/movements/{cancelled['id']}/cancel", json={})
    assert r.status_code == 200 and r.json()["request_state"] == "CANCELLED"

    waiting = await make_movement(api)
    await api["bob"].post(f"/v3/movements/{waiting['id']}/approve")
    r = await api["bob"].post(f"/v3/movements/{waiting['id']}/resume")
    assert r.status_code == 200, r.text
    assert r.json()["request_state"] == "EXECUTING"

    failing = await make_movement(api, "t.action")
    rid = failing["id"]
    r = await api["bob"].post(f"/v3/movements/{rid}/approve")
    assert r.status_code == 200, r.text
    await api.db.execute(EXECUTE, {"request_id": uuid.UUID(rid)})
    await api.db.execute(FAIL_NODE, {"request_id": uuid.UUID(rid), "node_key": "withdraw"})
    r = await api["alice"].post(f"/v3/movements/{rid}/nodes/withdraw/retry")
    assert r.status_code == 403, r.text  # four-eyes: the creator cannot resubmit
    assert r.json()["error"]["code"] == "FOUR_EYES", r.text
    r = await api["bob"].post(f"/v3/movements/{rid}/nodes/withdraw/retry")
    assert r.status_code == 200, r.text
    node = next(n for n in r.json()["nodes"] if n["node_key"] == "withdraw")
    assert node["node_state"] == "READY"


async def test_registry_workers_and_audit(api: Api) -> None:
    executors = (await api["vic"].get("/v3/executors")).json()["items"]
    assert isinstance(executors, list)
    signers = (await api["vic"].get("/v3/signers")).json()["items"]
    assert isinstance(signers, list)
    workers = (await api["vic"].get("/v3/workers")).json()
    assert workers["network_class"] == api.settings.network_class
    assert isinstance(workers["items"], list)
    audit = (await api["vic"].get("/v3/audit-events")).json()
    assert audit["items"] == [] and audit["next_cursor"] is None


async def test_openapi_matches_the_routes(api: Api) -> None:
    doc = (await api["anon"].get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.")
    routes = {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}
    from qtg.api.routes import all_endpoints

    assert routes == {(e.method, e.path) for e in all_endpoints()} | {("GET", "/openapi.json")}
    operation_ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(operation_ids) == len(set(operation_ids))
    create = doc["paths"]["/v3/movements"]["post"]
    assert {"201", "200", "400", "401", "403", "409", "422"} <= set(create["responses"])
    assert "intent.<field>" in create["responses"]["422"]["description"]  # check_intent's 422
    # the header limit sits in front of every route (tests/api/test_slowloris.py)
    assert all(
        "431" in op["responses"]
        for ops in doc["paths"].values()
        for op in ops.values()
        if op["operationId"] != "openapi"
    )
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in create["parameters"])
    schemas = doc["components"]["schemas"]
    amount = schemas["Intent"]["properties"]["amount"]
    assert amount["type"] == "string"
    # every $ref points at a schema that exists
    import json

    text = json.dumps(doc)
    import re

    for name in set(re.findall(r'"#/components/schemas/([^"]+)"', text)):
        assert name in schemas, name


async def test_head_requests(api: Api) -> None:
    r = await api["anon"].head("/healthz")
    assert r.status_code == 200 and r.content == b""
    r = await api["vic"].head("/v3/movements")
    assert r.status_code == 200 and r.content == b""


async def test_readyz_is_503_with_reasons_when_listen_is_down(
    db: Any, dsn: str, nursery: Any
) -> None:
    from qtg.db import ListenHub

    from .conftest import api_settings, start_api

    idle_hub = ListenHub(dsn)  # never started: no LISTEN connection
    server = await start_api(nursery, db, idle_hub, api_settings(dsn))
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.get("/readyz")
        assert (await client.get("/healthz")).status_code == 200
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "not_ready"
    assert body["checks"] == {"database": True, "migrations": True, "listen": False}
    assert any(reason.startswith("listen:") for reason in body["reasons"])
