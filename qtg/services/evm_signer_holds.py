"""Signer holds, the operators' side (issue 43): list them, clear one.

Placing and checking a hold is the chain executors' business and lives on their
floor (qtg.providers.evm.holds: `place`, `check`, `active`; its docstring is the
API). Here: what a person does about one. A cleared hold lets the signer's lanes
sign again (their waiting nodes are picked up at their next retry) and resolves
the hold's critical page; the clearing is audited with the person's evidence.
Queries: sql/evm_signer_holds/.
"""

from __future__ import annotations

from typing import Any

from qtg.db import Database, sql_family
from qtg.providers.evm import holds as _holds
from qtg.services.auditing import record_audit
from qtg.services.errors import Conflict, Forbidden, InvalidInput, NotFound

SQL = sql_family(
    "evm_signer_holds", "list", "clear", "get", "get_for_clear", "propose_clear", "confirm_clear"
)

#: Re-exported for services and the runtime: one API, see qtg.providers.evm.holds.
place_hold = _holds.place
check_hold = _holds.check
active_holds = _holds.active

MAX_LIST = 200


async def list_holds(
    db: Database, *, active_only: bool = True, address: str | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    """Holds, newest first (only the active ones unless `active_only=False`)."""
    if not 1 <= limit <= MAX_LIST:
        raise InvalidInput(f"limit must be 1..{MAX_LIST}", detail={"field": "limit"})
    rows = await db.fetch(
        SQL.list, {"active_only": active_only, "address": address, "limit": limit}
    )
    return [dict(r) for r in rows]


async def clear_hold(db: Database, hold_id: int, *, actor: str, evidence: str) -> dict[str, Any]:
    """A person clears an active hold, saying why it is safe to sign again (the key is
    the signer's alone, the ledger was reconciled); audited, its page resolved.
    NotFound: no such hold; Conflict (HOLD_ALREADY_CLEARED): cleared before."""
    if not isinstance(evidence, str) or not evidence.strip() or len(evidence) > 2000:
        raise InvalidInput(
            "evidence must be a non-empty string of at most 2000 characters "
            "(why the signer may sign again)",
            detail={"field": "evidence"},
        )
    async with db.transaction() as tx:
        row = await tx.fetchrow(
            SQL.clear, {"id": hold_id, "actor": actor, "evidence": evidence.strip()}
        )
        if row is None:
            existing = await tx.fetchrow(SQL.get, {"id": hold_id})
            if existing is None:
                raise NotFound(f"signer hold {hold_id} not found", detail={"hold_id": hold_id})
            raise Conflict(
                f"signer hold {hold_id} was cleared already",
                code="HOLD_ALREADY_CLEARED",
                detail={"hold_id": hold_id, "cleared_by": existing["cleared_by"]},
            )
        await record_audit(
            tx,
            actor=actor,
            action="evm_signer_hold.cleared",
            object_type="evm_signer_hold",
            object_id=hold_id,
            detail={
                "chain_id": row["chain_id"],
                "address": row["address"],
                "reason": row["reason"],
                "evidence": evidence.strip(),
            },
        )
    return dict(row)


async def request_clear(
    db: Database, hold_id: int, *, actor: str, evidence: str
) -> tuple[dict[str, Any], bool]:
    """The operators' way to clear a hold, four-eyes (issue 43 item 2): the first call
    proposes it with the evidence (nothing cleared: False), a call by a different
    principal confirms it (the hold ends, its page is resolved: True). Both audited.
    NotFound; Conflict HOLD_ALREADY_CLEARED; Forbidden FOUR_EYES (the proposer again)."""
    text = _evidence(evidence)
    async with db.transaction() as tx:
        hold = await tx.fetchrow(SQL.get_for_clear, {"id": hold_id})
        if hold is None:
            raise NotFound(f"signer hold {hold_id} not found", detail={"hold_id": hold_id})
        if hold["cleared_at"] is not None:
            raise Conflict(
                f"signer hold {hold_id} was cleared already",
                code="HOLD_ALREADY_CLEARED",
                detail={"hold_id": hold_id, "cleared_by": hold["cleared_by"]},
            )
        args = {"id": hold_id, "actor": actor, "evidence": text}
        audit = {"chain_id": hold["chain_id"], "address": hold["address"], "evidence": text}
        if hold["clear_proposed_by"] is None:
            row = await tx.fetchrow(SQL.propose_clear, args)
            assert row is not None  # locked above: active, no proposal
            await record_audit(
                tx, actor=actor, action="evm_signer_hold.clear_proposed",
                object_type="evm_signer_hold", object_id=hold_id,
                detail={**audit, "reason": hold["reason"]},
            )  # fmt: skip
            return dict(row), False
        if hold["clear_proposed_by"] == actor:
            raise Forbidden(
                "four-eyes: the principal who proposed clearing a hold cannot confirm it",
                code="FOUR_EYES",
                detail={"hold_id": hold_id, "proposed_by": actor},
            )
        row = await tx.fetchrow(SQL.confirm_clear, args)
        assert row is not None
        await record_audit(
            tx, actor=actor, action="evm_signer_hold.cleared",
            object_type="evm_signer_hold", object_id=hold_id,
            detail={**audit, "reason": hold["reason"], "proposed_by": hold["clear_proposed_by"]},
        )  # fmt: skip
    return dict(row), True


def _evidence(evidence: object) -> str:
    if not isinstance(evidence, str) or not evidence.strip() or len(evidence) > 2000:
        raise InvalidInput(
            "evidence must be a non-empty string of at most 2000 characters "
            "(why the signer may sign again)",
            detail={"field": "evidence"},
        )
    return evidence.strip()
