"""Issue 45 at dispatch: a policy-governed movement is decided again under the
accumulation ledger's lock and charged with its write-ahead; the one that would
cross a limit stays READY, waiting (and paging), and nothing of it is sent."""

from __future__ import annotations

from typing import Any

import pytest

from qtg.db import Query
from qtg.services import policies
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.errors import Forbidden
from qtg.services.movements import get_movement

from .helpers import eventually, movement, node, race_passes, template, with_settings

CAP: dict[str, Any] = {
    "rules": [
        {
            "name": "cap",
            "asset": "USDC",
            "accumulation": {"window_seconds": 3600, "scope": "overall", "gt": "250"},
            "action": "block",
        },
        {"name": "anywhere", "asset": "USDC", "destination": "any", "action": "allow"},
        {"name": "block-all", "action": "block"},
    ]
}
CHARGED = Query(
    "t/charged", "SELECT coalesce(sum(amount), 0) AS s, count(*) AS n FROM policy_charges"
)
SENT = Query("t/sent", "SELECT count(*) FROM sandbox_submissions")
WAITING = Query(
    "t/waiting",
    "SELECT node_state, error_code, dispatch_not_before IS NOT NULL AS waits"
    " FROM movement_request_nodes WHERE error_code = 'POLICY_LIMIT'",
)


async def activate(svc: ServiceContext, document: dict[str, Any]) -> int:
    proposed = await policies.propose_policy(svc.db, document=document, actor="admin")
    await policies.approve_policy(svc.db, proposed["version"], actor="admin2")
    return int(proposed["version"])


@pytest.mark.parametrize("batch_size", [1, 16])
async def test_the_movement_that_would_cross_the_cap_waits(
    svc: ServiceContext, batch_size: int
) -> None:
    svc = with_settings(svc, node_dispatch_batch_size=batch_size)
    await template(svc, "t.pay", [node("pay", "evm_transfer")], [])
    await activate(svc, CAP)
    for i in range(3):  # at creation nothing is charged yet: all three allowed
        await movement(svc, "t.pay", amount="100", key=f"pay-{i}")
    while await dispatch_ready_nodes(svc):
        pass
    charged = await svc.db.fetchrow(CHARGED)
    assert charged is not None and (charged["s"], charged["n"]) == (200, 2)
    assert await svc.db.fetchval(SENT) == 2
    [waiting] = await svc.db.fetch(WAITING)
    assert waiting == {"node_state": "READY", "error_code": "POLICY_LIMIT", "waits": True}
    # and a new movement that would cross it is refused at creation, naming the rule
    with pytest.raises(Forbidden) as info:
        await movement(svc, "t.pay", amount="60", key="pay-late")
    assert info.value.code == "POLICY_BLOCKED" and info.value.detail["rule"] == "cap"


CLAIMABLE = Query(
    "t/claimable",
    "SELECT count(*) FROM movement_request_nodes"
    " WHERE node_state = 'READY' AND dispatch_not_before IS NULL",
)


async def test_racing_dispatchers_never_pass_the_cap_together(
    svc: ServiceContext, dsn: str
) -> None:
    """Eight movements of 100 against a cap of 250, dispatched by four passes at
    once (each its own connections and transactions): exactly two go out."""
    svc = with_settings(svc, node_dispatch_batch_size=1)
    await template(svc, "t.race", [node("pay", "evm_transfer")], [])
    await activate(svc, CAP)
    for i in range(8):
        await movement(svc, "t.race", amount="100", key=f"race-{i}")
    _, overlapping = await race_passes(
        svc, dsn, svc.settings, dispatch_ready_nodes, more=CLAIMABLE, racers=4
    )
    assert overlapping > 1  # they raced
    charged = await svc.db.fetchrow(CHARGED)
    assert charged is not None and (charged["s"], charged["n"]) == (200, 2)
    assert await svc.db.fetchval(SENT) == 2
    assert len(await svc.db.fetch(WAITING)) == 6


async def test_a_rules_delay_holds_dispatch_until_it_has_run(svc: ServiceContext) -> None:
    delayed = {
        "rules": [
            {"name": "later", "destination": "any", "action": "allow", "delay_seconds": 1},
            {"name": "block-all", "action": "block"},
        ]
    }
    await template(svc, "t.later", [node("pay", "evm_transfer")], [])
    await activate(svc, delayed)
    m = await movement(svc, "t.later", amount="5", key="later")
    assert m["request_state"] == "APPROVED" and m["policy"]["delay_left_seconds"] > 0.5
    assert await dispatch_ready_nodes(svc) == 0  # held by the rule's delay
    assert await svc.db.fetchval(SENT) == 0

    async def sent() -> bool:
        await dispatch_ready_nodes(svc)
        return bool(await svc.db.fetchval(SENT))

    await eventually(sent, deadline=10)
    charged = await svc.db.fetchrow(CHARGED)
    assert charged is not None and (charged["s"], charged["n"]) == (5, 1)


async def test_a_movement_held_by_a_limit_pages_and_can_be_cancelled(svc: ServiceContext) -> None:
    from qtg.services.movements import cancel_movement
    from qtg.services.node_attention import raise_attention

    svc = with_settings(svc, node_dispatch_batch_size=1, node_transient_attention_seconds=0.3)
    await template(svc, "t.page", [node("pay", "evm_transfer")], [])
    await activate(svc, CAP)
    ids = [(await movement(svc, "t.page", amount="200", key=f"page-{i}"))["id"] for i in range(2)]
    while await dispatch_ready_nodes(svc):
        pass
    held = ids[1]  # FIFO: the first went out, the second would cross 250

    async def paged() -> bool:
        await raise_attention(svc)
        return (await get_movement(svc.db, held))["request_state"] == "MANUAL_INTERVENTION"

    await eventually(paged, deadline=10)
    cancelled = await cancel_movement(svc.db, held, actor="bob", reason="over the cap")
    assert cancelled["request_state"] == "CANCELLED"
    assert await svc.db.fetchval(SENT) == 1


async def test_a_node_that_fails_in_prepare_charges_nothing(svc: ServiceContext) -> None:
    """The charge is written with the write-ahead, not at the check: a movement
    whose prepare fails (FAILED, nothing sent) leaves the window as it was."""
    svc = with_settings(svc, node_dispatch_batch_size=16)
    await template(svc, "t.broken", [node("pay", "evm_transfer", sandbox={"fail": "prepare"})], [])
    await template(svc, "t.fine", [node("pay", "evm_transfer")], [])
    await activate(svc, CAP)
    broken = await movement(svc, "t.broken", amount="200", key="broken")
    fine = await movement(svc, "t.fine", amount="200", key="fine")
    while await dispatch_ready_nodes(svc):
        pass
    assert (await get_movement(svc.db, broken["id"]))["nodes"][0]["node_state"] == "FAILED"
    assert (await get_movement(svc.db, fine["id"]))["nodes"][0]["node_state"] != "READY"
    charged = await svc.db.fetchrow(CHARGED)
    assert charged is not None and (charged["s"], charged["n"]) == (200, 1)
    assert await svc.db.fetchval(SENT) == 1
