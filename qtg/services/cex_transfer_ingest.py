"""cex_transfer_ingest: the venues' deposits and withdrawals, matched to movement nodes.

For each venue of MG_CEX_TRANSFER_INGEST_VENUES_CSV (concurrently, each under
MG_CEX_TRANSFER_INGEST_TIMEOUT_SECONDS) the pass asks that venue's CEX client
for every transfer since the venue's cursor, less
MG_CEX_TRANSFER_INGEST_OVERLAP_SECONDS, and stores each in `cex_transfers`:

- unique per (venue, external id): a transfer reported again changes nothing;
- status only forward: pending -> ok | failed | canceled, never back, never
  from one final status to another (SQL and a trigger both say so);
- the cursor is the latest `occurred_at` seen, but never later than the
  oldest transfer still pending at that venue, so a pending transfer keeps
  being asked for until the venue reports it final.

Matching: a withdrawal goes to the `cex_withdrawal` node whose provider_refs
carry its id as `withdrawal_id`; a deposit to the `cex_deposit_status`
observe node (not yet final) whose movement produced its txid. When a matched
transfer is new or reaches a final status, the node's next_observe_at is
moved to now, which fires `qtg_observe`: the observer asks the executor at
once instead of at the node's next poll, so an exchange withdrawal completes
as soon as the exchange reports it. The observer still decides from its own
executor's answer; ingest never changes a node's state.

A venue without a registered client, or whose pull fails, records the error
on its cursor row and is retried next pass; the other venues go on.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import trio

from qtg.db import Database, sql_family
from qtg.domain.balances import FINAL_TRANSFER_STATUSES, TRANSFER_STATUSES, exact_amount
from qtg.domain.redaction import describe_error
from qtg.providers.cex import CexClient, CexTransfer
from qtg.services.context import ServiceContext

SQL = sql_family(
    "cex_transfer_ingest",
    "cursors",
    "upsert_transfer",
    "match_withdrawal",
    "match_deposit",
    "set_match",
    "wake_node",
    "save_cursor",
)

log = logging.getLogger("qtg.services.cex_transfer_ingest")


def ingest_venues(csv: str) -> list[str]:
    """MG_CEX_TRANSFER_INGEST_VENUES_CSV as a list (blanks dropped, order kept)."""
    out: list[str] = []
    for item in csv.split(","):
        venue = item.strip()
        if venue and venue not in out:
            out.append(venue)
    return out


def checked(transfer: object) -> CexTransfer:
    """A client's transfer, refused (ValueError) unless it can be stored exactly."""
    if not isinstance(transfer, CexTransfer):
        raise ValueError(f"a {type(transfer).__name__}, not a CexTransfer")
    if not transfer.external_id or not transfer.asset:
        raise ValueError("external_id and asset must not be empty")
    if transfer.status not in TRANSFER_STATUSES:
        raise ValueError(f"status {transfer.status!r} is not one of {', '.join(TRANSFER_STATUSES)}")
    if transfer.occurred_at.tzinfo is None:
        raise ValueError(f"{transfer.external_id}: occurred_at must carry a time zone")
    exact_amount(transfer.amount)
    if transfer.fee is not None:
        exact_amount(transfer.fee)
    return transfer


async def _store(db: Database, venue: str, transfer: CexTransfer) -> bool:
    """Upsert one transfer, match it, wake its node; whether anything changed."""
    async with db.transaction() as tx:
        row = await tx.fetchrow(
            SQL.upsert_transfer,
            {
                "venue": venue,
                "external_id": transfer.external_id,
                "kind": transfer.kind,
                "status": transfer.status,
                "asset": transfer.asset,
                "amount": transfer.amount,
                "fee": transfer.fee,
                "txid": transfer.txid,
                "address": transfer.address,
                "network": transfer.network,
                "occurred_at": transfer.occurred_at,
            },
        )
        if row is None:
            return False
        node_id = row["matched_node_id"]
        if node_id is None:
            if row["kind"] == "withdrawal":
                node_id = await tx.fetchval(
                    SQL.match_withdrawal, {"external_id": row["external_id"], "venue": venue}
                )
            elif row["txid"]:
                node_id = await tx.fetchval(
                    SQL.match_deposit, {"txid": row["txid"], "venue": venue}
                )
            if node_id is not None:
                await tx.execute(SQL.set_match, {"id": row["id"], "node_id": node_id})
        if node_id is not None and row["status"] in FINAL_TRANSFER_STATUSES:
            await tx.execute(SQL.wake_node, {"node_id": node_id})
    return True


async def ingest_venue(
    db: Database,
    venue: str,
    client: CexClient | None,
    *,
    since: datetime,
    timeout_seconds: float,
) -> int:
    """Pull and store one venue; the error, if any, lands on its cursor row."""
    error: str | None = None
    changed = 0
    newest: datetime | None = None
    try:
        if client is None:
            raise LookupError(f"no CEX client is registered for venue {venue!r} (MG_PROVIDERS)")
        with trio.fail_after(timeout_seconds):
            reported = await client.fetch_transfers(since)
        if not isinstance(reported, list):
            raise ValueError(f"fetch_transfers() returned {type(reported).__name__}, not a list")
        transfers = [checked(t) for t in reported]
        for transfer in sorted(transfers, key=lambda t: t.occurred_at):
            changed += await _store(db, venue, transfer)
            newest = max(newest or transfer.occurred_at, transfer.occurred_at)
    except trio.TooSlowError:
        error = f"fetch_transfers() timed out after {timeout_seconds:g}s"
    except Exception as exc:  # a venue's failure is recorded, the others go on
        error = describe_error(exc)
    if error:
        log.warning("cex_transfer_ingest %s failed", venue, extra={"venue": venue})
    await db.execute(SQL.save_cursor, {"venue": venue, "since": newest, "error": error})
    return changed


async def ingest_cex_transfers(ctx: ServiceContext) -> int:
    """The cex_transfer_ingest pass; returns how many transfers were stored or changed."""
    s = ctx.settings
    venues = ingest_venues(s.cex_transfer_ingest_venues_csv)
    if not venues:
        return 0
    cursors = {r["venue"]: r for r in await ctx.db.fetch(SQL.cursors, {"venues": venues})}
    counts: dict[str, int] = {}

    async def one(venue: str) -> None:
        cursor: dict[str, Any] = cursors[venue]
        since = cursor["since"] or cursor["now"] - timedelta(
            seconds=s.cex_transfer_ingest_lookback_seconds
        )
        counts[venue] = await ingest_venue(
            ctx.db,
            venue,
            ctx.providers.cex_client_registry.get(venue),
            since=since - timedelta(seconds=s.cex_transfer_ingest_overlap_seconds),
            timeout_seconds=s.cex_transfer_ingest_timeout_seconds,
        )

    async with trio.open_nursery() as nursery:
        for venue in venues:
            nursery.start_soon(one, venue)
    return sum(counts.values())
