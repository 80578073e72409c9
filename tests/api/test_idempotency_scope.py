"""Idempotency keys are scoped per principal (issue 17 item 7).

On main a key was global: bob replaying alice's key and body got alice's
movement back (200, her id, her intent). Now a key names a movement of its
creator; another principal using the same key gets a movement of their own.
"""

from __future__ import annotations

import trio

from .conftest import INTENT, Api, make_template


async def test_another_principal_replaying_a_key_gets_its_own_movement(api: Api) -> None:
    await make_template(api)
    body = {"template_key": "t.manual", "intent": INTENT}
    headers = {"Idempotency-Key": "shared-key"}
    alice = await api["alice"].post("/v3/movements", json=body, headers=headers)
    assert alice.status_code == 201, alice.text

    bob = await api["bob"].post("/v3/movements", json=body, headers=headers)
    assert bob.status_code == 201, bob.text
    assert bob.json()["id"] != alice.json()["id"]
    assert bob.json()["created_by"] == "bob"

    # each principal's replay still finds their own first movement
    again = await api["alice"].post("/v3/movements", json=body, headers=headers)
    assert (again.status_code, again.json()["id"]) == (200, alice.json()["id"])
    again = await api["bob"].post("/v3/movements", json=body, headers=headers)
    assert (again.status_code, again.json()["id"]) == (200, bob.json()["id"])

    # a different body under bob's use of the key conflicts with bob's, not alice's
    other = await api["bob"].post(
        "/v3/movements", json={**body, "input_params": {"x": "2"}}, headers=headers
    )
    assert other.status_code == 409
    assert other.json()["error"]["detail"]["request_id"] == bob.json()["id"]

    # alice's movement is untouched by bob's requests
    got = (await api["vic"].get(f"/v3/movements/{alice.json()['id']}")).json()
    assert got["created_by"] == "alice" and got["request_state"] == "PENDING_APPROVAL"


async def test_two_principals_racing_on_one_key_make_one_movement_each(api: Api) -> None:
    await make_template(api)
    body = {"template_key": "t.manual", "intent": INTENT}
    results: list[tuple[str, int, str]] = []

    async def create(who: str) -> None:
        r = await api[who].post("/v3/movements", json=body, headers={"Idempotency-Key": "race"})
        results.append((who, r.status_code, r.json()["id"]))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(create, "alice")
            nursery.start_soon(create, "bob")
    for who in ("alice", "bob"):
        mine = [(code, rid) for w, code, rid in results if w == who]
        assert sorted(code for code, _ in mine) == [200, 200, 200, 201]
        assert len({rid for _, rid in mine}) == 1
    ids = {rid for _, _, rid in results}
    assert len(ids) == 2
