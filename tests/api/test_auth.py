"""Bearer tokens: 401 without/invalid/revoked, 403 for a role too low, tokens stored hashed."""

from __future__ import annotations

import logging

import pytest

from qtg.db import Query
from qtg.services import tokens
from qtg.services.errors import Conflict, InvalidInput, NotFound

from .conftest import Api, make_movement, make_template

ALL_TOKENS = Query("t/tokens", "SELECT name, token_hash, role FROM api_tokens")
LAST_USED = Query("t/last_used", "SELECT last_used_at FROM api_tokens WHERE name = %(name)s")


BAD_AUTH: list[dict[str, str]] = [
    {},
    {"Authorization": "Bearer"},
    {"Authorization": "Basic YWxpY2U6cHc="},
    {"Authorization": "Bearer qtg_not-a-real-token"},
    {"Authorization": "Bearer " + "x" * 5000},
    {"Authorization": "bearer"},
]


async def test_missing_or_bad_token_is_401(api: Api) -> None:
    for headers in BAD_AUTH:
        for method, path in (
            ("GET", "/v3/movements"),
            ("POST", "/v3/movements"),
            ("GET", "/v3/workers"),
            ("PUT", "/v3/signers/x/expected-identity"),
        ):
            r = await api["anon"].request(method, path, headers=headers)
            assert r.status_code == 401, (headers, method, path, r.text)
            assert r.json()["error"]["code"] == "UNAUTHENTICATED"
            assert r.headers["www-authenticate"] == "Bearer"


async def test_auth_comes_before_input_validation(api: Api) -> None:
    r = await api["anon"].post("/v3/movements", content=b"{not json")
    assert r.status_code == 401


async def test_wrong_role_is_403(api: Api) -> None:
    r = await api["vic"].post("/v3/movements", json={}, headers={"Idempotency-Key": "k"})
    assert r.status_code == 403
    assert r.json()["error"]["detail"] == {"required_role": "operator", "role": "viewer"}
    r = await api["alice"].post("/v3/templates", json={})
    assert r.status_code == 403
    assert r.json()["error"]["detail"]["required_role"] == "admin"
    r = await api["alice"].put("/v3/signers/s1/expected-identity", json={})
    assert r.status_code == 403
    r = await api["alice"].post(
        "/v3/template-proposals/00000000-0000-0000-0000-000000000000/approve"
    )
    assert r.status_code == 403
    # admin may do what operators and viewers may
    assert (await api["admin"].get("/v3/movements")).status_code == 200


async def test_revoked_token_stops_working_at_once(api: Api) -> None:
    assert (await api["bob"].get("/v3/movements")).status_code == 200
    await tokens.revoke_token(api.db, name="bob", actor="test")
    r = await api["bob"].get("/v3/movements")
    assert r.status_code == 401
    # rotation: a new token for the same name works, the old one still does not
    new = await tokens.create_token(api.db, name="bob", role="operator", actor="test")
    assert (
        await api["anon"].get("/v3/movements", headers={"Authorization": f"Bearer {new['token']}"})
    ).status_code == 200
    assert (await api["bob"].get("/v3/movements")).status_code == 401


async def test_tokens_are_stored_hashed_and_names_unique(api: Api) -> None:
    rows = await api.db.fetch(ALL_TOKENS)
    stored = {r["token_hash"] for r in rows}
    for token in api.tokens.values():
        assert token not in stored
        assert tokens.hash_token(token) in stored
    with pytest.raises(Conflict):
        await tokens.create_token(api.db, name="alice", role="admin", actor="test")
    with pytest.raises(InvalidInput):
        await tokens.create_token(api.db, name="Not A Name", role="admin", actor="test")
    with pytest.raises(InvalidInput):
        await tokens.create_token(api.db, name="carol", role="root", actor="test")
    with pytest.raises(NotFound):
        await tokens.revoke_token(api.db, name="nobody", actor="test")


async def test_last_used_is_stamped_at_most_once_a_minute(api: Api) -> None:
    assert (await api.db.fetchrow(LAST_USED, {"name": "vic"}))["last_used_at"] is None
    await api["vic"].get("/v3/workers")
    first = (await api.db.fetchrow(LAST_USED, {"name": "vic"}))["last_used_at"]
    assert first is not None
    await api["vic"].get("/v3/workers")
    assert (await api.db.fetchrow(LAST_USED, {"name": "vic"}))["last_used_at"] == first


async def test_tokens_never_reach_the_logs(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    await make_template(api)
    await make_movement(api)
    await api["alice"].get("/v3/movements")
    await api["anon"].get("/v3/movements", headers={"Authorization": "Bearer qtg_wrong"})
    text = caplog.text + " ".join(str(r.__dict__) for r in caplog.records)
    for token in api.tokens.values():
        assert token not in text
    assert "qtg_wrong" not in text
