"""GET /v3/notifications and POST /v3/notifications/{id}/resolve over real HTTP."""

from __future__ import annotations

from qtg.db import Query

from .conftest import Api

RAISE = Query(
    "test/api_raise",
    "SELECT qtg_raise_notification('test_page', %(severity)s, %(key)s, %(subject)s) AS id",
)
AUDIT = Query(
    "test/api_notification_audit",
    "SELECT actor, action FROM audit_outbox WHERE object_type = 'notification'",
)


async def test_list_filter_page_and_resolve(api: Api) -> None:
    ids = [
        await api.db.fetchval(RAISE, {"severity": "critical", "key": f"k:{i}", "subject": f"s{i}"})
        for i in range(3)
    ]
    first = await api["vic"].get("/v3/notifications", params={"limit": 2})
    assert first.status_code == 200, first.text
    assert [n["id"] for n in first.json()["items"]] == [ids[2], ids[1]]
    rest = await api["vic"].get(
        "/v3/notifications", params={"limit": 2, "cursor": first.json()["next_cursor"]}
    )
    assert [n["id"] for n in rest.json()["items"]] == [ids[0]]
    assert rest.json()["next_cursor"] is None

    assert (await api["vic"].post(f"/v3/notifications/{ids[0]}/resolve")).status_code == 403
    done = await api["alice"].post(f"/v3/notifications/{ids[0]}/resolve")
    assert done.status_code == 200 and done.json()["resolved_at"] is not None
    again = await api["alice"].post(f"/v3/notifications/{ids[0]}/resolve")
    assert again.json()["resolved_at"] == done.json()["resolved_at"]  # idempotent
    assert await api.db.fetch(AUDIT) == [{"actor": "alice", "action": "notification.resolved"}]
    open_ = await api["vic"].get("/v3/notifications", params={"open": "true"})
    assert sorted(n["id"] for n in open_.json()["items"]) == ids[1:]
    # resolved: the same condition pages anew
    new_id = await api.db.fetchval(RAISE, {"severity": "critical", "key": "k:0", "subject": "s0"})
    assert new_id not in ids

    assert (await api["alice"].post("/v3/notifications/999999/resolve")).status_code == 404
    bad = await api["vic"].get("/v3/notifications", params={"cursor": "x", "limit": 0})
    assert bad.status_code == 422
    assert (await api["alice"].post("/v3/notifications/0/resolve")).status_code == 422
    assert (await api["vic"].get("/v3/notifications", params={"kind": "Bad!"})).status_code == 422
