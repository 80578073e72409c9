"""Capital transfers: a treasury-level "move X from A to B" that creates and follows a movement."""

from __future__ import annotations

from typing import Any

from qtg.api import schemas as s
from qtg.api.routes.movements import IDEMPOTENCY_KEY
from qtg.api.routing import Call, Endpoint, Reply, decode_cursor, encode_cursor
from qtg.services import capital_transfers
from qtg.services.tokens import Role


async def create_capital_transfer(call: Call) -> Any:
    body: s.CapitalTransferCreate = call.body
    transfer, created = await capital_transfers.create_capital_transfer(
        call.ctx.db,
        call.ctx.settings,
        asset=body.asset,
        amount=body.amount,
        source=body.source,
        destination=body.destination,
        template_key=body.template_key,
        note=body.note,
        idempotency_key=call.headers["Idempotency-Key"],
        actor=call.actor,
        providers=call.ctx.providers,
    )
    return Reply(transfer, 201 if created else 200)


async def list_capital_transfers(call: Call) -> Any:
    q: s.CapitalTransferListQuery = call.query
    rows, next_cursor = await capital_transfers.list_capital_transfers(
        call.ctx.db, status=q.status, cursor=decode_cursor(q.cursor), limit=q.limit
    )
    return {"items": rows, "next_cursor": encode_cursor(next_cursor)}


async def get_capital_transfer(call: Call) -> Any:
    return await capital_transfers.get_capital_transfer(call.ctx.db, call.path.transfer_id)


ENDPOINTS = [
    Endpoint(
        "POST",
        "/v3/capital-transfers",
        create_capital_transfer,
        "Request a capital transfer; its movement is created (PENDING_APPROVAL) and followed",
        "capital-transfers",
        s.CapitalTransfer,
        role=Role.operator,
        status=201,
        also=(200,),
        body_model=s.CapitalTransferCreate,
        headers=(IDEMPOTENCY_KEY,),
        errors=(400, 404, 409),
        description="Requires an Idempotency-Key header (per principal). The movement still "
        "needs a second operator's approval. Replaying the same key with the same body "
        "returns 200 and the transfer created first; with a different body, 409.",
    ),
    Endpoint(
        "GET",
        "/v3/capital-transfers",
        list_capital_transfers,
        "List capital transfers, newest first",
        "capital-transfers",
        s.CapitalTransferPage,
        query_model=s.CapitalTransferListQuery,
    ),
    Endpoint(
        "GET",
        "/v3/capital-transfers/{transfer_id}",
        get_capital_transfer,
        "One capital transfer, with its movement's state",
        "capital-transfers",
        s.CapitalTransfer,
        path_model=s.CapitalTransferPath,
        errors=(404,),
    ),
]
