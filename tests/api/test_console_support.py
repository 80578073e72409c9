"""What the operator console needs from the API: who am I, and the movement's edges."""

from __future__ import annotations

from .conftest import ACTION_GRAPH, Api, make_movement, make_template

DIAMOND = {
    "nodes": [
        {"key": "start", "kind": "manual", "action_type": "manual_confirm"},
        {"key": "left", "kind": "manual", "action_type": "manual_confirm"},
        {"key": "right", "kind": "manual", "action_type": "manual_confirm"},
        {"key": "join", "kind": "manual", "action_type": "manual_confirm"},
    ],
    "edges": [["start", "left"], ["start", "right"], ["left", "join"], ["right", "join"]],
}


async def test_whoami_names_the_principal_and_role(api: Api) -> None:
    for who, role in (("admin", "admin"), ("alice", "operator"), ("vic", "viewer")):
        r = await api[who].get("/v3/whoami")
        assert r.status_code == 200, r.text
        assert r.json() == {"name": who, "role": role}
    anon = await api["anon"].get("/v3/whoami")
    assert anon.status_code == 401
    assert anon.json()["error"]["code"] == "UNAUTHENTICATED"


async def test_a_movement_carries_its_plan_edges(api: Api) -> None:
    await make_template(api, "t.diamond", DIAMOND)
    await make_template(api, "t.chain", ACTION_GRAPH)
    diamond = await make_movement(api, "t.diamond")
    assert sorted(map(tuple, diamond["edges"])) == sorted(map(tuple, DIAMOND["edges"]))
    r = await api["vic"].get(f"/v3/movements/{diamond['id']}")
    assert sorted(map(tuple, r.json()["edges"])) == sorted(map(tuple, DIAMOND["edges"]))
    chain = await make_movement(api, "t.chain")
    assert chain["edges"] == ACTION_GRAPH["edges"]  # in plan order
    # Decisions answer with the same shape.
    approved = await api["bob"].post(f"/v3/movements/{chain['id']}/approve")
    assert approved.status_code == 200 and approved.json()["edges"] == ACTION_GRAPH["edges"]
