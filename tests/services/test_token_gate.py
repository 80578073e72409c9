"""The token gate: a flood of unknown tokens costs a few small reads, not a query each
(issue 44), while a token made a moment ago by another process works at once and a
revoked one stops at once. Real PostgreSQL; requests race on one pool."""

from __future__ import annotations

import secrets

import trio

from qtg.db import Database
from qtg.services import tokens
from qtg.services.tokens import TokenGate, token_gate


class CountingGate(TokenGate):
    """The real gate, counting its reads of the live hashes."""

    reads = 0

    async def _read(self) -> None:
        self.reads += 1
        await super()._read()


async def test_a_thousand_unknown_tokens_cost_a_few_reads(db: Database) -> None:
    gate = CountingGate(db)
    tokens._GATES[db] = gate
    refused = 0

    async def one() -> None:
        nonlocal refused
        if await tokens.authenticate(db, "qtg_" + secrets.token_urlsafe(32)) is None:
            refused += 1

    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(1_000):
            nursery.start_soon(one)
    took = trio.current_time() - started
    assert refused == 1_000
    # one read per MIN_REFRESH_SECONDS at most, plus the first
    assert gate.reads <= 2 + took / TokenGate.MIN_REFRESH_SECONDS, (gate.reads, took)
    assert gate.reads < 50


async def test_a_token_made_by_another_process_works_at_once(db: Database, dsn: str) -> None:
    # the gate has read the (empty) set just now
    assert await tokens.authenticate(db, "qtg_" + secrets.token_urlsafe(32)) is None
    async with Database(dsn, min_size=1, max_size=1) as other:  # another pool: no forget()
        made = await tokens.create_token(other, name="carol", role="operator", actor="test")
    principal = await tokens.authenticate(db, made["token"])
    assert principal is not None and principal.name == "carol"


async def test_a_revoked_token_stops_at_once_though_the_gate_knows_it(db: Database) -> None:
    made = await tokens.create_token(db, name="dave", role="viewer", actor="test")
    assert await tokens.authenticate(db, made["token"]) is not None
    assert await token_gate(db).may_be_live(tokens.hash_token(made["token"]))
    await tokens.revoke_token(db, name="dave", actor="test")
    assert await tokens.authenticate(db, made["token"]) is None
