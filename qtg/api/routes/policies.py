"""Treasury policies and the address book (issue 45): proposed by one admin,
decided by another; reading them is for viewers."""

from __future__ import annotations

from typing import Any

from qtg.api import schemas as s
from qtg.api.routing import Call, Endpoint, Reply
from qtg.services import policies
from qtg.services.tokens import Role


async def propose_policy(call: Call) -> Any:
    body: s.PolicyCreate = call.body
    return Reply(
        await policies.propose_policy(
            call.ctx.db, document=body.document, actor=call.actor, note=body.note
        ),
        201,
    )


async def list_policies(call: Call) -> Any:
    return await policies.list_policies(call.ctx.db, limit=call.query.limit)


async def get_policy(call: Call) -> Any:
    return await policies.get_policy(call.ctx.db, call.path.version)


async def approve_policy(call: Call) -> Any:
    return await policies.approve_policy(call.ctx.db, call.path.version, actor=call.actor)


async def reject_policy(call: Call) -> Any:
    return await policies.reject_policy(
        call.ctx.db, call.path.version, actor=call.actor, note=call.body.note
    )


async def propose_entry(call: Call) -> Any:
    body: s.EntryCreate = call.body
    return Reply(
        await policies.propose_entry(
            call.ctx.db,
            chain=body.chain,
            asset=body.asset,
            address=body.address,
            label=body.label,
            tags=body.tags,
            replaces=body.replaces,
            actor=call.actor,
        ),
        201,
    )


async def list_entries(call: Call) -> Any:
    q: s.EntryListQuery = call.query
    return {"items": await policies.list_entries(call.ctx.db, state=q.state, limit=q.limit)}


async def approve_entry(call: Call) -> Any:
    return await policies.decide_entry(
        call.ctx.db, call.ctx.settings, call.path.entry_id, actor=call.actor, approve=True
    )


async def reject_entry(call: Call) -> Any:
    return await policies.decide_entry(
        call.ctx.db, call.ctx.settings, call.path.entry_id, actor=call.actor, approve=False
    )


_POLICY_DECISION: dict[str, Any] = {
    "role": Role.admin,
    "path_model": s.PolicyPath,
    "body_model": s.PolicyDecision,
    "body_required": False,
    "errors": (403, 404, 409),
}
_ENTRY_DECISION: dict[str, Any] = {
    "role": Role.admin,
    "path_model": s.EntryPath,
    "body_model": s.EntryDecision,
    "body_required": False,
    "errors": (403, 404, 409),
}

ENDPOINTS = [
    Endpoint(
        "POST",
        "/v3/policies",
        propose_policy,
        "Propose a policy version (another admin approves it)",
        "policies",
        s.PolicyVersion,
        role=Role.admin,
        status=201,
        body_model=s.PolicyCreate,
        errors=(422,),
    ),
    Endpoint(
        "GET",
        "/v3/policies",
        list_policies,
        "The active policy version and the newest versions, proposals included",
        "policies",
        s.PolicyList,
        query_model=s.PolicyListQuery,
    ),
    Endpoint(
        "GET",
        "/v3/policies/{version}",
        get_policy,
        "One policy version",
        "policies",
        s.PolicyVersion,
        path_model=s.PolicyPath,
        errors=(404,),
    ),
    Endpoint(
        "POST",
        "/v3/policies/{version}/approve",
        approve_policy,
        "Approve a proposed policy version: it becomes ACTIVE (four-eyes: not by its proposer)",
        "policies",
        s.PolicyVersion,
        **_POLICY_DECISION,
    ),
    Endpoint(
        "POST",
        "/v3/policies/{version}/reject",
        reject_policy,
        "Reject (or, by its proposer, withdraw) a proposed policy version",
        "policies",
        s.PolicyVersion,
        **_POLICY_DECISION,
    ),
    Endpoint(
        "POST",
        "/v3/address-book",
        propose_entry,
        "Propose an address-book entry, or a change of one (another admin approves it)",
        "address book",
        s.AddressBookEntry,
        role=Role.admin,
        status=201,
        body_model=s.EntryCreate,
        errors=(404, 409, 422),
    ),
    Endpoint(
        "GET",
        "/v3/address-book",
        list_entries,
        "The address book: active entries and proposals, with cooling-off time left",
        "address book",
        s.AddressBook,
        query_model=s.EntryListQuery,
    ),
    Endpoint(
        "POST",
        "/v3/address-book/{entry_id}/approve",
        approve_entry,
        "Approve an entry (not by its proposer); usable after the cooling-off time",
        "address book",
        s.AddressBookEntry,
        **_ENTRY_DECISION,
    ),
    Endpoint(
        "POST",
        "/v3/address-book/{entry_id}/reject",
        reject_entry,
        "Reject (or withdraw) a proposed entry",
        "address book",
        s.AddressBookEntry,
        **_ENTRY_DECISION,
    ),
]
