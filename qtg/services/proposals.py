"""Template proposals: a new template version that someone else must approve.

A proposal carries a complete template version (key, name, graph,
risk_controls). It is validated when proposed, so a reviewer never reviews a
graph that cannot compile, and again when approved, when the version is
created through the template operation in the same transaction as the
decision: the proposal is APPROVED exactly when the version exists.
Four-eyes: the proposer cannot approve their own proposal (they may reject,
i.e. withdraw, it). A proposal not decided within
MG_TEMPLATE_PROPOSAL_TTL_SECONDS is expired by the template_proposal_expiration
worker (reference §8), so abandoned proposals do not linger as actionable.
Every decision writes its audit fact in its own transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from qtg.config import Settings
from qtg.db import Database, Jsonb, Tx, sql_family
from qtg.domain.plan import PlanError, compile_graph
from qtg.providers.registry import ProviderRegistry
from qtg.services import templates
from qtg.services.auditing import record_audit
from qtg.services.context import ServiceContext
from qtg.services.errors import Conflict, Forbidden, InvalidInput, NotFound, uuid_or_not_found

SQL = sql_family(
    "proposals",
    "insert_proposal",
    "lock_proposal",
    "get_proposal",
    "list_proposals",
    "decide_proposal",
    "expire_due",
    "next_due",
)

PENDING_REVIEW = "PENDING_REVIEW"
STATES = frozenset({PENDING_REVIEW, "APPROVED", "REJECTED", "EXPIRED"})
EXPIRATION_ACTOR = "system:template_proposal_expiration"
OBJECT_TYPE = "template_proposal"
MAX_PAGE = 200
MAX_NOTE_LENGTH = 2000


def _plan_error(exc: PlanError) -> InvalidInput:
    return InvalidInput(
        f"graph is not a valid plan: {exc.path}: {exc.message}",
        code="INVALID_PLAN",
        detail={"field": "graph", "path": exc.path, "plan_error": exc.code},
    )


def _proposal_uuid(proposal_id: object) -> uuid.UUID:
    return uuid_or_not_found(proposal_id, what="template proposal", key="proposal_id")


def _note(note: Any) -> str | None:
    if note is None:
        return None
    if not isinstance(note, str) or len(note) > MAX_NOTE_LENGTH:
        raise InvalidInput(
            f"note must be a string of at most {MAX_NOTE_LENGTH} characters",
            detail={"field": "note"},
        )
    return note


# -------------------------------------------------------------- operations


async def create_proposal(
    db: Database,
    settings: Settings,
    *,
    template_key: str,
    name: str,
    description: str | None = "",
    graph: Any,
    risk_controls: Mapping[str, Any] | None = None,
    actor: str,
    providers: ProviderRegistry | None = None,
) -> dict[str, Any]:
    """Propose a new version of `template_key` (the template need not exist yet).

    A graph no registered executor can run is refused here already (and again
    at approval, for the executors may have changed meanwhile)."""
    risk_controls = {} if risk_controls is None else risk_controls
    templates.check_template_header(template_key, name, risk_controls)
    templates.check_template_size(graph, settings.template_max_nodes)
    description = "" if description is None else description
    if not isinstance(description, str):
        raise InvalidInput("description must be a string", detail={"field": "description"})
    try:
        plan = compile_graph(graph)
    except PlanError as exc:
        raise _plan_error(exc) from None
    templates.check_executors(plan, providers)
    async with db.transaction() as tx:
        proposal = await tx.fetchrow(
            SQL.insert_proposal,
            {
                "template_key": template_key,
                "name": name,
                "description": description,
                "graph": Jsonb(graph),
                "risk_controls": Jsonb(dict(risk_controls)),
                "actor": actor,
                "ttl_seconds": settings.template_proposal_ttl_seconds,
            },
        )
        assert proposal is not None
        await record_audit(
            tx,
            actor=actor,
            action="template_proposal.created",
            object_type=OBJECT_TYPE,
            object_id=proposal["id"],
            detail={"template_key": template_key, "graph_hash": plan.graph_hash},
        )
        return proposal


async def _pending(tx: Tx, proposal_id: object, action: str) -> dict[str, Any]:
    """The proposal, locked, if it can still be decided; else NotFound / Conflict."""
    pid = _proposal_uuid(proposal_id)
    row = await tx.fetchrow(SQL.lock_proposal, {"proposal_id": pid})
    if row is None:
        raise NotFound(f"template proposal {pid} not found", detail={"proposal_id": str(pid)})
    if row["proposal_state"] != PENDING_REVIEW:
        raise Conflict(
            f"cannot {action} a template proposal that is {row['proposal_state']}",
            code="ILLEGAL_STATE",
            detail={"current_state": row["proposal_state"], "allowed_states": [PENDING_REVIEW]},
        )
    return row


async def _decide(
    tx: Tx,
    row: dict[str, Any],
    state: str,
    *,
    actor: str,
    note: str | None,
    template_version_id: object = None,
    **audit_detail: Any,
) -> dict[str, Any]:
    """Record a decision on a locked PENDING_REVIEW proposal, with its audit row."""
    decided = await tx.fetchrow(
        SQL.decide_proposal,
        {
            "proposal_id": row["id"],
            "proposal_state": state,
            "actor": actor,
            "note": note,
            "template_version_id": template_version_id,
        },
    )
    assert decided is not None  # the row is locked and was PENDING_REVIEW
    await record_audit(
        tx,
        actor=actor,
        action=f"template_proposal.{state.lower()}",
        object_type=OBJECT_TYPE,
        object_id=row["id"],
        detail={"template_key": row["template_key"], **audit_detail, "note": note},
    )
    return decided


async def approve_proposal(
    db: Database,
    proposal_id: object,
    *,
    actor: str,
    note: str | None = None,
    max_nodes: int = templates.DEFAULT_TEMPLATE_MAX_NODES,
    providers: ProviderRegistry | None = None,
) -> dict[str, Any]:
    """PENDING_REVIEW → APPROVED and the new template version, in one transaction;
    a graph the registered executors cannot run is refused (422) and the
    proposal stays PENDING_REVIEW."""
    note = _note(note)
    async with db.transaction() as tx:
        row = await _pending(tx, proposal_id, "approve")
        if row["past_deadline"]:
            raise Conflict(
                "the review window of this template proposal has passed",
                code="PROPOSAL_EXPIRED",
                detail={
                    "current_state": row["proposal_state"],
                    "expires_at": row["expires_at"].isoformat(),
                },
            )
        if row["proposed_by"] == actor:
            raise Forbidden(
                "four-eyes: the principal who proposed a template version cannot approve it",
                code="FOUR_EYES",
                detail={"proposed_by": row["proposed_by"]},
            )
        try:
            version = await templates.create_template_version_in(
                tx,
                template_key=row["template_key"],
                name=row["name"],
                description=row["description"],
                graph=row["graph"],
                risk_controls=row["risk_controls"],
                actor=actor,
                max_nodes=max_nodes,
                providers=providers,
            )
        except PlanError as exc:  # the plan rules changed since it was proposed
            raise _plan_error(exc) from None
        decided = await _decide(
            tx,
            row,
            "APPROVED",
            actor=actor,
            note=note,
            template_version_id=version["template_version_id"],
            version=version["version"],
            graph_hash=version["graph_hash"],
            proposed_by=row["proposed_by"],
        )
        decided["template_version"] = version
        return decided


async def reject_proposal(
    db: Database, proposal_id: object, *, actor: str, note: str | None = None
) -> dict[str, Any]:
    """PENDING_REVIEW → REJECTED (the proposer may reject, i.e. withdraw, their own)."""
    note = _note(note)
    async with db.transaction() as tx:
        row = await _pending(tx, proposal_id, "reject")
        return await _decide(tx, row, "REJECTED", actor=actor, note=note)


async def get_proposal(db: Database, proposal_id: object) -> dict[str, Any]:
    pid = _proposal_uuid(proposal_id)
    row = await db.fetchrow(SQL.get_proposal, {"proposal_id": pid})
    if row is None:
        raise NotFound(f"template proposal {pid} not found", detail={"proposal_id": str(pid)})
    return row


async def list_proposals(
    db: Database, *, state: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    if state is not None and state not in STATES:
        raise InvalidInput(
            f"unknown proposal state {state!r}; one of {', '.join(sorted(STATES))}",
            detail={"field": "state"},
        )
    if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}", detail={"field": "limit"})
    return await db.fetch(SQL.list_proposals, {"state": state, "limit": limit})


# ------------------------------------------------------------------ worker


async def expire_template_proposals(ctx: ServiceContext) -> int:
    """The template_proposal_expiration pass: stale PENDING_REVIEW → EXPIRED, audited."""
    async with ctx.db.transaction() as tx:
        expired = await tx.fetch(SQL.expire_due, {"limit": ctx.settings.expiration_batch_size})
        for row in expired:
            await record_audit(
                tx,
                actor=EXPIRATION_ACTOR,
                action="template_proposal.expired",
                object_type=OBJECT_TYPE,
                object_id=row["id"],
                detail={
                    "template_key": row["template_key"],
                    "expires_at": row["expires_at"].isoformat(),
                },
            )
    return len(expired)


async def next_due(ctx: ServiceContext) -> datetime | None:
    """The earliest expires_at among PENDING_REVIEW proposals."""
    # timestamptz or NULL
    value: datetime | None = await ctx.db.fetchval(SQL.next_due)
    return value
