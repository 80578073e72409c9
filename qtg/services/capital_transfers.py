"""Capital transfers and capital_transfer_followup (reference §12).

A capital transfer is a treasury-level request — move an amount of an asset
from one venue or account to another — that picks a route template, creates
the movement (which still needs its own four-eyes approval) and follows it:

    pending → movement_created → completed | failed | needs_attention

The API commits the transfer as `pending` first and then creates its movement
with the idempotency key `capital-transfer:<id>`; a crash between the two
leaves a pending transfer that capital_transfer_followup advances. Because the
key is derived from the transfer, creating the movement twice (the API and a
follow-up, or two runtimes following up at once) yields one movement. Status
then follows the movement: a trigger (migrations/0011) updates it in the
movement's own transaction, and each follow-up pass reconciles any transfer
out of step. A transfer whose movement is still awaiting approval after
MG_CAPITAL_TRANSFER_STALE_SECONDS raises one notification (warning).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from typing import Any

from qtg.config import Settings
from qtg.db import Database, Tx, sql_family
from qtg.domain.attention import parse_transfer_routes, pick_transfer_template
from qtg.domain.plan import canonical_json
from qtg.providers.registry import ProviderRegistry
from qtg.services.auditing import record_audit
from qtg.services.context import ServiceContext
from qtg.services.errors import (
    IdempotencyConflict,
    InvalidInput,
    NotFound,
    ServiceError,
    uuid_or_not_found,
)
from qtg.services.movements import create_movement, validate_intent
from qtg.services.notifications import raise_notification
from qtg.services.paging import decode_cursor, encode_cursor

log = logging.getLogger("qtg.services.capital_transfers")

SQL = sql_family(
    "capital_transfers",
    "template_active",
    "find_by_idempotency_key",
    "insert_transfer",
    "get_transfer",
    "list_transfers",
    "link_movement",
    "mark_needs_attention",
    "claim_pending",
    "reconcile",
    "claim_stale",
)

STATUSES = ("pending", "movement_created", "completed", "failed", "needs_attention")
MAX_PAGE = 200
#: A pending transfer younger than this is left to the API call that is creating
#: its movement right now; the follow-up takes over after it (the crash path).
PENDING_GRACE_SECONDS = 30.0


def movement_idempotency_key(transfer_id: object) -> str:
    """The key of a transfer's movement: one transfer, one movement, however often asked."""
    return f"capital-transfer:{transfer_id}"


def transfer_fingerprint(fields: Mapping[str, Any]) -> str:
    """What "the same body" means for a capital transfer's idempotency key."""
    return hashlib.sha256(canonical_json(dict(fields))).hexdigest()


# ------------------------------------------------------------------ create


async def create_capital_transfer(
    db: Database,
    settings: Settings,
    *,
    asset: str,
    amount: str,
    source: str,
    destination: str,
    template_key: str | None,
    note: str | None,
    idempotency_key: str,
    actor: str,
    providers: ProviderRegistry | None = None,
) -> tuple[dict[str, Any], bool]:
    """Record the transfer (pending), then create its movement and follow it.
    With `providers`, the movement's intent is checked as a movement's is
    (`movements.check_intent`): an impossible one leaves the transfer in
    needs_attention naming the field.

    The same idempotency key (per principal) with the same body returns the
    transfer created first (created False); with another body, 409.
    """
    if not isinstance(idempotency_key, str) or not 1 <= len(idempotency_key) <= 200:
        raise InvalidInput(
            "the idempotency key must be 1-200 characters", detail={"field": "Idempotency-Key"}
        )
    validate_intent({"asset": asset, "amount": amount, "destination": destination})
    if not isinstance(source, str) or not source.strip():
        raise InvalidInput("source must be a non-empty string", detail={"field": "source"})
    if template_key is None:
        routes = parse_transfer_routes(settings.capital_transfer_routes)
        template_key = pick_transfer_template(routes, source, destination)
        if template_key is None:
            raise InvalidInput(
                f"no route template for {source} > {destination}: name template_key, "
                "or configure MG_CAPITAL_TRANSFER_ROUTES",
                detail={"field": "template_key", "source": source, "destination": destination},
            )
    fields = {
        "asset": asset,
        "amount": amount,
        "source": source,
        "destination": destination,
        "template_key": template_key,
        "note": note,
    }
    fingerprint = transfer_fingerprint(fields)
    async with db.transaction() as tx:
        existing = await tx.fetchrow(
            SQL.find_by_idempotency_key, {"created_by": actor, "idempotency_key": idempotency_key}
        )
        transfer_id = None
        if existing is None:
            if not await tx.fetchval(SQL.template_active, {"template_key": template_key}):
                raise NotFound(
                    f"template {template_key!r} not found or has no active version",
                    detail={"field": "template_key", "template_key": template_key},
                )
            transfer_id = await tx.fetchval(
                SQL.insert_transfer,
                {
                    **fields,
                    "network_class": settings.network_class,
                    "idempotency_key": idempotency_key,
                    "request_fingerprint": fingerprint,
                    "created_by": actor,
                },
            )
            if transfer_id is None:  # lost a race with a concurrent create using the key
                existing = await tx.fetchrow(
                    SQL.find_by_idempotency_key,
                    {"created_by": actor, "idempotency_key": idempotency_key},
                )
                assert existing is not None
            else:
                await record_audit(
                    tx,
                    actor=actor,
                    action="capital_transfer.created",
                    object_type="capital_transfer",
                    object_id=transfer_id,
                    detail={**fields, "idempotency_key": idempotency_key},
                )
        if existing is not None and existing["request_fingerprint"] != fingerprint:
            raise IdempotencyConflict(
                "this idempotency key was already used with a different body",
                detail={"field": "Idempotency-Key", "capital_transfer_id": str(existing["id"])},
            )
    if transfer_id is None:
        assert existing is not None
        return await get_capital_transfer(db, existing["id"]), False
    row = {**fields, "id": transfer_id, "network_class": settings.network_class}
    async with db.transaction() as tx:
        await _advance(tx, db, settings, {**row, "created_by": actor}, providers)
    return await get_capital_transfer(db, transfer_id), True


async def _advance(
    tx: Tx,
    db: Database,
    settings: Settings,
    row: Mapping[str, Any],
    providers: ProviderRegistry | None = None,
) -> None:
    """Create the transfer's movement (idempotent by its key) and link it in `tx`,
    which holds the transfer's row; a refusal puts the transfer in needs_attention."""
    try:
        movement, _created = await create_movement(
            db,
            settings,
            template_key=row["template_key"],
            intent={
                "asset": row["asset"],
                "amount": row["amount"],
                "destination": row["destination"],
                "source": row["source"],
            },
            input_params={"capital_transfer_id": str(row["id"]), "source": row["source"]},
            idempotency_key=movement_idempotency_key(row["id"]),
            actor=row["created_by"],
            providers=providers,
            # the transfer's class, not the runtime's: a movement inherits the
            # class of what it came from (issue 25)
            network_class=row["network_class"],
        )
    except ServiceError as exc:
        await tx.execute(SQL.mark_needs_attention, {"id": row["id"], "error": exc.message})
        await raise_notification(
            tx,
            kind="capital_transfer_attention",
            severity="warning",
            dedupe_key=f"capital_transfer_attention:{row['id']}",
            subject=f"capital transfer {row['id']} could not create its movement",
            body=(
                f"Capital transfer {row['id']} ({row['amount']} {row['asset']} from "
                f"{row['source']} to {row['destination']}, template {row['template_key']}) "
                f"needs a person: {exc.message}."
            ),
            links={"capital_transfer_id": str(row["id"])},
        )
        log.warning(
            "capital transfer needs attention",
            extra={"capital_transfer_id": str(row["id"]), "error": exc.message},
        )
        return
    await tx.execute(SQL.link_movement, {"id": row["id"], "request_id": movement["id"]})


# ------------------------------------------------------------------ read


async def get_capital_transfer(db: Database, transfer_id: object) -> dict[str, Any]:
    tid = uuid_or_not_found(transfer_id, what="capital transfer", key="capital_transfer_id")
    row = await db.fetchrow(SQL.get_transfer, {"id": tid})
    if row is None:
        raise NotFound(
            f"capital transfer {tid} not found", detail={"capital_transfer_id": str(tid)}
        )
    return row


async def list_capital_transfers(
    db: Database, *, status: str | None = None, cursor: str | None = None, limit: int = 50
) -> tuple[list[dict[str, Any]], str | None]:
    if status is not None and status not in STATUSES:
        raise InvalidInput(f"unknown status {status!r}", detail={"field": "status"})
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}", detail={"field": "limit"})
    after_created_at, after_id = decode_cursor(cursor) if cursor else (None, None)
    rows = await db.fetch(
        SQL.list_transfers,
        {
            "status": status,
            "after_created_at": after_created_at,
            "after_id": after_id,
            "limit": limit + 1,
        },
    )
    next_cursor = encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return rows[:limit], next_cursor


# ------------------------------------------------------------------ the worker


async def follow_up_pending_capital_transfers(ctx: ServiceContext) -> int:
    """The capital_transfer_followup pass (§12): advance, reconcile, surface.

    1. pending transfers whose movement is missing get it (claimed with
       SKIP LOCKED; the movement's key makes a second creation return the first);
    2. transfers out of step with their movement take its status;
    3. transfers whose movement is still unapproved past
       MG_CAPITAL_TRANSFER_STALE_SECONDS raise one notification each.
    """
    db, settings = ctx.db, ctx.settings
    batch = settings.capital_transfer_followup_batch_size
    # Every claim is of this runtime's network class only (issue 25): another
    # class's transfers are its own runtimes' to follow up.
    network_class = settings.network_class
    async with db.transaction() as tx:
        pending = await tx.fetch(
            SQL.claim_pending,
            {
                "limit": batch,
                "grace_seconds": PENDING_GRACE_SECONDS,
                "network_class": network_class,
            },
        )
        for row in pending:
            await _advance(tx, db, settings, row, ctx.providers)
    reconciled = await db.execute(SQL.reconcile, {"limit": batch, "network_class": network_class})
    async with db.transaction() as tx:
        stale = await tx.fetch(
            SQL.claim_stale,
            {
                "stale_seconds": settings.capital_transfer_stale_seconds,
                "limit": batch,
                "network_class": network_class,
            },
        )
        for row in stale:
            await raise_notification(
                tx,
                kind="capital_transfer_stale",
                severity="warning",
                dedupe_key=f"capital_transfer_stale:{row['id']}",
                subject=f"capital transfer {row['id']} is waiting for approval",
                body=(
                    f"Capital transfer {row['id']} ({row['amount']} {row['asset']} from "
                    f"{row['source']} to {row['destination']}, requested by "
                    f"{row['created_by']} at {row['created_at'].isoformat()}) has a movement "
                    f"({row['request_id']}) still in {row['request_state']}: it needs a second "
                    "operator's approval before it expires."
                ),
                links={
                    "capital_transfer_id": str(row["id"]),
                    "request_id": str(row["request_id"]),
                },
                request_id=row["request_id"],
            )
    return len(pending) + reconciled + len(stale)
