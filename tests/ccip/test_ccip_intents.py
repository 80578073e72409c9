"""ccip_send_intents' state machine lives in the database (migration 0015), like the
node states: every writer, a hand-written UPDATE included, obeys it."""

from __future__ import annotations

import psycopg
import pytest

from ccip.flow import intent, nodes
from ccip.local import Local
from qtg.db import Database
from qtg.domain.ccip import IntentState
from qtg.providers.ccip import intents

ADDR = "0x" + "12" * 20
MID = "0x" + "ab" * 32
#: addresses only: these tests never touch a chain
LOCAL = Local(simulator=ADDR, router=ADDR, bnm=ADDR, lnm=ADDR, receiver=ADDR)


def transitions(dsn: str) -> set[tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        return set(conn.execute("SELECT from_state, to_state FROM ccip_send_intent_transitions"))


def test_every_state_is_reachable_and_final_states_stay_final(dsn: str) -> None:
    allowed = transitions(dsn)
    states = {s.value for s in IntentState}
    assert {f for f, _ in allowed} | {t for _, t in allowed} == states
    reached = {"pending"}
    while more := {t for f, t in allowed if f in reached} - reached:
        reached |= more
    assert reached == states  # nothing declared that nothing can reach
    for final in ("success", "failure", "reverted", "released"):
        assert not [t for f, t in allowed if f == final], final


async def test_the_database_refuses_an_unlisted_transition(dsn: str, db: Database) -> None:
    [node] = await nodes(db, LOCAL, 1)
    row = await intent(db, LOCAL, node, tx_hash=MID, nonce=0, sender=ADDR)
    again = await intent(db, LOCAL, node, tx_hash=MID, nonce=0, sender=ADDR)
    assert again["id"] == row["id"]  # the write-ahead is idempotent on its key
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.DatabaseError) as refused:
            conn.execute("UPDATE ccip_send_intents SET state = 'success', message_id = %s", (MID,))
        assert refused.value.sqlstate == "QT001"
        with pytest.raises(psycopg.errors.CheckViolation):  # sent means a message id
            conn.execute("UPDATE ccip_send_intents SET state = 'sent'")
        with pytest.raises(psycopg.DatabaseError, match="must be created pending"):
            conn.execute(
                "INSERT INTO ccip_send_intents (request_node_id, attempt_no, idempotency_key,"
                " lane, chain_id, source_selector, dest_selector, router, sender, receiver, token,"
                " amount, fee, nonce, tx_hash, state) VALUES (%s, 2, 'k2', 'l', 1, 1, 1, %s, %s,"
                " %s, %s, 1, 0, 0, %s, 'sent')",
                (node, ADDR, ADDR, ADDR, ADDR, MID),
            )
    # the service's move is conditional: from a state it does not name, nothing happens
    sent, pending = IntentState.SENT, IntentState.PENDING
    assert not await intents.move(db, row["id"], sent, (IntentState.BROADCAST,), message_id=MID)
    assert await intents.move(db, row["id"], sent, (pending,), message_id=MID)
    assert await intents.move(db, row["id"], IntentState.SUCCESS, intents.DELIVERABLE)
    assert not await intents.move(db, row["id"], IntentState.STRANDED, (sent,))
