"""CEX transfer clients (cex_transfer_ingest): the interface and its registry.

A client reads one venue's deposit and withdrawal history. The ingest worker
asks each venue of MG_CEX_TRANSFER_INGEST_VENUES_CSV for everything since
that venue's cursor and stores what comes back in `cex_transfers`. Providers
add clients in their `register(registry, settings, db)`:

    registry.add_cex_client(MyExchangeClient(...))

Status words follow ccxt's transaction structure: pending, ok, failed,
canceled (qtg.domain.balances.normalize_transfer_status maps others).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Literal, Protocol, runtime_checkable

import msgspec

from qtg.domain.balances import TransferStatus


class CexTransfer(msgspec.Struct, frozen=True, kw_only=True):
    external_id: str  # the venue's id of the deposit or withdrawal
    kind: Literal["deposit", "withdrawal"]
    status: TransferStatus
    asset: str
    amount: Decimal
    occurred_at: datetime
    fee: Decimal | None = None
    txid: str | None = None
    address: str | None = None
    network: str | None = None


@runtime_checkable
class CexClient(Protocol):
    venue: str

    async def fetch_transfers(self, since: datetime) -> list[CexTransfer]:
        """Deposits and withdrawals updated at or after `since`, any order."""
        ...


class CexClientRegistry:
    """Clients by venue. Filled at start-up, then read-only."""

    def __init__(self) -> None:
        self._clients: dict[str, CexClient] = {}

    def add(self, client: CexClient) -> None:
        if not isinstance(client, CexClient):
            raise ValueError(f"{client!r} is not a CexClient: it needs venue and fetch_transfers()")
        venue = client.venue
        if not isinstance(venue, str) or not venue.strip() or venue != venue.strip():
            raise ValueError(f"CEX client {type(client).__name__}: bad venue {venue!r}")
        if venue in self._clients:
            raise ValueError(f"a CEX client for venue {venue!r} is already registered")
        self._clients[venue] = client

    def get(self, venue: str) -> CexClient | None:
        return self._clients.get(venue)

    def venues(self) -> list[str]:
        return sorted(self._clients)
