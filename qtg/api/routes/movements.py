"""Movements: create (idempotent), read, and the human decisions."""

from __future__ import annotations

from typing import Any, TypedDict

from pydantic import BaseModel

from qtg.api import schemas as s
from qtg.api.routing import Call, Endpoint, Header, Reply, decode_cursor, encode_cursor
from qtg.services import movements, node_attention
from qtg.services.tokens import Role

IDEMPOTENCY_KEY = Header(
    "Idempotency-Key",
    r"[\x21-\x7e]{1,200}",
    "1-200 printable ASCII characters, no spaces; the same key with the same body returns "
    "the movement created first",
)


async def create_movement(call: Call) -> Any:
    body: s.MovementCreate = call.body
    movement, created = await movements.create_movement(
        call.ctx.db,
        call.ctx.settings,
        template_key=body.template_key,
        intent=body.intent.model_dump(),
        input_params=body.input_params,
        idempotency_key=call.headers["Idempotency-Key"],
        callback_url=body.callback_url,
        actor=call.actor,
        providers=call.ctx.providers,
    )
    return Reply(movement, 201 if created else 200)


async def get_movement(call: Call) -> Any:
    return await movements.get_movement(call.ctx.db, call.path.request_id)


async def list_movements(call: Call) -> Any:
    q: s.MovementListQuery = call.query
    rows, next_cursor = await movements.list_movements(
        call.ctx.db,
        state=q.state.value if q.state is not None else None,
        template_key=q.template_key,
        cursor=decode_cursor(q.cursor),
        limit=q.limit,
    )
    return {"items": rows, "next_cursor": encode_cursor(next_cursor)}


async def approve_movement(call: Call) -> Any:
    assert call.principal is not None
    movement = await movements.approve_movement(
        call.ctx.db, call.path.request_id, actor=call.actor, actor_role=call.principal.role.name
    )
    # Issue 45: a policy's rule may need more approvals; this one is recorded.
    return Reply(movement, 202 if movement["request_state"] == "PENDING_APPROVAL" else 200)


async def reject_movement(call: Call) -> Any:
    return await movements.reject_movement(
        call.ctx.db, call.path.request_id, actor=call.actor, reason=call.body.reason
    )


async def cancel_movement(call: Call) -> Any:
    return await movements.cancel_movement(
        call.ctx.db, call.path.request_id, actor=call.actor, reason=call.body.reason
    )


async def resume_movement(call: Call) -> Any:
    return await movements.resume_movement(call.ctx.db, call.path.request_id, actor=call.actor)


async def retry_node(call: Call) -> Any:
    return await movements.retry_node(
        call.ctx.db, call.path.request_id, call.path.node_key, actor=call.actor
    )


async def complete_manual_node(call: Call) -> Any:
    return await movements.complete_manual_node(
        call.ctx.db,
        call.path.request_id,
        call.path.node_key,
        actor=call.actor,
        artifacts=call.body.artifacts,
    )


async def resolve_node(call: Call) -> Any:
    body: s.NodeResolve = call.body
    result, confirmed = await node_attention.resolve_node(
        call.ctx.db,
        call.ctx.settings,
        call.path.request_id,
        call.path.node_key,
        actor=call.actor,
        outcome=body.outcome,
        evidence=body.evidence,
        provider_refs=body.provider_refs,
    )
    return Reply(result, 200 if confirmed else 202)


class _Decision(TypedDict):
    """The Endpoint keywords an operator's decision on a movement shares."""

    role: Role
    path_model: type[BaseModel]
    errors: tuple[int, ...]
    body_required: bool


_DECISION: _Decision = {
    "role": Role.operator,
    "path_model": s.MovementPath,
    "errors": (404, 409),
    "body_required": False,
}
#: an approval may also be refused (403: blocked by policy, or not an approver)
_APPROVAL: _Decision = {**_DECISION, "errors": (403, 404, 409)}
#: a decision on one node of a movement
_NODE_DECISION: _Decision = {**_DECISION, "path_model": s.NodePath}

ENDPOINTS = [
    Endpoint(
        "POST",
        "/v3/movements",
        create_movement,
        "Create a movement from a template (PENDING_APPROVAL)",
        "movements",
        s.Movement,
        role=Role.operator,
        status=201,
        also=(200,),
        body_model=s.MovementCreate,
        headers=(IDEMPOTENCY_KEY,),
        errors=(400, 403, 404, 409),
        description="Requires an Idempotency-Key header. Replaying the same key with the "
        "same body returns 200 and the movement created first; with a different body, 409. "
        "403 POLICY_BLOCKED: the active treasury policy blocks it (the body names the rule); "
        "nothing is stored.",
    ),
    Endpoint(
        "GET",
        "/v3/movements",
        list_movements,
        "List movements, newest first",
        "movements",
        s.MovementPage,
        query_model=s.MovementListQuery,
    ),
    Endpoint(
        "GET",
        "/v3/movements/{request_id}",
        get_movement,
        "One movement with its nodes",
        "movements",
        s.Movement,
        path_model=s.MovementPath,
        errors=(404,),
    ),
    Endpoint(
        "POST",
        "/v3/movements/{request_id}/approve",
        approve_movement,
        "Approve (four-eyes: not by its creator); frontier nodes become READY",
        "movements",
        s.Movement,
        **_APPROVAL,
        body_model=s.Empty,
        also=(202,),
        description="Under a treasury policy (docs/policies.md) the matched rule may need "
        "several distinct approvers: each approval is recorded, and while more are needed "
        "the answer is 202 with the movement still PENDING_APPROVAL. 403 POLICY_BLOCKED "
        "(naming the rule): the active policy blocks it now; 403 NOT_AN_APPROVER: the caller "
        "is not in the rule's group or role; 409 ALREADY_APPROVED.",
    ),
    Endpoint(
        "POST",
        "/v3/movements/{request_id}/reject",
        reject_movement,
        "Reject a movement awaiting approval",
        "movements",
        s.Movement,
        **_DECISION,
        body_model=s.Decision,
    ),
    Endpoint(
        "POST",
        "/v3/movements/{request_id}/resume",
        resume_movement,
        "Resume a movement that needs a human (back to EXECUTING)",
        "movements",
        s.Movement,
        **_DECISION,
        body_model=s.Empty,
    ),
    Endpoint(
        "POST",
        "/v3/movements/{request_id}/cancel",
        cancel_movement,
        "Cancel a movement (refused while a side effect may be in flight)",
        "movements",
        s.Movement,
        **_DECISION,
        body_model=s.Decision,
    ),
    Endpoint(
        "POST",
        "/v3/movements/{request_id}/nodes/{node_key}/retry",
        retry_node,
        "Retry a FAILED node (a new attempt); 409 FAILURE_NOT_PROVEN unless its failure is "
        "proven (failure_proven)",
        "movements",
        s.Movement,
        **_NODE_DECISION,
        body_model=s.Empty,
    ),
    Endpoint(
        "POST",
        "/v3/movements/{request_id}/nodes/{node_key}/complete",
        complete_manual_node,
        "Complete a READY manual node",
        "movements",
        s.Movement,
        **_NODE_DECISION,
        body_model=s.ManualCompletion,
    ),
    Endpoint(
        "POST",
        "/v3/movements/{request_id}/nodes/{node_key}/resolve",
        resolve_node,
        "Settle an undecided (UNKNOWN) node by hand, four-eyes: one operator proposes, "
        "another confirms",
        "movements",
        s.NodeResolutionResult,
        role=Role.operator,
        path_model=s.NodePath,
        status=200,
        also=(202,),
        errors=(403, 404, 409, 422),
        body_model=s.NodeResolve,
        description="The first call records a proposal (202, nothing moves). A different "
        "operator sending the same outcome confirms it (200): COMPLETED completes the node and "
        "releases its successors, FAILED fails it (no money moved), and the movement's state "
        "is derived again (from MANUAL_INTERVENTION through EXECUTING). 403 FOUR_EYES: the "
        "proposer cannot confirm. A confirmed FAILED whose node signed chain transactions that "
        "could still be mined answers 202 with resolution.applied_at null: the node stays "
        "UNKNOWN (FAILURE_NOT_PROVEN) until the chain shows a same-nonce cancel consumed the "
        "nonce (then FAILED), or the payment did (then it completes). 409 "
        "FAILURE_PROOF_PENDING: such a node is waiting for the chain. 409 RESOLUTION_MISMATCH: "
        "another outcome than proposed; "
        "ILLEGAL_NODE_STATE: the node is not UNKNOWN (nor SUBMITTING past its grace); "
        "FAILURE_NOT_PROVABLE: FAILED for a node whose money may still arrive and cannot be "
        "called back (a stargate_delivery), refused before anything is recorded; "
        "NODE_BUSY: a worker holds the node right now; ILLEGAL_STATE: the movement is not "
        "EXECUTING or MANUAL_INTERVENTION.",
    ),
]
