"""Idempotent create, four-eyes, illegal transitions (409 + current state), pagination."""

from __future__ import annotations

import uuid

import trio

from .conftest import INTENT, MANUAL_GRAPH, Api, make_movement, make_template


async def test_idempotent_create(api: Api) -> None:
    await make_template(api)
    body = {"template_key": "t.manual", "intent": INTENT, "input_params": {"x": "1"}}
    first = await api["alice"].post("/v3/movements", json=body, headers={"Idempotency-Key": "i1"})
    assert first.status_code == 201
    replay = await api["alice"].post("/v3/movements", json=body, headers={"Idempotency-Key": "i1"})
    assert replay.status_code == 200
    assert replay.json() == first.json()
    other = await api["alice"].post(
        "/v3/movements",
        json={**body, "input_params": {"x": "2"}},
        headers={"Idempotency-Key": "i1"},
    )
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert other.json()["error"]["detail"]["request_id"] == first.json()["id"]


async def test_concurrent_creates_with_one_key_make_one_movement(api: Api) -> None:
    await make_template(api)
    body = {"template_key": "t.manual", "intent": INTENT}
    results: list = []

    async def create(who: str) -> None:
        r = await api[who].post("/v3/movements", json=body, headers={"Idempotency-Key": "race"})
        results.append(r)

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(create, "alice")
    assert sorted(r.status_code for r in results) == [200, 200, 200, 201]
    assert len({r.json()["id"] for r in results}) == 1


async def test_four_eyes(api: Api) -> None:
    await make_template(api)
    movement = await make_movement(api, who="alice")
    r = await api["alice"].post(f"/v3/movements/{movement['id']}/approve")
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "FOUR_EYES"
    got = (await api["vic"].get(f"/v3/movements/{movement['id']}")).json()
    assert got["request_state"] == "PENDING_APPROVAL" and got["approved_by"] is None
    assert got["approval_seal"] is None  # nothing approved, nothing sealed
    # an admin is a different principal: allowed
    r = await api["admin"].post(f"/v3/movements/{movement['id']}/approve")
    assert r.status_code == 200 and r.json()["approved_by"] == "admin"
    # the seal of what was approved (docs/custody.md), shown as the signer will compare it
    assert len(r.json()["approval_seal"]) == 64

    # proposals too
    proposal = (
        await api["admin"].post(
            "/v3/template-proposals",
            json={"template_key": "t.p", "name": "p", "graph": MANUAL_GRAPH},
        )
    ).json()
    r = await api["admin"].post(f"/v3/template-proposals/{proposal['id']}/approve")
    assert r.status_code == 403 and r.json()["error"]["code"] == "FOUR_EYES"


async def test_illegal_transitions_are_409_with_current_state(api: Api) -> None:
    await make_template(api)
    rid = (await make_movement(api))["id"]
    assert (await api["bob"].post(f"/v3/movements/{rid}/reject")).status_code == 200
    for action in ("approve", "reject", "resume", "cancel"):
        r = await api["bob"].post(f"/v3/movements/{rid}/{action}")
        assert r.status_code == 409, (action, r.text)
        assert r.json()["error"]["detail"]["current_state"] == "REJECTED"
    r = await api["bob"].post(f"/v3/movements/{rid}/nodes/confirm/complete")
    assert r.status_code == 409 and r.json()["error"]["detail"]["current_state"] == "REJECTED"

    rid = (await make_movement(api))["id"]
    await api["bob"].post(f"/v3/movements/{rid}/approve")
    r = await api["bob"].post(f"/v3/movements/{rid}/nodes/confirm/retry")
    assert r.status_code == 409
    assert r.json()["error"]["detail"]["current_state"] == "READY"
    r = await api["bob"].post(f"/v3/movements/{rid}/nodes/nope/complete")
    assert r.status_code == 404
    await api["bob"].post(f"/v3/movements/{rid}/nodes/confirm/complete")
    r = await api["bob"].post(f"/v3/movements/{rid}/approve")
    assert r.status_code == 409 and r.json()["error"]["detail"]["current_state"] == "COMPLETED"
    r = await api["bob"].post(f"/v3/movements/{uuid.uuid4()}/approve")
    assert r.status_code == 404

    pid = (
        await api["alice"].post(
            "/v3/template-proposals",
            json={"template_key": "t.q", "name": "q", "graph": MANUAL_GRAPH},
        )
    ).json()["id"]
    assert (await api["admin"].post(f"/v3/template-proposals/{pid}/reject")).status_code == 200
    r = await api["admin"].post(f"/v3/template-proposals/{pid}/approve")
    assert r.status_code == 409 and r.json()["error"]["detail"]["current_state"] == "REJECTED"


async def test_pagination_with_cursor(api: Api) -> None:
    await make_template(api)
    await make_template(api, "t.other")
    created = [(await make_movement(api))["id"] for _ in range(7)]
    other = (await make_movement(api, "t.other"))["id"]
    await api["bob"].post(f"/v3/movements/{created[0]}/reject")

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"limit": 3, "template_key": "t.manual"}
        if cursor:
            params["cursor"] = cursor
        page = (await api["vic"].get("/v3/movements", params=params)).json()
        pages += 1
        seen += [m["id"] for m in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == list(reversed(created))  # newest first, each exactly once
    assert other not in seen

    rejected = (await api["vic"].get("/v3/movements", params={"state": "REJECTED"})).json()
    assert [m["id"] for m in rejected["items"]] == [created[0]]


async def test_audit_events_page(api: Api) -> None:
    from qtg.services.audit import promote_pending

    await make_template(api)
    for _ in range(3):
        await make_movement(api)
    await promote_pending(api.db)
    first = (await api["vic"].get("/v3/audit-events", params={"limit": 2})).json()
    assert len(first["items"]) == 2 and first["next_cursor"]
    rest = (
        await api["vic"].get(
            "/v3/audit-events", params={"limit": 2, "cursor": first["next_cursor"]}
        )
    ).json()
    ids = [e["id"] for e in first["items"] + rest["items"]]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids) == 4
    created = (
        await api["vic"].get(
            "/v3/audit-events", params={"action": "movement.created", "actor": "alice"}
        )
    ).json()
    assert len(created["items"]) == 3
