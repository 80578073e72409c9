"""Template proposals: create, approve (→ new template version), reject, expire (reference §8)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from sidecar_fixtures import GRAPH, context, make_settings

from qtg.config import Settings
from qtg.db import Database, Query
from qtg.services.context import ServiceContext
from qtg.services.errors import Conflict, Forbidden, InvalidInput, NotFound
from qtg.services.proposals import (
    approve_proposal,
    create_proposal,
    expire_template_proposals,
    get_proposal,
    list_proposals,
    next_due,
    reject_proposal,
)
from qtg.services.templates import create_template

VERSIONS = Query(
    "test/versions",
    "SELECT v.id, v.version, v.status, v.created_by, v.graph_hash FROM template_versions v"
    " JOIN movement_templates t ON t.id = v.template_id WHERE t.template_key = %(key)s"
    " ORDER BY v.version",
)
AUDIT = Query(
    "test/proposal_audit",
    "SELECT actor, action, object_type, object_id, detail FROM audit_outbox ORDER BY id",
)
BACKDATE = Query(
    "test/backdate_proposal",
    "UPDATE template_proposals SET expires_at = now() - interval '1 second'"
    " WHERE id = ANY(%(ids)s::uuid[])",
)
LOCK = Query("test/lock_proposal", "SELECT 1 FROM template_proposals WHERE id = %(id)s FOR UPDATE")

GRAPH_V2 = {
    "nodes": [
        {"key": "confirm", "kind": "manual", "action_type": "manual_confirm"},
        {"key": "again", "kind": "manual", "action_type": "manual_confirm"},
    ],
    "edges": [["confirm", "again"]],
}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, template_proposal_ttl_seconds=3600.0)


@pytest.fixture
def ctx(db: Database, settings: Settings) -> ServiceContext:
    return context(db, settings)


async def propose(ctx: ServiceContext, key: str = "payout", **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "template_key": key,
        "name": "Payout",
        "description": "weekly payout",
        "graph": GRAPH,
        "risk_controls": {"max_amount": "1000"},
        "actor": "op:alice",
    }
    args.update(kw)
    return await create_proposal(ctx.db, ctx.settings, **args)


async def test_create_is_pending_with_deadline_and_audit(ctx: ServiceContext) -> None:
    proposal = await propose(ctx)
    assert proposal["proposal_state"] == "PENDING_REVIEW"
    assert proposal["proposed_by"] == "op:alice"
    assert (proposal["expires_at"] - proposal["created_at"]).total_seconds() == 3600
    assert proposal["graph"] == GRAPH
    [audit] = await ctx.db.fetch(AUDIT)
    assert (audit["actor"], audit["action"], audit["object_id"]) == (
        "op:alice",
        "template_proposal.created",
        str(proposal["id"]),
    )
    assert len(audit["detail"]["graph_hash"]) == 64
    assert await get_proposal(ctx.db, proposal["id"]) == proposal
    assert await list_proposals(ctx.db, state="PENDING_REVIEW") == [proposal]
    assert await list_proposals(ctx.db, state="APPROVED") == []
    with pytest.raises(InvalidInput) as caught:
        await list_proposals(ctx.db, state="NOPE")
    assert caught.value.detail["field"] == "state"


async def test_create_refuses_an_invalid_graph_naming_the_path(ctx: ServiceContext) -> None:
    bad = {"nodes": [{"key": "confirm", "kind": "teleport", "action_type": "manual_confirm"}]}
    with pytest.raises(InvalidInput) as caught:
        await propose(ctx, graph=bad)
    assert caught.value.detail["field"] == "graph"
    assert caught.value.detail["path"].startswith("nodes[0]")
    assert "nodes[0]" in caught.value.message
    assert await list_proposals(ctx.db) == []
    assert await ctx.db.fetch(AUDIT) == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"template_key": "Not A Key"}, "template_key"),
        ({"name": " "}, "name"),
        ({"risk_controls": ["no"]}, "risk_controls"),
        ({"description": 7}, "description"),
    ],
)
async def test_create_refuses_bad_fields(
    ctx: ServiceContext, change: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        await propose(ctx, **change)
    assert caught.value.detail["field"] == field


async def test_approve_creates_the_version_in_the_same_transaction(ctx: ServiceContext) -> None:
    proposal = await propose(ctx)
    decided = await approve_proposal(ctx.db, proposal["id"], actor="admin:bob", note="lgtm")
    assert decided["proposal_state"] == "APPROVED"
    assert (decided["reviewed_by"], decided["review_note"]) == ("admin:bob", "lgtm")
    [version] = await ctx.db.fetch(VERSIONS, {"key": "payout"})
    assert decided["template_version_id"] == version["id"]
    assert decided["template_version"]["version"] == 1
    assert (version["status"], version["created_by"]) == ("ACTIVE", "admin:bob")
    actions = [(a["actor"], a["action"]) for a in await ctx.db.fetch(AUDIT)]
    assert actions == [
        ("op:alice", "template_proposal.created"),
        ("admin:bob", "template.version_created"),
        ("admin:bob", "template_proposal.approved"),
    ]

    with pytest.raises(Conflict) as caught:
        await approve_proposal(ctx.db, proposal["id"], actor="admin:carol")
    assert caught.value.detail["current_state"] == "APPROVED"
    with pytest.raises(Conflict):
        await reject_proposal(ctx.db, proposal["id"], actor="admin:carol")
    assert len(await ctx.db.fetch(VERSIONS, {"key": "payout"})) == 1


async def test_approving_a_proposal_for_an_existing_template_adds_a_version(
    ctx: ServiceContext,
) -> None:
    await create_template(ctx.db, template_key="payout", name="Payout", graph=GRAPH, actor="a:x")
    proposal = await propose(ctx, graph=GRAPH_V2)
    await approve_proposal(ctx.db, proposal["id"], actor="admin:bob")
    versions = await ctx.db.fetch(VERSIONS, {"key": "payout"})
    assert [(v["version"], v["status"]) for v in versions] == [(1, "RETIRED"), (2, "ACTIVE")]


async def test_proposer_cannot_approve_their_own(ctx: ServiceContext) -> None:
    proposal = await propose(ctx)
    with pytest.raises(Forbidden) as caught:
        await approve_proposal(ctx.db, proposal["id"], actor="op:alice")
    assert caught.value.detail["proposed_by"] == "op:alice"
    assert (await get_proposal(ctx.db, proposal["id"]))["proposal_state"] == "PENDING_REVIEW"
    assert await ctx.db.fetch(VERSIONS, {"key": "payout"}) == []
    # ...but may withdraw it
    decided = await reject_proposal(ctx.db, proposal["id"], actor="op:alice", note="withdrawn")
    assert decided["proposal_state"] == "REJECTED"


async def test_reject_records_reviewer_and_audit(ctx: ServiceContext) -> None:
    proposal = await propose(ctx)
    decided = await reject_proposal(ctx.db, proposal["id"], actor="admin:bob", note="too risky")
    assert (decided["proposal_state"], decided["reviewed_by"], decided["review_note"]) == (
        "REJECTED",
        "admin:bob",
        "too risky",
    )
    assert decided["template_version_id"] is None
    audit = (await ctx.db.fetch(AUDIT))[-1]
    assert (audit["action"], audit["detail"]["note"]) == ("template_proposal.rejected", "too risky")
    with pytest.raises(Conflict) as caught:
        await approve_proposal(ctx.db, proposal["id"], actor="admin:carol")
    assert caught.value.detail["current_state"] == "REJECTED"
    assert await ctx.db.fetch(VERSIONS, {"key": "payout"}) == []


async def test_unknown_or_malformed_ids_are_not_found(ctx: ServiceContext) -> None:
    for bad in (uuid.uuid4(), "not-a-uuid"):
        with pytest.raises(NotFound):
            await approve_proposal(ctx.db, bad, actor="admin:bob")
        with pytest.raises(NotFound):
            await reject_proposal(ctx.db, bad, actor="admin:bob")
        with pytest.raises(NotFound):
            await get_proposal(ctx.db, bad)


async def test_approval_after_the_deadline_is_refused(ctx: ServiceContext) -> None:
    proposal = await propose(ctx)
    await ctx.db.execute(BACKDATE, {"ids": [proposal["id"]]})
    with pytest.raises(Conflict) as caught:
        await approve_proposal(ctx.db, proposal["id"], actor="admin:bob")
    assert caught.value.code == "PROPOSAL_EXPIRED"
    assert await ctx.db.fetch(VERSIONS, {"key": "payout"}) == []


async def test_two_reviewers_racing_create_one_version(dsn: str, settings: Settings) -> None:
    async with Database(dsn) as db_a, Database(dsn) as db_b:
        proposal = await propose(context(db_a, settings))
        outcomes: list[str] = []

        async def review(db: Database, actor: str) -> None:
            try:
                await approve_proposal(db, proposal["id"], actor=actor)
                outcomes.append("approved")
            except Conflict as exc:
                assert exc.detail["current_state"] == "APPROVED"
                outcomes.append("conflict")

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(review, db_a, "admin:bob")
                nursery.start_soon(review, db_b, "admin:carol")
        assert sorted(outcomes) == ["approved", "conflict"]
        assert len(await db_a.fetch(VERSIONS, {"key": "payout"})) == 1


async def test_expiration_pass_expires_stale_proposals_only(ctx: ServiceContext) -> None:
    stale = [(await propose(ctx, key=f"k{i}"))["id"] for i in range(3)]
    fresh = await propose(ctx, key="fresh")
    decided = await propose(ctx, key="decided")
    await reject_proposal(ctx.db, decided["id"], actor="admin:bob")
    await ctx.db.execute(BACKDATE, {"ids": [*stale, decided["id"]]})

    assert await expire_template_proposals(ctx) == 3
    assert await expire_template_proposals(ctx) == 0
    for pid in stale:
        assert (await get_proposal(ctx.db, pid))["proposal_state"] == "EXPIRED"
    assert (await get_proposal(ctx.db, fresh["id"]))["proposal_state"] == "PENDING_REVIEW"
    assert (await get_proposal(ctx.db, decided["id"]))["proposal_state"] == "REJECTED"
    expired_audit = [a for a in await ctx.db.fetch(AUDIT) if a["action"].endswith(".expired")]
    assert sorted(a["object_id"] for a in expired_audit) == sorted(str(p) for p in stale)
    assert {a["actor"] for a in expired_audit} == {"system:template_proposal_expiration"}
    with pytest.raises(Conflict) as caught:
        await approve_proposal(ctx.db, stale[0], actor="admin:bob")
    assert caught.value.detail["current_state"] == "EXPIRED"


async def test_expiration_skips_a_proposal_being_decided(ctx: ServiceContext) -> None:
    stale = await propose(ctx)
    await ctx.db.execute(BACKDATE, {"ids": [stale["id"]]})
    async with ctx.db.transaction() as reviewer:
        await reviewer.fetch(LOCK, {"id": stale["id"]})
        with trio.fail_after(5):
            assert await expire_template_proposals(ctx) == 0
    assert await expire_template_proposals(ctx) == 1


async def test_next_due_is_the_earliest_pending_deadline(ctx: ServiceContext) -> None:
    assert await next_due(ctx) is None
    first = await propose(ctx, key="a")
    second = await propose(ctx, key="b")
    assert await next_due(ctx) == first["expires_at"]
    await reject_proposal(ctx.db, first["id"], actor="admin:bob")
    assert await next_due(ctx) == second["expires_at"]
