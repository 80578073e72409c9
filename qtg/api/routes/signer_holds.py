"""Signer holds (issue 43): GET /v3/signer-holds, and their four-eyes clearing.

A hold stops every new signature of a signer (its key may be used elsewhere, or the
ledger lost history and the chain shows transactions that match no node:
qtg.providers.evm.holds, qtg.providers.evm.ledger). Clearing one lets that signer
sign again, so it takes two operators: POST …/clear proposes it with the evidence
(202), the same call by a different operator confirms it (200).

Its schemas live here rather than in qtg/api/schemas.py: they belong to the chain
side alone (as GET /v3/drift's do).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, StringConstraints

from qtg.api import schemas as s
from qtg.api.routing import Call, Endpoint, Reply
from qtg.services import evm_signer_holds
from qtg.services.tokens import Role


class SignerHoldQuery(s.QueryParams):
    active: bool = True  # only holds not cleared yet
    limit: s.Limit = 100


class SignerHoldPath(s.QueryParams):
    hold_id: Annotated[int, Field(ge=1, le=2**63 - 1)]


class SignerHoldClear(s.Body):
    evidence: Annotated[str, StringConstraints(min_length=1, max_length=2000)] = Field(
        description="why the signer may sign again: whose the unknown transactions were, "
        "how the key is known to be qtg's alone"
    )


class SignerHold(s.Out):
    id: int
    chain_id: int | None  # null: every chain
    address: str
    reason: str
    evidence: dict[str, Any]
    created_by: str
    created_at: datetime
    occurrences: int
    cleared_at: datetime | None
    cleared_by: str | None
    clear_evidence: str | None
    clear_proposed_by: str | None
    clear_proposed_at: datetime | None
    clear_proposed_evidence: str | None


class SignerHoldList(s.Out):
    items: list[SignerHold]


async def list_signer_holds(call: Call) -> Any:
    q: SignerHoldQuery = call.query
    return {
        "items": await evm_signer_holds.list_holds(call.ctx.db, active_only=q.active, limit=q.limit)
    }


async def clear_signer_hold(call: Call) -> Any:
    body: SignerHoldClear = call.body
    hold, cleared = await evm_signer_holds.request_clear(
        call.ctx.db, call.path.hold_id, actor=call.actor, evidence=body.evidence
    )
    return Reply(hold, 200 if cleared else 202)


ENDPOINTS = [
    Endpoint(
        "GET",
        "/v3/signer-holds",
        list_signer_holds,
        "Signer holds: signers that sign nothing new until a person clears them",
        "operations",
        SignerHoldList,
        query_model=SignerHoldQuery,
    ),
    Endpoint(
        "POST",
        "/v3/signer-holds/{hold_id}/clear",
        clear_signer_hold,
        "Clear a signer hold, four-eyes: one operator proposes, another confirms",
        "operations",
        SignerHold,
        role=Role.operator,
        path_model=SignerHoldPath,
        body_model=SignerHoldClear,
        status=200,
        also=(202,),
        errors=(403, 404, 409),
        description="The first call records the proposal with its evidence (202): the signer "
        "stays held. The same call by a different operator confirms it (200): the hold ends, "
        "its page is resolved, and the signer's waiting nodes are signed at their next retry. "
        "403 FOUR_EYES: the proposer cannot confirm. 409 HOLD_ALREADY_CLEARED.",
    ),
]
