"""The sandbox venue as a CEX client: its withdrawals, for cex_transfer_ingest.

Every `cex_withdrawal` the sandbox executor submitted is a withdrawal at the
sandbox venue, processed when it was made (status `ok`), with the
withdrawal id and txid the executor handed back in provider_refs. The
sandbox venue takes no deposits, so it lists none.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from qtg.db import Database, sql_family
from qtg.providers.cex import CexTransfer

SQL = sql_family("sandbox", "venue_withdrawals")


class SandboxCexClient:
    venue = "sandbox"

    def __init__(self, db: Database) -> None:
        self._db = db

    def __repr__(self) -> str:
        return "SandboxCexClient()"

    async def fetch_transfers(self, since: datetime) -> list[CexTransfer]:
        rows = await self._db.fetch(SQL.venue_withdrawals, {"since": since})
        return [
            CexTransfer(
                external_id=row["external_id"],
                kind="withdrawal",
                status="ok",
                asset=row["asset"],
                amount=Decimal(row["amount"]),
                occurred_at=row["occurred_at"],
                txid=row["txid"],
            )
            for row in rows
        ]
