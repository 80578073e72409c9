"""The sandbox venue's balances: a BalanceFetcher over `sandbox_venue_balances`.

So that the embedded demo shows balances with nothing external: the sandbox
venue's ledger is a table of the sandbox's "remote system" (migration 0012,
seeded with a few accounts), read in its own transaction on the sandbox's
own pool like every other sandbox call.
"""

from __future__ import annotations

from qtg.db import Database, sql_family
from qtg.providers.balances import Balance

SQL = sql_family("sandbox", "venue_balances")

VENUE_KEY = "sandbox"


class SandboxBalanceFetcher:
    key = "sandbox"
    venue_key = VENUE_KEY

    def __init__(self, db: Database) -> None:
        self._db = db

    def __repr__(self) -> str:
        return "SandboxBalanceFetcher()"

    async def fetch_balances(self) -> list[Balance]:
        rows = await self._db.fetch(SQL.venue_balances)
        return [
            Balance(
                account=row["account"],
                asset=row["asset"],
                amount=row["amount"],
                observed_at=row["observed_at"],
            )
            for row in rows
        ]
