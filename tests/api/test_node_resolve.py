"""POST /v3/movements/{id}/nodes/{node_key}/resolve (issue 25 item 1): an undecided
node settled by hand — four-eyes, audited, refused while a worker holds the
node — after which the DAG goes on from the chosen outcome."""

from __future__ import annotations

from typing import Any

from qtg.db import Query
from qtg.providers.registry import build_registry
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.observe import observe_active_nodes
from qtg.services.recover import recover_unknown_nodes

from .conftest import Api, make_movement, make_template

UNDECIDED = {"sandbox": {"fail": "submit_crash_after", "recover": "undecided"}}
GRAPH = {
    "nodes": [
        {"key": "burn", "kind": "action", "action_type": "evm_transfer", "config": UNDECIDED},
        {"key": "mint", "kind": "action", "action_type": "evm_transfer"},
    ],
    "edges": [["burn", "mint"]],
}
AUDIT = Query(
    "tests/resolve-audit",
    "SELECT actor, action, detail FROM audit_outbox WHERE object_id = %(oid)s"
    " AND action LIKE 'movement.node_resol%%' ORDER BY id",
)
LOCK_NODE = Query(
    "tests/resolve-lock-node",
    "SELECT n.id FROM movement_request_nodes n WHERE n.request_id = %(rid)s"
    " AND n.node_key = %(key)s FOR NO KEY UPDATE",
)


def _ctx(api: Api, **changes: Any) -> ServiceContext:
    settings = api.settings.replace(**changes)
    return ServiceContext(api.db, settings, build_registry(settings, api.db))


async def _stuck(api: Api) -> str:
    """A movement approved and dispatched: its `burn` node UNKNOWN, undecidable."""
    await make_template(api, "t.undecided", GRAPH)
    m = await make_movement(api, "t.undecided")
    r = await api["bob"].post(f"/v3/movements/{m['id']}/approve")
    assert r.status_code == 200, r.text
    ctx = _ctx(api)
    while await dispatch_ready_nodes(ctx):
        pass
    assert await recover_unknown_nodes(ctx) == 0  # recover() cannot tell
    return m["id"]


def _nodes(body: dict) -> dict[str, str]:
    return {n["node_key"]: n["node_state"] for n in body["nodes"]}


def _resolve(api: Api, who: str, rid: str, node: str = "burn", **body: Any) -> Any:
    payload = {"outcome": "COMPLETED", "evidence": "tx 0xabc mined in block 12", **body}
    return api[who].post(f"/v3/movements/{rid}/nodes/{node}/resolve", json=payload)


def _error(r: Any, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code and error["message"], error
    return error


async def test_four_eyes_resolution_completes_the_node_and_the_dag_goes_on(api: Api) -> None:
    rid = await _stuck(api)
    # the node has paged: the movement waits for a person
    ctx = _ctx(api, node_unknown_attention_seconds=0.001)
    await recover_unknown_nodes(ctx)
    assert (await api["vic"].get(f"/v3/movements/{rid}")).json()["request_state"] == (
        "MANUAL_INTERVENTION"
    )

    proposed = await _resolve(api, "alice", rid, provider_refs={"tx_hash": "0xabc"})
    assert proposed.status_code == 202, proposed.text
    body = proposed.json()
    assert body["resolution"]["status"] == "proposed"
    assert body["resolution"]["proposed_by"] == "alice"
    assert _nodes(body["movement"]) == {"burn": "UNKNOWN", "mint": "BLOCKED"}  # nothing moved

    # the proposer cannot confirm
    error = _error(await _resolve(api, "alice", rid), 403, "FOUR_EYES")
    assert error["detail"]["proposed_by"] == "alice"
    # another outcome, or other provider refs, is not a confirmation
    error = _error(await _resolve(api, "bob", rid, outcome="FAILED"), 409, "RESOLUTION_MISMATCH")
    assert error["detail"]["proposed_outcome"] == "COMPLETED"
    _error(
        await _resolve(api, "bob", rid, provider_refs={"tx_hash": "0xdef"}),
        409,
        "RESOLUTION_MISMATCH",
    )
    # a worker holding the node: refused at once, never waited for
    async with api.db.transaction() as holder:
        await holder.fetchrow(LOCK_NODE, {"rid": rid, "key": "burn"})
        error = _error(await _resolve(api, "bob", rid), 409, "NODE_BUSY")
        assert error["detail"]["node_key"] == "burn"

    confirmed = await _resolve(api, "bob", rid, evidence="checked the explorer too")
    assert confirmed.status_code == 200, confirmed.text
    body = confirmed.json()
    assert body["resolution"]["status"] == "confirmed"
    assert body["resolution"]["confirmed_by"] == "bob"
    movement = body["movement"]
    assert movement["request_state"] == "EXECUTING"
    assert _nodes(movement) == {"burn": "COMPLETED", "mint": "READY"}
    burn = next(n for n in movement["nodes"] if n["node_key"] == "burn")
    assert burn["provider_refs"]["tx_hash"] == "0xabc"

    audit = await api.db.fetch(AUDIT, {"oid": rid})
    assert [(a["actor"], a["action"]) for a in audit] == [
        ("alice", "movement.node_resolution_proposed"),
        ("bob", "movement.node_resolved"),
    ]
    assert audit[1]["detail"]["proposed_by"] == "alice"

    # the DAG goes on: mint runs, the movement completes
    while await dispatch_ready_nodes(ctx):
        pass
    while await observe_active_nodes(ctx):
        pass
    final = (await api["vic"].get(f"/v3/movements/{rid}")).json()
    assert final["request_state"] == "COMPLETED", final

    # a settled node cannot be resolved again
    error = _error(await _resolve(api, "alice", rid), 409, "ILLEGAL_STATE")
    assert error["detail"]["current_state"] == "COMPLETED"


async def test_resolved_failed_fails_the_movement_and_only_an_undecided_node_resolves(
    api: Api,
) -> None:
    rid = await _stuck(api)
    error = _error(await _resolve(api, "alice", rid, node="mint"), 409, "ILLEGAL_NODE_STATE")
    assert error["detail"]["current_state"] == "BLOCKED"
    _error(await _resolve(api, "alice", rid, node="nope"), 404, "NOT_FOUND")

    r = await _resolve(api, "alice", rid, outcome="FAILED", evidence="venue: never received")
    assert r.status_code == 202, r.text
    r = await _resolve(api, "bob", rid, outcome="FAILED", evidence="venue statement attached")
    assert r.status_code == 200, r.text
    movement = r.json()["movement"]
    assert movement["request_state"] == "FAILED"  # no side effect completed
    burn = next(n for n in movement["nodes"] if n["node_key"] == "burn")
    assert burn["node_state"] == "FAILED"
    assert burn["error_code"] == "RESOLVED_FAILED_BY_OPERATORS"
    assert "venue: never received" in burn["error_detail"]


async def test_bad_resolve_bodies_are_structured_4xx(api: Api) -> None:
    rid = await _stuck(api)
    url = f"/v3/movements/{rid}/nodes/burn/resolve"
    for body, field in (
        ({"outcome": "MAYBE", "evidence": "x"}, "outcome"),
        ({"outcome": "COMPLETED"}, "evidence"),
        ({"outcome": "COMPLETED", "evidence": ""}, "evidence"),
        ({"outcome": "COMPLETED", "evidence": "x", "provider_refs": []}, "provider_refs"),
        ({"outcome": "COMPLETED", "evidence": "x", "extra": 1}, "extra"),
    ):
        r = await api["alice"].post(url, json=body)
        assert r.status_code == 422, (body, r.text)
        assert field in str(r.json()["error"]["detail"]), (body, r.json())
    r = await api["vic"].post(url, json={"outcome": "COMPLETED", "evidence": "x"})
    assert r.status_code == 403, r.text  # a viewer may not
    # nothing was proposed by any of them
    assert await api.db.fetch(AUDIT, {"oid": rid}) == []


async def test_resolve_is_in_the_openapi_document(api: Api) -> None:
    doc = (await api["anon"].get("/openapi.json")).json()
    op = doc["paths"]["/v3/movements/{request_id}/nodes/{node_key}/resolve"]["post"]
    assert {"200", "202", "403", "404", "409", "422"} <= set(op["responses"])
    assert op["responses"]["409"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ErrorResponse"
    )
    body = op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    props = doc["components"]["schemas"][body]["properties"]
    assert props["outcome"]["enum"] == ["COMPLETED", "FAILED"]
    assert {"evidence", "provider_refs"} <= set(props)
