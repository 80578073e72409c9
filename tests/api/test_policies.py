"""Issue 45 through the API: a policy is changed four-eyes by admins, entries
of the address book too and wait out their cooling-off time; movements are
decided at creation (403 naming the rule, nothing stored) and approved by
their rule's count of distinct principals (202 while more are needed)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import trio
from treasury_policy import treasury_policy

from qtg.db.queries import Query
from qtg.services import tokens
from qtg.services.audit import promote_pending

from .conftest import ACTION_GRAPH, Api, make_template

COOLING_OFF = 1.0
BOOKED = "0x00000000000000000000000000000000000000b0"
NEW = "0x00000000000000000000000000000000000000c0"
POLICY: dict[str, Any] = treasury_policy(small_delay_seconds=3600)


@pytest.fixture
def stream_overrides() -> dict[str, Any]:
    return {"address_book_cooling_off_seconds": COOLING_OFF}


async def more_principals(api: Api) -> None:
    """A second admin and the treasury group (operators)."""
    import httpx

    for name, role in (
        ("admin2", "admin"),
        ("tina", "operator"),
        ("tom", "operator"),
        ("tess", "operator"),
    ):
        token = (await tokens.create_token(api.db, name=name, role=role, actor="test"))["token"]
        api.clients[name] = httpx.AsyncClient(
            base_url=api.url, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )


async def load_policy(api: Api, document: dict[str, Any] = POLICY) -> int:
    r = await api["admin"].post("/v3/policies", json={"document": document})
    assert r.status_code == 201, r.text
    version = r.json()["version"]
    r = await api["admin2"].post(f"/v3/policies/{version}/approve")
    assert r.status_code == 200 and r.json()["state"] == "ACTIVE", r.text
    return int(version)


async def book(api: Api, address: str, label: str) -> dict[str, Any]:
    r = await api["admin"].post(
        "/v3/address-book",
        json={"chain": "*", "asset": "USDC", "address": address, "label": label, "tags": ["ops"]},
    )
    assert r.status_code == 201, r.text
    r = await api["admin2"].post(f"/v3/address-book/{r.json()['id']}/approve")
    assert r.status_code == 200, r.text
    return r.json()


async def wait_usable(api: Api, entry_id: str) -> None:
    with trio.fail_after(10):
        while True:
            items = (await api["vic"].get("/v3/address-book")).json()["items"]
            [e] = [e for e in items if e["id"] == entry_id]
            if e["cooling_off_left_seconds"] == 0:
                return
            await trio.sleep(0.05)


async def create(api: Api, amount: str, destination: str = BOOKED) -> Any:
    return await api["alice"].post(
        "/v3/movements",
        json={
            "template_key": "t.action",
            "intent": {"asset": "USDC", "amount": amount, "destination": destination},
        },
        headers={"Idempotency-Key": uuid.uuid4().hex},
    )


COUNT = Query("t/count_movements", "SELECT count(*) FROM movement_requests")
APPROVALS = Query(
    "t/approvals",
    "SELECT principal, policy_rule FROM movement_approvals"
    " WHERE request_id = %(id)s ORDER BY approved_at",
)


async def count_movements(api: Api) -> int:
    return int(await api.db.fetchval(COUNT))


async def test_a_policy_change_is_four_eyes_by_admins_and_audited(api: Api) -> None:
    await more_principals(api)
    bad = await api["admin"].post(
        "/v3/policies", json={"document": {"rules": [{"name": "x", "action": "allow"}]}}
    )
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "INVALID_POLICY"
    assert bad.json()["error"]["detail"]["path"] == "rules[0]"
    assert (await api["alice"].post("/v3/policies", json={"document": POLICY})).status_code == 403

    r = await api["admin"].post("/v3/policies", json={"document": POLICY, "note": "v1"})
    assert r.status_code == 201 and r.json()["state"] == "PROPOSED"
    version = r.json()["version"]
    own = await api["admin"].post(f"/v3/policies/{version}/approve")
    assert own.status_code == 403 and own.json()["error"]["code"] == "FOUR_EYES"
    assert (await api["tina"].post(f"/v3/policies/{version}/approve")).status_code == 403
    listed = (await api["vic"].get("/v3/policies")).json()
    assert listed["active_version"] is None  # proposed is not in force

    ok = await api["admin2"].post(f"/v3/policies/{version}/approve")
    assert ok.status_code == 200 and ok.json()["state"] == "ACTIVE"
    again = await api["admin2"].post(f"/v3/policies/{version}/approve")
    assert again.status_code == 409

    second = await load_policy(api)
    listed = (await api["vic"].get("/v3/policies")).json()
    assert listed["active_version"] == second
    states = {p["version"]: p["state"] for p in listed["items"]}
    assert states == {version: "SUPERSEDED", second: "ACTIVE"}

    await promote_pending(api.db)
    audit = (await api["vic"].get("/v3/audit-events", params={"action": "policy.approved"})).json()
    assert [(e["actor"], e["object_id"]) for e in audit["items"]] == [
        ("admin2", str(second)),
        ("admin2", str(version)),
    ]


async def test_movements_follow_the_rules_book_and_cooling_off(api: Api) -> None:
    await more_principals(api)
    await make_template(api, "t.action", ACTION_GRAPH)
    # no policy: as before issue 45, any destination, one approver
    before = await create(api, "10", NEW)
    assert before.status_code == 201 and before.json().get("policy_version") is None
    version = await load_policy(api)

    entry = await book(api, BOOKED, "ops-wallet")
    assert entry["state"] == "ACTIVE" and entry["cooling_off_left_seconds"] > 0
    own = await api["admin"].post(
        "/v3/address-book",
        json={"chain": "*", "asset": "USDC", "address": NEW, "label": "new"},
    )
    refused = await api["admin"].post(f"/v3/address-book/{own.json()['id']}/approve")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "FOUR_EYES"

    # a new entry waits out its cooling-off: blocked, nothing stored
    n = await count_movements(api)
    cooling = await create(api, "100")
    assert cooling.status_code == 403, cooling.text
    err = cooling.json()["error"]
    assert err["code"] == "POLICY_BLOCKED"
    assert err["detail"]["rule"] == "block-all" and err["detail"]["destination_cooling_off"]
    assert err["detail"]["policy_version"] == version
    await wait_usable(api, entry["id"])

    # outside the book: blocked naming the rule, nothing stored
    outside = await create(api, "100", NEW)
    assert outside.status_code == 403 and outside.json()["error"]["detail"]["rule"] == "block-all"
    assert await count_movements(api) == n

    small = await create(api, "50000")
    assert small.status_code == 201, small.text
    mid = small.json()["id"]
    assert (small.json()["policy_version"], small.json()["policy_rule"]) == (version, "small")
    r = await api["tina"].post(f"/v3/movements/{mid}/approve")
    assert r.status_code == 202 and r.json()["request_state"] == "PENDING_APPROVAL"
    again = await api["tina"].post(f"/v3/movements/{mid}/approve")
    assert again.status_code == 409 and again.json()["error"]["code"] == "ALREADY_APPROVED"
    outsider = await api["bob"].post(f"/v3/movements/{mid}/approve")
    assert outsider.status_code == 403
    assert outsider.json()["error"]["code"] == "NOT_AN_APPROVER"
    creator = await api["alice"].post(f"/v3/movements/{mid}/approve")
    assert creator.status_code == 403 and creator.json()["error"]["code"] == "FOUR_EYES"
    pending = (await api["vic"].get(f"/v3/movements/{mid}")).json()["policy"]
    assert pending["rule"] == "small" and pending["version"] == version
    assert pending["approvals"] == {"count": 2, "group": "treasury"}
    assert [(a["principal"], a["counted"]) for a in pending["approvals_given"]] == [("tina", True)]
    assert pending["approvals_needed"] == 1
    assert pending["accumulation"] == [
        {
            "rule": "daily-cap",
            "scope": "overall",
            "window_seconds": 86400,
            "used": "0",
            "limit": "1000000",
        }
    ]
    assert (pending["charged"], pending["delay_left_seconds"]) == (None, 3600)
    r = await api["tom"].post(f"/v3/movements/{mid}/approve")
    assert r.status_code == 200 and r.json()["request_state"] == "APPROVED", r.text
    approved = r.json()["policy"]
    assert approved["approvals_needed"] == 0
    # the rule's delay: the root waits (and is not claimed) for an hour
    assert 3500 < approved["delay_left_seconds"] <= 3600
    root = next(n for n in r.json()["nodes"] if n["node_key"] == "withdraw")
    assert root["node_state"] == "READY"

    large = await create(api, "50000.01")
    assert large.status_code == 201 and large.json()["policy_rule"] == "large"
    lid = large.json()["id"]
    for who, status in (("tina", 202), ("tom", 202), ("tess", 200)):
        r = await api[who].post(f"/v3/movements/{lid}/approve")
        assert r.status_code == status, (who, r.text)
    assert r.json()["request_state"] == "APPROVED"
    approvals = await api.db.fetch(APPROVALS, {"id": lid})
    assert [(a["principal"], a["policy_rule"]) for a in approvals] == [
        ("tina", "large"),
        ("tom", "large"),
        ("tess", "large"),
    ]


async def test_an_entry_change_is_four_eyes_and_a_new_address_waits_again(api: Api) -> None:
    await more_principals(api)
    entry = await book(api, BOOKED, "ops-wallet")
    await wait_usable(api, entry["id"])

    async def change(**body: Any) -> dict[str, Any]:
        r = await api["admin"].post(
            "/v3/address-book",
            json={"chain": "*", "asset": "USDC", "replaces": entry["id"], **body},
        )
        assert r.status_code == 201, r.text
        own = await api["admin"].post(f"/v3/address-book/{r.json()['id']}/approve")
        assert own.status_code == 403 and own.json()["error"]["code"] == "FOUR_EYES"
        ok = await api["admin2"].post(f"/v3/address-book/{r.json()['id']}/approve")
        assert ok.status_code == 200, ok.text
        return dict(ok.json())

    relabelled = await change(address=BOOKED, label="ops-main", tags=["ops", "hot"])
    # a new label or tag keeps the entry's usable time
    assert relabelled["cooling_off_left_seconds"] == 0
    assert relabelled["usable_at"] == entry["usable_at"]
    entry = relabelled
    moved = await change(address=NEW, label="ops-main")
    assert moved["cooling_off_left_seconds"] > 0  # a new address waits again
    states = {
        e["id"]: e["state"]
        for e in (await api["vic"].get("/v3/address-book", params={"state": "REMOVED"})).json()[
            "items"
        ]
    }
    assert states == {entry["id"]: "REMOVED", relabelled["replaces"]: "REMOVED"}
    stale = await api["admin"].post(
        "/v3/address-book",
        json={"chain": "*", "asset": "USDC", "address": NEW, "label": "x", "replaces": entry["id"]},
    )
    assert stale.status_code == 404  # the replaced entry is no longer active


async def test_labels_are_unique_among_active_entries(api: Api) -> None:
    await more_principals(api)
    await book(api, BOOKED, "ops")
    taken = await api["admin"].post(
        "/v3/address-book", json={"chain": "*", "asset": "USDC", "address": NEW, "label": "ops"}
    )
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "LABEL_TAKEN"
    ids = []
    for address in (NEW, "0x00000000000000000000000000000000000000d0"):
        r = await api["admin"].post(
            "/v3/address-book",
            json={"chain": "*", "asset": "USDC", "address": address, "label": "twin"},
        )
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    assert (await api["admin2"].post(f"/v3/address-book/{ids[0]}/approve")).status_code == 200
    second = await api["admin2"].post(f"/v3/address-book/{ids[1]}/approve")
    assert second.status_code == 409 and second.json()["error"]["code"] == "LABEL_TAKEN"


async def test_two_versions_approved_at_once_leave_one_active(api: Api) -> None:
    await more_principals(api)
    versions = []
    for _ in range(2):
        r = await api["admin"].post("/v3/policies", json={"document": POLICY})
        versions.append(r.json()["version"])
    statuses: list[int] = []

    async def approve(version: int) -> None:
        statuses.append((await api["admin2"].post(f"/v3/policies/{version}/approve")).status_code)

    async with trio.open_nursery() as nursery:
        for version in versions:
            nursery.start_soon(approve, version)
    assert statuses == [200, 200]
    listed = (await api["vic"].get("/v3/policies")).json()
    states = sorted(p["state"] for p in listed["items"])
    assert states == ["ACTIVE", "SUPERSEDED"]
