"""POST /v3/movements refuses internal callback targets (issue 17 item 3): 422 naming
callback_url, and nothing created. On main every one of these was accepted (201)."""

from __future__ import annotations

import pytest

from .conftest import INTENT, Api, make_template


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:5432/",  # PostgreSQL's port
        "http://[::1]:9000/",
        "http://0.0.0.0:9000/",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.8/hook",
        "http://metadata.google.internal/computeMetadata/v1/",
    ],
)
async def test_internal_callback_targets_are_422_and_create_nothing(api: Api, url: str) -> None:
    await make_template(api)
    r = await api["alice"].post(
        "/v3/movements",
        json={"template_key": "t.manual", "intent": INTENT, "callback_url": url},
        headers={"Idempotency-Key": "ssrf"},
    )
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["detail"]["field"] == "callback_url"
    assert "MG_CALLBACK_ALLOWED_HOSTS" in error["message"]
    listed = (await api["vic"].get("/v3/movements")).json()
    assert listed["items"] == []
