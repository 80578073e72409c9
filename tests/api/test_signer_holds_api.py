"""GET /v3/signer-holds and POST /v3/signer-holds/{id}/clear (issue 43 item 2): a held
signer signs again only when two different operators agree — proposed (202, still
held), confirmed by another (200, cleared, its page resolved), both audited; the
proposer cannot confirm; bad input is a structured 4xx."""

from __future__ import annotations

from qtg.db import Query
from qtg.providers.evm import holds

from .conftest import Api

SIGNER = "0x" + "ab" * 20
PAGES = Query(
    "tests/signer-hold-pages",
    "SELECT kind, resolved_at IS NOT NULL AS resolved FROM notifications"
    " WHERE kind = 'evm_signer_hold'",
)
AUDIT = Query(
    "tests/signer-hold-audit",
    "SELECT actor, action FROM audit_outbox WHERE action LIKE 'evm_signer_hold.%%' ORDER BY id",
)


async def _held(api: Api) -> int:
    hold = await holds.place(
        api.db,
        chain_id=31337,
        address=SIGNER,
        reason="LEDGER_BEHIND_CHAIN",
        evidence={"unmatched": ["0x" + "cd" * 32]},
        actor="evm_ledger_reconcile",
    )
    return int(hold["id"])


async def test_two_operators_clear_a_hold_and_one_cannot_alone(api: Api) -> None:
    hold_id = await _held(api)
    listed = await api["vic"].get("/v3/signer-holds")
    assert listed.status_code == 200, listed.text
    [item] = listed.json()["items"]
    assert item["id"] == hold_id and item["reason"] == "LEDGER_BEHIND_CHAIN"

    url = f"/v3/signer-holds/{hold_id}/clear"
    proposed = await api["alice"].post(url, json={"evidence": "the old payout script, retired"})
    assert proposed.status_code == 202, proposed.text
    assert proposed.json()["cleared_at"] is None
    assert proposed.json()["clear_proposed_by"] == "alice"
    # still held: every new reservation of the signer waits
    assert await holds.active(api.db, chain_id=31337, address=SIGNER)

    alone = await api["alice"].post(url, json={"evidence": "me again"})
    assert alone.status_code == 403 and alone.json()["error"]["code"] == "FOUR_EYES"
    assert await holds.active(api.db, chain_id=31337, address=SIGNER)
    viewer = await api["vic"].post(url, json={"evidence": "a viewer"})
    assert viewer.status_code == 403  # operators only

    confirmed = await api["bob"].post(url, json={"evidence": "checked the tx list"})
    assert confirmed.status_code == 200, confirmed.text
    body = confirmed.json()
    assert body["cleared_by"] == "bob" and body["clear_proposed_by"] == "alice"
    assert "the old payout script" in body["clear_evidence"]
    assert "checked the tx list" in body["clear_evidence"]
    assert await holds.active(api.db, chain_id=31337, address=SIGNER) == []
    assert [tuple(r.values()) for r in await api.db.fetch(PAGES)] == [("evm_signer_hold", True)]
    assert [tuple(r.values()) for r in await api.db.fetch(AUDIT)] == [
        ("alice", "evm_signer_hold.clear_proposed"),
        ("bob", "evm_signer_hold.cleared"),
    ]
    again = await api["alice"].post(url, json={"evidence": "late"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "HOLD_ALREADY_CLEARED"
    active = await api["vic"].get("/v3/signer-holds")
    assert active.json()["items"] == []
    every = await api["vic"].get("/v3/signer-holds", params={"active": "false"})
    assert [h["id"] for h in every.json()["items"]] == [hold_id]


async def test_bad_clear_requests_are_structured_4xx(api: Api) -> None:
    hold_id = await _held(api)
    url = f"/v3/signer-holds/{hold_id}/clear"
    for body in ({}, {"evidence": ""}, {"evidence": 7}, {"evidence": "x", "more": 1}):
        r = await api["alice"].post(url, json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]["code"]
    missing = await api["alice"].post("/v3/signer-holds/999999/clear", json={"evidence": "x"})
    assert missing.status_code == 404
    bad_id = await api["alice"].post("/v3/signer-holds/abc/clear", json={"evidence": "x"})
    assert bad_id.status_code == 422
    # nothing was half-applied: no proposal recorded by the refused calls
    [item] = (await api["vic"].get("/v3/signer-holds")).json()["items"]
    assert item["clear_proposed_by"] is None
