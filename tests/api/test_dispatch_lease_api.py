"""Issue 44 item 3 through the HTTP API on loopback: while a dispatcher's prepare
hangs (a provider that does not answer), an operator's cancel of that very
movement answers at once — the dispatcher holds no lock across prepare — and the
prepared action is discarded, never submitted."""

from __future__ import annotations

import trio
from engine.helpers import movement, node, template
from engine.test_dispatch_lease import SUBMITS, GatedPrepare

from qtg.providers.registry import build_registry
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.movements import get_movement

from .conftest import Api


async def test_a_cancel_over_http_answers_while_the_movements_prepare_hangs(api: Api) -> None:
    registry = build_registry(api.settings, api.db)
    gated = GatedPrepare(registry.executor_for("cex_withdrawal"))
    registry.add_executor(gated)
    ctx = ServiceContext(api.db, api.settings, registry)
    pay = node("pay", "cex_withdrawal")
    pay["executor_key"] = "gated_prepare"
    try:
        await template(ctx, "t.gated", [pay], [])
        m = await movement(ctx, "t.gated", creator="alice", approver="admin", key="gated")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(dispatch_ready_nodes, ctx)
            with trio.fail_after(10):
                await gated.entered.wait()  # claimed, leased, preparing
            with trio.fail_after(5):
                r = await api["bob"].post(f"/v3/movements/{m['id']}/cancel", json={})
            assert r.status_code == 200, r.text
            assert r.json()["request_state"] == "CANCELLED"
            gated.gate.set()
        after = await get_movement(api.db, m["id"])
        assert after["request_state"] == "CANCELLED"
        assert after["nodes"][0]["node_state"] not in ("READY", "SUBMITTING", "SUBMITTED")
        assert await api.db.fetch(SUBMITS) == []
    finally:
        await registry.aclose()
