"""CCIP send intents: the store the ccip executor writes ahead of every ccipSend.

A send intent (`ccip_send_intents`, migrations/0015_ccip.sql) is the write-ahead row
of one ccipSend: committed before the broadcast with the lane, token, amount, fee,
nonce and the signed transaction's hash, then moved on with the message id (`sent`)
and the destination's execution state. Every move names the states it may leave,
and the database refuses a transition it does not list. ccip_stranded_reaper
(qtg/services/ccip.py) resolves the ones left behind. The queries live in sql/ccip/.
"""

from __future__ import annotations

from typing import Any

from qtg.db import Database, Tx, sql_family
from qtg.domain.ccip import Execution, IntentState

SQL = sql_family("ccip", "insert_intent", "for_attempt", "for_message", "move", "resolve_stranded")

S = IntentState
UNRESOLVED = (S.PENDING, S.BROADCAST)
#: an intent may take its message id from these states
SENDABLE = (S.PENDING, S.BROADCAST, S.STRANDED)
#: a sent message's execution may be recorded from these states
DELIVERABLE = (S.SENT, S.STRANDED, S.MANUAL_EXECUTION_NEEDED)


async def write_intent(db: Database, **fields: Any) -> dict[str, Any]:
    """The write-ahead row (committed on return); the existing one for a repeated key."""
    async with db.transaction() as tx:
        row = await tx.fetchrow(SQL.insert_intent, fields)
    assert row is not None  # inserted, or the existing row of the key
    return dict(row)


async def for_attempt(
    db: Database, *, request_node_id: str, attempt_no: int
) -> dict[str, Any] | None:
    async with db.transaction() as tx:
        row = await tx.fetchrow(
            SQL.for_attempt, {"request_node_id": request_node_id, "attempt_no": attempt_no}
        )
    return dict(row) if row is not None else None


async def move(
    db_or_tx: Database | Tx,
    intent_id: int,
    state: IntentState,
    from_states: tuple[IntentState, ...],
    **fields: Any,
) -> bool:
    """Move an intent to `state` if it is in one of `from_states`; True when this call did."""
    args = {
        "id": intent_id,
        "state": state.value,
        "from_states": [s.value for s in from_states],
        "message_id": fields.get("message_id"),
        "block_number": fields.get("block_number"),
        "dest_tx_hash": fields.get("dest_tx_hash"),
        "state_detail": fields.get("state_detail"),
    }
    if isinstance(db_or_tx, Tx):
        return await _move(db_or_tx, intent_id, state, args)
    async with db_or_tx.transaction() as tx:
        return await _move(tx, intent_id, state, args)


async def _move(tx: Tx, intent_id: int, state: IntentState, args: dict[str, Any]) -> bool:
    if await tx.fetchrow(SQL.move, args) is None:
        return False
    if state is not S.STRANDED and S.STRANDED in args["from_states"]:
        # it was (maybe) stranded and the chain has answered since: the page is over
        await tx.fetchval(SQL.resolve_stranded, {"dedupe_key": stranded_dedupe_key(intent_id)})
    return True


def stranded_dedupe_key(intent_id: int) -> str:
    """The notification of a stranded intent (sql/ccip/strand.sql raises it)."""
    return f"ccip_stranded:{intent_id}"


async def record_execution(
    db: Database,
    intent_id: int | None,
    message_id: str,
    execution: Execution,
    dest_tx_hash: str | None,
) -> None:
    """The destination's execution state of a message, on its intent: the send's own
    intent when the caller knows it (Chainlink Local's ids repeat for equal messages),
    else the one carrying the message id."""
    async with db.transaction() as tx:
        if intent_id is None:
            row = await tx.fetchrow(SQL.for_message, {"message_id": message_id})
            if row is None:
                return
            intent_id = row["id"]
        await move(
            tx, intent_id, IntentState(execution.value), DELIVERABLE, dest_tx_hash=dest_tx_hash
        )
