"""Exchanges through ccxt: a CEX client per exchange, for cex_transfer_ingest.

ccxt is what the field uses for exchange APIs: one unified `fetch_deposits` /
`fetch_withdrawals` over a hundred exchanges, each answer parsed into ccxt's
transaction structure (id, txid, timestamp, currency, amount, status
pending/ok/failed/canceled, fee, network, address). `CcxtCexClient` wraps one
ccxt exchange:

- exact amounts: the exchange object parses numbers as `Decimal`, never float;
- ccxt's sync client runs in a worker thread (trio has no asyncio loop for
  ccxt's async one), bounded by ccxt's own request timeout;
- paging: each kind is asked for `since` the cursor, `PAGE` rows at a time;
  a full page is followed by older pages (ccxt's unified `until`, set to the
  oldest row's time) until a short one, at most `MAX_PAGES`; more than that
  raises, so the cursor does not jump over transfers it never saw.

The same provider registers the `ccxt` executor of `cex_withdrawal` and
`cex_withdrawal_status` (qtg.providers.ccxt_withdrawal, issue 28).

Configuration (provider entry point `ccxt`): MG_CCXT_VENUES_CSV names ccxt
exchange ids (e.g. `okx`); MG_CCXT_CREDENTIALS_FILE is a JSON file (keep it
mode 0600) with one object per exchange id: `apiKey`, `secret`, optionally
`password` and `api_url` (replaces the exchange's REST base URL: a proxy, a
testnet, or the tests' local server). Credentials never reach logs or errors.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from qtg.config import ConfigError, Settings
from qtg.db import Database
from qtg.domain.balances import normalize_transfer_status
from qtg.providers.cex import CexTransfer

if TYPE_CHECKING:
    from qtg.providers.registry import ProviderRegistry

PAGE = 100
MAX_PAGES = 50
_CREDENTIAL_KEYS = frozenset({"apiKey", "secret", "password", "uid", "api_url"})


def transfer_from_ccxt(item: dict[str, Any]) -> CexTransfer | None:
    """One ccxt transaction structure as a CexTransfer (None: not a deposit/withdrawal)."""
    kind = item.get("type")
    if kind not in ("deposit", "withdrawal") or item.get("id") is None:
        return None
    amount = item.get("amount")
    if not isinstance(amount, Decimal):
        raise ValueError(f"transfer {item.get('id')}: amount {amount!r} is not exact")
    timestamp = item.get("timestamp")
    if not isinstance(timestamp, int):
        raise ValueError(f"transfer {item.get('id')}: no timestamp")
    fee = (item.get("fee") or {}).get("cost")
    return CexTransfer(
        external_id=str(item["id"]),
        kind=kind,
        status=normalize_transfer_status(item.get("status")),
        asset=str(item.get("currency") or ""),
        amount=amount,
        occurred_at=datetime.fromtimestamp(timestamp / 1000, UTC),
        fee=fee if isinstance(fee, Decimal) else None,
        txid=item.get("txid") or None,
        address=item.get("address") or None,
        network=item.get("network") or None,
    )


class CcxtCexClient:
    def __init__(self, venue: str, exchange: Any) -> None:
        self.venue = venue
        self._exchange = exchange
        self._lock = trio.Lock()  # a ccxt exchange object is not meant for concurrent use

    def __repr__(self) -> str:
        return f"CcxtCexClient({self.venue!r})"

    def _pages(self, method: str, since_ms: int) -> list[dict[str, Any]]:
        fetch = getattr(self._exchange, method)
        rows: list[dict[str, Any]] = []
        params: dict[str, Any] = {}
        for _ in range(MAX_PAGES):
            page = fetch(None, since_ms, PAGE, dict(params))
            rows += page
            if len(page) < PAGE:
                return rows
            # The oldest row's own time: ccxt documents `until` as inclusive, some exchanges
            # (OKX's `after`) treat it as exclusive; rows seen twice are deduplicated by id,
            # rows one millisecond older than a page's oldest are never skipped.
            params["until"] = min(int(r["timestamp"]) for r in page)
        raise RuntimeError(
            f"{self.venue}: more than {MAX_PAGES * PAGE} {method} rows since the cursor"
        )

    def _fetch(self, since_ms: int) -> list[dict[str, Any]]:
        return self._pages("fetch_deposits", since_ms) + self._pages("fetch_withdrawals", since_ms)

    async def fetch_transfers(self, since: datetime) -> list[CexTransfer]:
        since_ms = int(since.timestamp() * 1000)
        async with self._lock:
            items = await trio.to_thread.run_sync(self._fetch, since_ms, abandon_on_cancel=True)
        transfers = {}
        for item in items:
            transfer = transfer_from_ccxt(item)
            if transfer is not None:
                transfers[transfer.external_id] = transfer
        return list(transfers.values())


def make_exchange(exchange_id: str, credentials: dict[str, Any], timeout_seconds: float) -> Any:
    """A configured ccxt exchange object (markets are not loaded: transfers need none)."""
    import ccxt  # imported here: only a process with this provider pays for it

    if exchange_id not in ccxt.exchanges:
        raise ConfigError(f"MG_CCXT_VENUES_CSV: {exchange_id!r} is not a ccxt exchange id")
    config = {k: v for k, v in credentials.items() if k != "api_url"}
    exchange = getattr(ccxt, exchange_id)(
        {**config, "timeout": int(timeout_seconds * 1000), "enableRateLimit": True}
    )
    exchange.number = Decimal
    exchange.markets = {}
    api_url = credentials.get("api_url")
    if api_url:
        api = exchange.urls.get("api")
        exchange.urls["api"] = {name: api_url for name in api} if isinstance(api, dict) else api_url
    return exchange


def load_credentials(path: str | None, venues: list[str]) -> dict[str, dict[str, Any]]:
    if not path:
        raise ConfigError("MG_CCXT_CREDENTIALS_FILE: the ccxt provider needs a credentials file")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"MG_CCXT_CREDENTIALS_FILE: cannot read {path}: {exc.strerror}") from None
    except ValueError:
        raise ConfigError(f"MG_CCXT_CREDENTIALS_FILE: {path} is not JSON") from None
    if not isinstance(data, dict):
        raise ConfigError(f"MG_CCXT_CREDENTIALS_FILE: {path} must hold an object per exchange")
    out = {}
    for venue in venues:
        entry = data.get(venue)
        if not isinstance(entry, dict) or not entry.get("apiKey") or not entry.get("secret"):
            raise ConfigError(
                f"MG_CCXT_CREDENTIALS_FILE: {path} has no apiKey and secret for {venue!r}"
            )
        unknown = sorted(set(entry) - _CREDENTIAL_KEYS)
        if unknown:
            raise ConfigError(
                f"MG_CCXT_CREDENTIALS_FILE: {venue!r} has unknown keys {', '.join(unknown)}"
            )
        out[venue] = entry
    return out


def register(registry: ProviderRegistry, settings: Settings, db: Database) -> None:
    """Entry point `qtg.providers:ccxt`: one CEX client per MG_CCXT_VENUES_CSV exchange."""
    venues = [v.strip() for v in settings.ccxt_venues_csv.split(",") if v.strip()]
    if not venues:
        raise ConfigError("MG_CCXT_VENUES_CSV: the ccxt provider needs at least one exchange id")
    credentials = load_credentials(settings.ccxt_credentials_file, venues)
    for venue in venues:
        exchange = make_exchange(
            venue, credentials[venue], settings.cex_transfer_ingest_timeout_seconds
        )
        registry.add_cex_client(CcxtCexClient(venue, exchange))
    # The cex_withdrawal executor (issue 28) gets exchange objects of its own: a
    # withdrawal never waits behind an ingest pull, and its timeout is its own.
    from qtg.providers.ccxt_withdrawal import CcxtWithdrawalExecutor

    registry.add_executor(
        CcxtWithdrawalExecutor(
            db,
            {
                venue: make_exchange(
                    venue, credentials[venue], settings.ccxt_withdraw_timeout_seconds
                )
                for venue in venues
            },
            grace_seconds=settings.ccxt_withdrawal_grace_seconds,
            recheck_seconds=settings.ccxt_withdrawal_recheck_seconds,
        )
    )
