"""expiration_checker (reference §5): PENDING_APPROVAL past expires_at → EXPIRED."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from sidecar_fixtures import context, ensure_template, make_settings, new_movement

from qtg.config import Settings
from qtg.db import Database, Query
from qtg.services.context import ServiceContext
from qtg.services.expiration import expire_pending_requests, next_due
from qtg.services.movements import approve_movement

BACKDATE = Query(
    "test/backdate",
    "UPDATE movement_requests SET expires_at = now() - interval '1 second'"
    " WHERE id = ANY(%(ids)s::uuid[])",
)
STATES = Query(
    "test/states",
    "SELECT id, request_state, decided_by FROM movement_requests WHERE id = ANY(%(ids)s::uuid[])",
)
EVENTS = Query(
    "test/expiry_events",
    "SELECT request_id, event_type, from_state, to_state FROM movement_events"
    " WHERE to_state = 'EXPIRED' ORDER BY id",
)
CALLBACKS = Query(
    "test/expiry_callbacks",
    "SELECT request_id, payload FROM movement_callback_outbox"
    " WHERE payload->>'to_state' = 'EXPIRED'",
)
AUDIT = Query(
    "test/expiry_audit",
    "SELECT actor, action, object_type, object_id FROM audit_outbox"
    " WHERE action = 'movement.expired' ORDER BY id",
)
LOCK_ONE = Query("test/lock_one", "SELECT id FROM movement_requests WHERE id = %(id)s FOR UPDATE")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
async def ctx(db: Database, settings: Settings) -> ServiceContext:
    await ensure_template(db)
    return context(db, settings)


async def movements(ctx: ServiceContext, n: int, **kw: Any) -> list[Any]:
    return [(await new_movement(ctx.db, ctx.settings, **kw))["id"] for _ in range(n)]


async def test_expires_due_requests_in_batches_of_twenty(ctx: ServiceContext) -> None:
    due = await movements(ctx, 25)
    fresh = await movements(ctx, 1)
    await ctx.db.execute(BACKDATE, {"ids": due})

    assert await expire_pending_requests(ctx) == 20
    assert await expire_pending_requests(ctx) == 5
    assert await expire_pending_requests(ctx) == 0

    states = {r["id"]: r for r in await ctx.db.fetch(STATES, {"ids": due + fresh})}
    assert {states[i]["request_state"] for i in due} == {"EXPIRED"}
    assert {states[i]["decided_by"] for i in due} == {"system:expiration_checker"}
    assert states[fresh[0]]["request_state"] == "PENDING_APPROVAL"
    events = await ctx.db.fetch(EVENTS)
    assert sorted(e["request_id"] for e in events) == sorted(due)
    assert {(e["event_type"], e["from_state"]) for e in events} == {
        ("request_state_changed", "PENDING_APPROVAL")
    }
    audit = await ctx.db.fetch(AUDIT)
    assert sorted(a["object_id"] for a in audit) == sorted(str(i) for i in due)
    assert {(a["actor"], a["object_type"]) for a in audit} == {
        ("system:expiration_checker", "movement")
    }


async def test_expiry_writes_a_callback_for_requests_with_a_callback_url(
    ctx: ServiceContext,
) -> None:
    [with_url] = await movements(ctx, 1, callback_url="https://example.com/hook")
    [without] = await movements(ctx, 1)
    await ctx.db.execute(BACKDATE, {"ids": [with_url, without]})
    assert await expire_pending_requests(ctx) == 2
    callbacks = await ctx.db.fetch(CALLBACKS)
    assert [c["request_id"] for c in callbacks] == [with_url]
    assert callbacks[0]["payload"]["from_state"] == "PENDING_APPROVAL"


async def test_only_pending_approval_requests_expire(ctx: ServiceContext) -> None:
    [approved] = await movements(ctx, 1)
    await approve_movement(ctx.db, approved, actor="op:bob")
    await ctx.db.execute(BACKDATE, {"ids": [approved]})
    assert await expire_pending_requests(ctx) == 0
    [row] = await ctx.db.fetch(STATES, {"ids": [approved]})
    assert row["request_state"] != "EXPIRED"


async def test_a_locked_request_is_skipped_not_waited_on(ctx: ServiceContext) -> None:
    locked, free = await movements(ctx, 2)
    await ctx.db.execute(BACKDATE, {"ids": [locked, free]})
    async with ctx.db.transaction() as other:  # e.g. an approval in progress
        await other.fetch(LOCK_ONE, {"id": locked})
        with trio.fail_after(5):
            assert await expire_pending_requests(ctx) == 1
    states = {
        r["id"]: r["request_state"] for r in await ctx.db.fetch(STATES, {"ids": [locked, free]})
    }
    assert states == {locked: "PENDING_APPROVAL", free: "EXPIRED"}
    assert await expire_pending_requests(ctx) == 1


async def test_two_checkers_race_without_double_expiry(dsn: str, settings: Settings) -> None:
    async with Database(dsn) as db_a, Database(dsn) as db_b:
        await ensure_template(db_a)
        ctx_a, ctx_b = context(db_a, settings), context(db_b, settings)
        ids = await movements(ctx_a, 45)
        await db_a.execute(BACKDATE, {"ids": ids})
        counts: list[int] = []

        async def drain(ctx: ServiceContext) -> None:
            while n := await expire_pending_requests(ctx):
                counts.append(n)

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain, ctx_a)
                nursery.start_soon(drain, ctx_b)
        assert sum(counts) == 45
        assert len(await db_a.fetch(EVENTS)) == 45
        assert len(await db_a.fetch(AUDIT)) == 45


async def test_next_due_is_the_earliest_pending_deadline(ctx: ServiceContext) -> None:
    assert await next_due(ctx) is None
    first, second = await movements(ctx, 2)
    due = await next_due(ctx)
    rows = await ctx.db.fetch(
        Query("test/expires", "SELECT id, expires_at FROM movement_requests ORDER BY expires_at")
    )
    assert due == rows[0]["expires_at"]
    await approve_movement(ctx.db, first, actor="op:bob")
    assert await next_due(ctx) == {r["id"]: r["expires_at"] for r in rows}[second]
