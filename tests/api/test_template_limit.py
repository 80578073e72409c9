"""MG_TEMPLATE_MAX_NODES (issue 25 item 6): a template version of more nodes
than the limit is refused with a 422 naming the limit, on create, on update
(a new version) and on a proposal — and nothing of it is stored."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Api


def _graph(n: int) -> dict[str, Any]:
    return {
        "nodes": [
            {"key": f"n{i}", "kind": "manual", "action_type": "manual_confirm"} for i in range(n)
        ],
        "edges": [],
    }


def _refused(r: Any, nodes: int, limit: int) -> None:
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "TEMPLATE_TOO_LARGE"
    assert "MG_TEMPLATE_MAX_NODES" in error["message"]
    assert error["detail"] == {
        "field": "graph.nodes",
        "nodes": nodes,
        "limit": limit,
        "setting": "MG_TEMPLATE_MAX_NODES",
    }


async def test_the_default_limit_is_200_nodes(api: Api) -> None:
    assert api.settings.template_max_nodes == 200
    r = await api["admin"].post(
        "/v3/templates", json={"template_key": "t.big", "name": "big", "graph": _graph(201)}
    )
    _refused(r, 201, 200)
    assert (await api["admin"].get("/v3/templates/t.big")).status_code == 404

    r = await api["admin"].post(
        "/v3/templates", json={"template_key": "t.big", "name": "big", "graph": _graph(200)}
    )
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("stream_overrides", [{"template_max_nodes": 3}])
async def test_an_update_and_a_proposal_over_the_limit_are_refused(
    api: Api, stream_overrides: dict[str, Any]
) -> None:
    r = await api["admin"].post(
        "/v3/templates", json={"template_key": "t.small", "name": "s", "graph": _graph(3)}
    )
    assert r.status_code == 201, r.text
    version = r.json()["version"]

    r = await api["admin"].post(
        "/v3/templates", json={"template_key": "t.small", "name": "s", "graph": _graph(4)}
    )
    _refused(r, 4, 3)
    current = (await api["admin"].get("/v3/templates/t.small")).json()
    assert current["version"] == version  # no new version

    r = await api["alice"].post(
        "/v3/template-proposals",
        json={"template_key": "t.small", "name": "s", "graph": _graph(4)},
    )
    _refused(r, 4, 3)
