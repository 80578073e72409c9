"""Balance fetchers (reference §7): the interface, and `balance_fetcher_registry`.

A fetcher reads what one venue holds and returns it as `Balance` rows; the
balance_snapshot worker and `GET /v3/balances?fresh=true` call every
registered fetcher, each under its own timeout, and append what they return
to `balance_snapshots`. Providers add fetchers the way they add executors, in
their `register(registry, settings, db)`:

    registry.add_balance_fetcher(MyVenueFetcher(...))

A fetcher is any object with `key` (unique), `venue_key` (the venue its rows
belong to) and `async def fetch_balances(self) -> list[Balance]`. It raises
on failure (any exception): the failure is recorded and no row is written, so
a venue that cannot be read never shows as a zero balance. An EVM fetcher is
one small class over the EVM JSON-RPC client (`eth_getBalance` per address,
`balanceOf` per ERC-20), returning one Balance per address and token.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable

import msgspec


class Balance(msgspec.Struct, frozen=True, kw_only=True):
    """One balance a venue reported. `amount` must be exact (a Decimal)."""

    account: str
    asset: str
    amount: Decimal
    # When the venue says the balance was true; None: when it answered.
    observed_at: datetime | None = None
    # Where this row came from in the venue's terms (per-chain parts, block number …).
    detail: dict[str, Any] = msgspec.field(default_factory=dict)


@runtime_checkable
class BalanceFetcher(Protocol):
    key: str
    venue_key: str

    async def fetch_balances(self) -> list[Balance]: ...


class BalanceFetcherError(ValueError):
    """A fetcher cannot be registered; the message names it."""


class BalanceFetcherRegistry:
    """Fetchers by key, in registration order. Filled at start-up, then read-only."""

    def __init__(self) -> None:
        self._fetchers: dict[str, BalanceFetcher] = {}

    def add(self, fetcher: BalanceFetcher) -> None:
        if not isinstance(fetcher, BalanceFetcher):
            raise BalanceFetcherError(
                f"{fetcher!r} is not a BalanceFetcher: it needs key, venue_key and fetch_balances()"
            )
        for name in ("key", "venue_key"):
            value = getattr(fetcher, name)
            if not isinstance(value, str) or not value.strip() or value != value.strip():
                raise BalanceFetcherError(
                    f"balance fetcher {type(fetcher).__name__}: {name} must be a non-empty "
                    f"string without surrounding spaces, got {value!r}"
                )
        if fetcher.key in self._fetchers:
            raise BalanceFetcherError(
                f"balance fetcher key {fetcher.key!r} is already registered "
                f"(by {type(self._fetchers[fetcher.key]).__name__})"
            )
        self._fetchers[fetcher.key] = fetcher

    def fetchers(self, venue_key: str | None = None) -> list[BalanceFetcher]:
        """Every fetcher, or those of one venue."""
        return [f for f in self._fetchers.values() if venue_key in (None, f.venue_key)]

    def venue_keys(self) -> list[str]:
        return sorted({f.venue_key for f in self._fetchers.values()})

    def __len__(self) -> int:
        return len(self._fetchers)
