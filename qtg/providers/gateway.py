"""Circle Gateway (reference §7's default fetcher): the unified USDC balance.

`GatewayBalanceFetcher` asks Gateway's balances endpoint for every configured
depositor in one request,

    POST {MG_GATEWAY_API_URL}/v1/balances
    {"token": "USDC", "sources": [{"depositor": "0x…"}, …]}

(no domain: Gateway answers for every domain where the address is valid) and
gets back

    {"token": "USDC", "balances": [{"domain": 0, "depositor": "0x…", "balance": "12.5"}, …]}

The unified balance of a depositor is the exact sum of its per-domain
balances; it is stored as one `venue_key="gateway"` snapshot per depositor,
with the per-domain parts in `detail.domains`. An answer that is not that
shape (non-2xx, not JSON, a balance that is not a decimal string, a
depositor missing) raises, so the worker records a failure rather than a
wrong number. The endpoint needs no API key.

Registered by the provider entry point `gateway` (add it to MG_PROVIDERS).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from qtg.config import ConfigError, Settings
from qtg.db import Database
from qtg.domain import bounded_json
from qtg.domain.balances import exact_amount
from qtg.providers.balances import Balance

if TYPE_CHECKING:
    from qtg.providers.registry import ProviderRegistry

VENUE_KEY = "gateway"
TOKEN = "USDC"
_ADDRESS = re.compile(r"^(0x[0-9a-fA-F]{40}|[1-9A-HJ-NP-Za-km-z]{32,44})$")  # EVM or Solana


class GatewayError(RuntimeError):
    """Gateway answered with something that is not a balance."""


def parse_depositors(csv: str) -> list[str]:
    """MG_GATEWAY_DEPOSITORS_CSV as a list (EVM addresses lowercased, order kept)."""
    out: list[str] = []
    for item in csv.split(","):
        text = item.strip()
        if not text:
            continue
        if not _ADDRESS.fullmatch(text):
            raise ConfigError(
                f"MG_GATEWAY_DEPOSITORS_CSV: {text!r} is not an EVM (0x + 40 hex) or Solana address"
            )
        address = text.lower() if text.startswith("0x") else text
        if address not in out:
            out.append(address)
    return out


def unified_balances(body: Any, depositors: list[str]) -> list[Balance]:
    """Gateway's answer as one Balance per depositor (sum over domains)."""
    if not isinstance(body, dict) or not isinstance(body.get("balances"), list):
        raise GatewayError("answer has no `balances` list")
    if body.get("token") != TOKEN:
        raise GatewayError(f"answer is for token {body.get('token')!r}, not {TOKEN}")
    parts: dict[str, dict[str, Decimal]] = {d: {} for d in depositors}
    for i, item in enumerate(body["balances"]):
        if not isinstance(item, dict):
            raise GatewayError(f"balances[{i}] is not an object")
        depositor = item.get("depositor")
        if not isinstance(depositor, str):
            raise GatewayError(f"balances[{i}].depositor is missing")
        key = depositor.lower() if depositor.startswith("0x") else depositor
        if key not in parts:
            raise GatewayError(f"balances[{i}] is for {depositor!r}, which was not asked for")
        raw = item.get("balance")
        if not isinstance(raw, str):
            raise GatewayError(f"balances[{i}].balance must be a decimal string, got {raw!r}")
        try:
            amount = exact_amount(raw)
        except ValueError as exc:
            raise GatewayError(f"balances[{i}].balance: {exc}") from None
        domain = str(item.get("domain"))
        if domain in parts[key]:
            raise GatewayError(f"balances[{i}]: domain {domain} of {depositor!r} appears twice")
        parts[key][domain] = amount
    missing = [d for d, domains in parts.items() if not domains]
    if missing:
        raise GatewayError(f"no balance reported for {', '.join(missing)}")
    return [
        Balance(
            account=depositor,
            asset=TOKEN,
            amount=sum(domains.values(), Decimal(0)),
            detail={"domains": {d: str(a) for d, a in sorted(domains.items())}},
        )
        for depositor, domains in parts.items()
    ]


class GatewayBalanceFetcher:
    key = "gateway"
    venue_key = VENUE_KEY

    def __init__(self, client: httpx.AsyncClient, base_url: str, depositors: list[str]) -> None:
        self._client = client
        self._url = base_url.rstrip("/") + "/v1/balances"
        self._depositors = depositors

    def __repr__(self) -> str:
        return f"GatewayBalanceFetcher({self._url!r}, {len(self._depositors)} depositors)"

    async def fetch_balances(self) -> list[Balance]:
        request = {"token": TOKEN, "sources": [{"depositor": d} for d in self._depositors]}
        response = await self._client.post(self._url, json=request)
        if response.status_code != 200:
            raise GatewayError(
                f"HTTP {response.status_code} from {self._url}: {response.text[:200]!r}"
            )
        try:
            body = bounded_json.loads(response.content)
        except ValueError:
            raise GatewayError(f"answer from {self._url} is not JSON") from None
        return unified_balances(body, self._depositors)


def register(registry: ProviderRegistry, settings: Settings, db: Database) -> None:
    """Entry point `qtg.providers:gateway`: the Gateway balance fetcher."""
    depositors = parse_depositors(settings.gateway_depositors_csv)
    if not depositors:
        raise ConfigError(
            "MG_GATEWAY_DEPOSITORS_CSV: the gateway provider needs at least one depositor address"
        )
    url = urlsplit(settings.gateway_api_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ConfigError(
            f"MG_GATEWAY_API_URL: expected an http(s) URL, got {settings.gateway_api_url!r}"
        )
    if url.username or url.password:  # errors name the URL: it must carry no secret
        raise ConfigError("MG_GATEWAY_API_URL: must not carry user:password@")
    # The worker bounds each call with MG_BALANCE_FETCH_TIMEOUT_SECONDS; the client's
    # own timeout is the same, so a hung socket is also closed, not just abandoned.
    client = httpx.AsyncClient(
        timeout=settings.balance_fetch_timeout_seconds, follow_redirects=False, trust_env=False
    )
    registry.add_closer(client.aclose)
    registry.add_balance_fetcher(
        GatewayBalanceFetcher(client, settings.gateway_api_url, depositors)
    )
