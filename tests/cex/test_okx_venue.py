"""The local OKX checks a request's signature exactly as OKX documents it, so the ccxt
executor's tests prove qtg's requests would be accepted by the real venue's rule
(OK-ACCESS-SIGN = base64(HMAC-SHA256(secret, timestamp + method + requestPath + body)))."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from .okx_venue import API_KEY, PASSPHRASE, SECRET, OkxVenue


def signed(
    method: str,
    path: str,
    body: str = "",
    *,
    secret: str = SECRET,
    skew: timedelta = timedelta(0),
    passphrase: str = PASSPHRASE,
) -> dict[str, str]:
    stamp = (datetime.now(UTC) + skew).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    sign = base64.b64encode(
        hmac.new(secret.encode(), (stamp + method + path + body).encode(), hashlib.sha256).digest()
    ).decode()
    return {"OK-ACCESS-KEY": API_KEY, "OK-ACCESS-SIGN": sign, "OK-ACCESS-TIMESTAMP": stamp,
            "OK-ACCESS-PASSPHRASE": passphrase, "Content-Type": "application/json"}  # fmt: skip


@pytest.fixture
def venue(anvil):
    okx = OkxVenue(anvil.url, "0x" + "00" * 20, "0x" + "00" * 20).start()
    yield okx
    okx.stop()


HISTORY = "/api/v5/asset/withdrawal-history?ccy=USDC&limit=5"
WITHDRAW = "/api/v5/asset/withdrawal"


def test_a_signed_history_request_is_answered(venue) -> None:
    reply = httpx.get(venue.url + HISTORY, headers=signed("GET", HISTORY))
    assert reply.status_code == 200 and reply.json() == {"code": "0", "msg": "", "data": []}


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({"secret": "wrong"}, "50113"),
        ({"skew": timedelta(seconds=-45)}, "50102"),
        ({"passphrase": "wrong"}, "50105"),
    ],
)
def test_a_request_signed_wrongly_is_refused_with_okx_codes(venue, headers, code) -> None:
    reply = httpx.get(venue.url + HISTORY, headers=signed("GET", HISTORY, **headers))
    assert reply.status_code == 401 and reply.json()["code"] == code


def test_the_signature_covers_the_query_and_the_body(venue) -> None:
    # signed for another query string: refused
    other = "/api/v5/asset/withdrawal-history?ccy=BTC&limit=5"
    reply = httpx.get(venue.url + HISTORY, headers=signed("GET", other))
    assert reply.json()["code"] == "50113"
    # a body changed after signing (amount 1 -> 1000): refused, nothing withdrawn
    body = {"ccy": "USDC", "amt": "1", "dest": "4", "toAddr": "0x" + "d4" * 20}
    headers = signed("POST", WITHDRAW, json.dumps(body))
    tampered = json.dumps({**body, "amt": "1000"})
    reply = httpx.post(venue.url + WITHDRAW, content=tampered, headers=headers)
    assert reply.status_code == 401 and reply.json()["code"] == "50113"
    assert venue.withdrawals() == []
