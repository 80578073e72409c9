"""The human operations: idempotent create, four-eyes, decisions only from the
states that allow them, and every one leaving its audit row."""

from __future__ import annotations

import pytest
import trio

from qtg.db import Query
from qtg.domain.plan import PlanError
from qtg.services.context import ServiceContext
from qtg.services.errors import Conflict, Forbidden, IdempotencyConflict, InvalidInput, NotFound
from qtg.services.movements import (
    approve_movement,
    cancel_movement,
    complete_manual_node,
    create_movement,
    get_movement,
    list_movements,
    reject_movement,
    resume_movement,
    retry_node,
)
from qtg.services.templates import get_template

from .helpers import Q, drive, movement, node, states, template

INTENT = {"asset": "USDC", "amount": "10", "destination": "0xabc"}


async def _create(svc: ServiceContext, key: str, intent: dict | None = None, actor: str = "alice"):
    return await create_movement(
        svc.db,
        svc.settings,
        template_key="one",
        intent=intent or INTENT,
        input_params={},
        idempotency_key=key,
        actor=actor,
    )


@pytest.fixture
async def one(svc: ServiceContext) -> ServiceContext:
    await template(svc, "one", [node("withdraw", "cex_withdrawal")], [])
    return svc


async def test_same_idempotency_key_and_body_returns_the_same_movement(one: ServiceContext) -> None:
    first, created = await _create(one, "k-1")
    again, created_again = await _create(one, "k-1")
    assert (created, created_again) == (True, False)
    assert again["id"] == first["id"]
    with pytest.raises(IdempotencyConflict) as refused:
        await _create(one, "k-1", {**INTENT, "amount": "11"})
    assert refused.value.detail["request_id"] == str(first["id"])
    page, _ = await list_movements(one.db)
    assert len(page) == 1


async def test_concurrent_creates_with_one_key_make_one_movement(one: ServiceContext) -> None:
    results: list[tuple[dict, bool]] = []

    async def create() -> None:
        results.append(await _create(one, "race"))

    async with trio.open_nursery() as nursery:
        for _ in range(6):
            nursery.start_soon(create)
    assert len({m["id"] for m, _ in results}) == 1
    assert sum(created for _, created in results) == 1


@pytest.mark.parametrize(
    ("intent", "field"),
    [
        ({"amount": "1", "destination": "x"}, "intent.asset"),
        ({**INTENT, "amount": 10}, "intent.amount"),
        ({**INTENT, "amount": 10.5}, "intent.amount"),
        ({**INTENT, "amount": "-1"}, "intent.amount"),
        ({**INTENT, "amount": "NaN"}, "intent.amount"),
        ({**INTENT, "amount": "ten"}, "intent.amount"),
        ({**INTENT, "destination": ""}, "intent.destination"),
    ],
)
async def test_bad_intents_are_refused_naming_the_field(
    one: ServiceContext, intent: dict, field: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        await _create(one, "bad", intent)
    assert refused.value.detail["field"] == field
    assert (await list_movements(one.db))[0] == []


async def test_unknown_template_is_not_found(svc: ServiceContext) -> None:
    with pytest.raises(NotFound):
        await _create(svc, "k")


async def test_creator_cannot_approve(one: ServiceContext) -> None:
    m, _ = await _create(one, "k")
    with pytest.raises(Forbidden) as refused:
        await approve_movement(one.db, m["id"], actor="alice")
    assert refused.value.code == "FOUR_EYES"
    assert (await get_movement(one.db, m["id"]))["request_state"] == "PENDING_APPROVAL"
    # and the database refuses it too, whatever the code path
    with pytest.raises(Exception, match="movement_requests_check"):
        await one.db.execute(
            Query("tests/self-approve", "UPDATE movement_requests SET approved_by = created_by")
        )


async def test_illegal_decisions_are_conflicts_with_the_current_state(one: ServiceContext) -> None:
    m = await movement(one, "one")
    done = await drive(one, m["id"])
    assert done["request_state"] == "COMPLETED"
    for decide in (
        lambda: approve_movement(one.db, m["id"], actor="bob"),
        lambda: reject_movement(one.db, m["id"], actor="bob"),
        lambda: cancel_movement(one.db, m["id"], actor="bob"),
        lambda: resume_movement(one.db, m["id"], actor="bob"),
        lambda: retry_node(one.db, m["id"], "withdraw", actor="bob"),
    ):
        with pytest.raises(Conflict) as refused:
            await decide()
        assert refused.value.detail["current_state"] == "COMPLETED"
    assert (await get_movement(one.db, m["id"]))["request_state"] == "COMPLETED"


async def test_reject_and_cancel_end_a_pending_movement(one: ServiceContext) -> None:
    a, _ = await _create(one, "a")
    b, _ = await _create(one, "b")
    rejected = await reject_movement(one.db, a["id"], actor="bob", reason="wrong amount")
    assert rejected["request_state"] == "REJECTED"
    cancelled = await cancel_movement(one.db, b["id"], actor="alice")
    assert cancelled["request_state"] == "CANCELLED"
    assert states(cancelled) == {"withdraw": "SKIPPED"}
    audit = await one.db.fetch(Q["audit"], {"oid": str(a["id"])})
    assert audit[-1]["action"] == "movement.rejected"
    assert audit[-1]["detail"] == {"reason": "wrong amount"}


async def test_cancel_is_refused_while_money_may_be_moving(svc: ServiceContext) -> None:
    await template(
        svc,
        "slow",
        [node("withdraw", "cex_withdrawal",
              sandbox={"observations_to_complete": 100, "retry_after_seconds": 60})],
        [],
    )  # fmt: skip
    m = await movement(svc, "slow")
    await drive(svc, m["id"], stop=frozenset({"EXECUTING"}))
    with pytest.raises(Conflict) as refused:
        await cancel_movement(svc.db, m["id"], actor="bob")
    assert refused.value.code == "NODES_IN_FLIGHT"
    assert refused.value.detail["nodes"] == ["withdraw"]
    assert (await get_movement(svc.db, m["id"]))["request_state"] == "EXECUTING"


async def test_resume_lets_recovery_sweep_an_unknown_node_again(svc: ServiceContext) -> None:
    # withdraw moved money; the bridge's status cannot be told (observe_unknown):
    # MANUAL_INTERVENTION, and recovery leaves it alone until an operator resumes.
    await template(
        svc,
        "stuck",
        [node("withdraw", "cex_withdrawal"),
         node("bridge", "ccip_send", sandbox={"fail": "observe_unknown"})],
        [["withdraw", "bridge"]],
    )  # fmt: skip
    m = await movement(svc, "stuck")
    stuck = await drive(svc, m["id"])
    assert stuck["request_state"] == "MANUAL_INTERVENTION"
    assert states(stuck)["bridge"] == "UNKNOWN"
    assert (await drive(svc, m["id"]))["request_state"] == "MANUAL_INTERVENTION"

    resumed = await resume_movement(svc.db, m["id"], actor="ops")
    assert resumed["request_state"] == "EXECUTING"
    done = await drive(svc, m["id"])
    # the sandbox's deeper lookup finds the send completed
    assert done["request_state"] == "COMPLETED"
    audit = await svc.db.fetch(Q["audit"], {"oid": str(m["id"])})
    assert ("movement.resumed", "ops") in [(a["action"], a["actor"]) for a in audit]


async def test_list_movements_pages_with_a_cursor(one: ServiceContext) -> None:
    made = [(await _create(one, f"p{i}"))[0]["id"] for i in range(5)]
    seen: list = []
    cursor = None
    while True:
        page, cursor = await list_movements(one.db, limit=2, cursor=cursor)
        seen.extend(m["id"] for m in page)
        if cursor is None:
            break
    assert seen == list(reversed(made))
    with pytest.raises(InvalidInput):
        await list_movements(one.db, cursor="garbage")
    with pytest.raises(InvalidInput):
        await list_movements(one.db, state="NOPE")
    pending, _ = await list_movements(one.db, state="PENDING_APPROVAL", template_key="one")
    assert len(pending) == 5


async def test_template_versions_and_invalid_graphs(svc: ServiceContext) -> None:
    v1 = await template(svc, "t", [node("a", "cex_withdrawal")], [])
    v2 = await template(
        svc, "t", [node("a", "cex_withdrawal"), node("b", "cctp_burn")], [["a", "b"]]
    )
    assert (v1["version"], v2["version"]) == (1, 2)
    current = await get_template(svc.db, "t")
    assert current["version"] == 2
    with pytest.raises(PlanError) as bad:
        await template(svc, "t", [node("a", "cex_withdrawal")], [["a", "ghost"]])
    assert bad.value.path == "edges[0]"
    assert (await get_template(svc.db, "t"))["version"] == 2
    with pytest.raises(InvalidInput):
        await template(svc, "Bad Key", [node("a", "cex_withdrawal")], [])


async def test_cancel_after_a_completed_side_effect_is_refused_naming_the_nodes(
    svc: ServiceContext,
) -> None:
    # A bridge whose burn completed must not be cancelled: that would skip the
    # mint (burned, never minted) with no page. The manual gate in between holds
    # the movement in WAITING_MANUAL_ACTION with the burn done.
    await template(
        svc,
        "bridge",
        [
            node("burn", "cctp_burn"),
            node("gate", "manual_confirm", kind="manual"),
            node("mint", "cctp_mint"),
        ],
        [["burn", "gate"], ["gate", "mint"]],
    )
    m = await movement(svc, "bridge")
    await drive(svc, m["id"], stop=frozenset({"WAITING_MANUAL_ACTION"}))
    with pytest.raises(Conflict) as refused:
        await cancel_movement(svc.db, m["id"], actor="bob")
    assert refused.value.code == "SIDE_EFFECTS_COMPLETED"
    assert refused.value.detail["nodes"] == ["burn"]
    after = await get_movement(svc.db, m["id"])
    assert after["request_state"] == "WAITING_MANUAL_ACTION"
    assert states(after) == {"burn": "COMPLETED", "gate": "READY", "mint": "BLOCKED"}

    # The creator alone may not complete the gate that releases the mint (four-eyes).
    with pytest.raises(Forbidden):
        await complete_manual_node(svc.db, m["id"], "gate", actor="alice")
    done = await complete_manual_node(svc.db, m["id"], "gate", actor="bob")
    assert states(done)["gate"] == "COMPLETED"
