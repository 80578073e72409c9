"""Template proposals: propose a version (operator), decide it (admin, four-eyes)."""

from __future__ import annotations

from typing import Any

from qtg.api import schemas as s
from qtg.api.routing import Call, Endpoint, Reply
from qtg.services import proposals
from qtg.services.tokens import Role


async def create_proposal(call: Call) -> Any:
    body: s.ProposalCreate = call.body
    return Reply(
        await proposals.create_proposal(
            call.ctx.db,
            call.ctx.settings,
            template_key=body.template_key,
            name=body.name,
            description=body.description,
            graph=body.graph,
            risk_controls=body.risk_controls,
            actor=call.actor,
            providers=call.ctx.providers,
        ),
        201,
    )


async def list_proposals(call: Call) -> Any:
    q: s.ProposalListQuery = call.query
    return {"items": await proposals.list_proposals(call.ctx.db, state=q.state, limit=q.limit)}


async def get_proposal(call: Call) -> Any:
    return await proposals.get_proposal(call.ctx.db, call.path.proposal_id)


async def approve_proposal(call: Call) -> Any:
    return await proposals.approve_proposal(
        call.ctx.db,
        call.path.proposal_id,
        actor=call.actor,
        note=call.body.note,
        max_nodes=call.ctx.settings.template_max_nodes,
        providers=call.ctx.providers,
    )


async def reject_proposal(call: Call) -> Any:
    return await proposals.reject_proposal(
        call.ctx.db, call.path.proposal_id, actor=call.actor, note=call.body.note
    )


ENDPOINTS = [
    Endpoint(
        "POST",
        "/v3/template-proposals",
        create_proposal,
        "Propose a new template version for review",
        "template proposals",
        s.Proposal,
        role=Role.operator,
        status=201,
        body_model=s.ProposalCreate,
    ),
    Endpoint(
        "GET",
        "/v3/template-proposals",
        list_proposals,
        "List proposals, newest first",
        "template proposals",
        s.ProposalList,
        query_model=s.ProposalListQuery,
    ),
    Endpoint(
        "GET",
        "/v3/template-proposals/{proposal_id}",
        get_proposal,
        "One proposal",
        "template proposals",
        s.Proposal,
        path_model=s.ProposalPath,
        errors=(404,),
    ),
    Endpoint(
        "POST",
        "/v3/template-proposals/{proposal_id}/approve",
        approve_proposal,
        "Approve a proposal: its version becomes ACTIVE (not by its proposer)",
        "template proposals",
        s.Proposal,
        role=Role.admin,
        path_model=s.ProposalPath,
        body_model=s.ProposalDecision,
        body_required=False,
        errors=(404, 409),
    ),
    Endpoint(
        "POST",
        "/v3/template-proposals/{proposal_id}/reject",
        reject_proposal,
        "Reject a proposal",
        "template proposals",
        s.Proposal,
        role=Role.admin,
        path_model=s.ProposalPath,
        body_model=s.ProposalDecision,
        body_required=False,
        errors=(404, 409),
    ),
]
