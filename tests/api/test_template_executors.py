"""Templates are checked against the registered executors (issue 44 item 7).

A template whose action node no executor serves was stored (201) and its
movements failed only after approval, at dispatch (EXECUTOR_NOT_FOUND). Now
the API refuses it where it is made — on create, on a new version, on a
proposal and at a proposal's approval — with a 422 naming the node and its
action type, and stores nothing. The check is the dispatcher's own lookup
against the API's real provider registry (the sandbox here).
"""

from __future__ import annotations

import copy
from typing import Any

from qtg.services import proposals

from .conftest import ACTION_GRAPH, Api

UNKNOWN = copy.deepcopy(ACTION_GRAPH)
UNKNOWN["nodes"][1]["action_type"] = "teleport_observe"  # nodes[1] is "receive"


def _refused(r: Any, field: str = "graph.nodes[1].action_type") -> dict[str, Any]:
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "EXECUTOR_NOT_FOUND", error
    assert error["detail"]["field"] == field, error
    assert error["detail"]["node_key"] == "receive", error
    assert "receive" in error["message"], error
    assert "teleport_observe" in error["message"], error
    assert "cex_withdrawal" in error["detail"]["registered_action_types"], error
    return dict(error)


async def _versions(api: Api, key: str) -> int:
    r = await api["admin"].get(f"/v3/templates/{key}/versions")
    return 0 if r.status_code == 404 else len(r.json()["items"])


async def _proposals(api: Api) -> int:
    r = await api["admin"].get("/v3/template-proposals")
    assert r.status_code == 200, r.text
    return len(r.json()["items"])


async def test_a_template_naming_an_unserved_action_type_is_refused_and_not_stored(
    api: Api,
) -> None:
    r = await api["admin"].post(
        "/v3/templates", json={"template_key": "t.unknown", "name": "u", "graph": UNKNOWN}
    )
    error = _refused(r)
    assert error["detail"]["action_type"] == "teleport_observe"
    assert error["detail"]["executor_key"] is None
    assert (await api["admin"].get("/v3/templates/t.unknown")).status_code == 404
    assert await _versions(api, "t.unknown") == 0

    # A served graph under the same key is accepted; a new version that breaks it is not.
    r = await api["admin"].post(
        "/v3/templates", json={"template_key": "t.unknown", "name": "u", "graph": ACTION_GRAPH}
    )
    assert r.status_code == 201, r.text
    r = await api["admin"].post(
        "/v3/templates", json={"template_key": "t.unknown", "name": "u", "graph": UNKNOWN}
    )
    _refused(r)
    assert await _versions(api, "t.unknown") == 1
    active = (await api["admin"].get("/v3/templates/t.unknown")).json()
    assert active["version"] == 1, active


async def test_an_executor_key_nobody_registered_is_refused(api: Api) -> None:
    graph = copy.deepcopy(ACTION_GRAPH)
    graph["nodes"][1]["executor_key"] = "nobody"
    r = await api["admin"].post(
        "/v3/templates", json={"template_key": "t.nobody", "name": "n", "graph": graph}
    )
    error = _refused_key(r)
    assert error["detail"]["executor_key"] == "nobody"


def _refused_key(r: Any) -> dict[str, Any]:
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "EXECUTOR_NOT_FOUND", error
    assert error["detail"]["field"] == "graph.nodes[1].executor_key", error
    return dict(error)


async def test_a_proposal_is_checked_when_made_and_again_when_approved(api: Api) -> None:
    r = await api["alice"].post(
        "/v3/template-proposals", json={"template_key": "t.p", "name": "p", "graph": UNKNOWN}
    )
    _refused(r)
    assert await _proposals(api) == 0

    # A proposal made before the check (or while another executor set was
    # registered) reaches approval: refused there, and it stays PENDING_REVIEW.
    proposal = await proposals.create_proposal(
        api.db, api.settings, template_key="t.p", name="p", graph=UNKNOWN, actor="alice"
    )
    r = await api["admin"].post(f"/v3/template-proposals/{proposal['id']}/approve")
    _refused(r)
    after = (await api["admin"].get(f"/v3/template-proposals/{proposal['id']}")).json()
    assert after["proposal_state"] == "PENDING_REVIEW", after
    assert (await api["admin"].get("/v3/templates/t.p")).status_code == 404
    assert await _versions(api, "t.p") == 0
