"""A LayerZero message that is not delivered pages, and nobody can call it FAILED (issue 46
review), under a real `bin/qtg-runtime`, two anvil chains and its API:

- the executor stand-in down past MG_STARGATE_UNDELIVERED_AFTER_SECONDS: the delivery is
  UNKNOWN (STARGATE_UNDELIVERED), never FAILED, and pages (MANUAL_INTERVENTION, the
  critical request_attention notification);
- two operators resolving it FAILED through the API are refused (409 FAILURE_NOT_PROVABLE,
  naming why): nothing recorded, the node untouched;
- the stand-in back and the movement resumed (recovery works on EXECUTING movements only):
  recovery asks the destination again, the node is COMPLETED, the page resolved, the
  recipient paid once.
"""

from __future__ import annotations

import httpx
import pytest
import trio
from runtime.rt_procs import all_completed, query, request_states, wait_until

from qtg.db import Database
from qtg.services import tokens
from stargate.flow import RECOVER_FAST, launch, nodes, seed
from stargate.local import usdt_balance
from stargate.test_stargate_runtime import HOLDER, RECIPIENT, USDT, _moved_once, world

pytestmark = pytest.mark.slow
__all__ = ["world"]

#: undelivered after 1 s; UNKNOWN beside the completed send pages at once (derive's rule 2)
BOUNDS = {**RECOVER_FAST, "MG_STARGATE_UNDELIVERED_AFTER_SECONDS": "1"}


def _operators(dsn: str) -> dict[str, str]:
    async def run() -> dict[str, str]:
        async with Database(dsn, min_size=1, max_size=1) as db:
            return {
                who: (await tokens.create_token(db, name=who, role="operator", actor="test"))[
                    "token"
                ]
                for who in ("alice", "bob")
            }

    return trio.run(run)


def _post(url: str, token: str, path: str, body: dict | None = None) -> httpx.Response:
    return httpx.post(
        f"{url}{path}", json=body or {}, headers={"Authorization": f"Bearer {token}"}, timeout=10
    )


def _delivery(dsn: str) -> tuple:
    [row] = query(
        dsn,
        "SELECT node_state, error_code FROM movement_request_nodes WHERE node_key = 'delivery'",
    )
    return row


def _page(dsn: str, rid: str) -> list[tuple]:
    return query(
        dsn,
        "SELECT severity, resolved_at IS NOT NULL FROM notifications WHERE dedupe_key = %s",
        (f"request_attention:{rid}",),
    )


def test_an_undelivered_message_pages_is_never_failed_and_completes_late(world, dsn, procs) -> None:
    a, b, da, db, lz = world
    lz.down = True  # LayerZero delivers nothing
    runtime = launch(procs, dsn, (a.url, b.url), da, db, **BOUNDS)
    url = runtime.wait_for(lambda r: r.get("msg") == "API listening")["url"]
    runtime.wait_ready()
    who = _operators(dsn)
    [rid] = seed(dsn, RECIPIENT, ["5"], batch="undelivered")
    wait_until(
        lambda: request_states(dsn, [rid])[rid] == "MANUAL_INTERVENTION",
        60,
        "the undelivered message to page",
    )
    assert _delivery(dsn) == ("UNKNOWN", "STARGATE_UNDELIVERED")
    assert _page(dsn, rid) == [("critical", False)]  # the page is open
    # the send moved the tokens into A's pool; B paid nothing
    assert usdt_balance(a, da, HOLDER) == 95 * USDT and usdt_balance(a, da, da.pool) == 5 * USDT
    assert usdt_balance(b, db, RECIPIENT) == 0

    for actor in ("alice", "bob"):  # four eyes would apply it: each is refused outright
        r = _post(
            url,
            who[actor],
            f"/v3/movements/{rid}/nodes/delivery/resolve",
            {"outcome": "FAILED", "evidence": "no delivery after the bound"},
        )
        assert r.status_code == 409, r.text
        error = r.json()["error"]
        assert error["code"] == "FAILURE_NOT_PROVABLE", error
        assert error["detail"]["action_type"] == "stargate_delivery"
        assert "cannot be cancelled" in error["detail"]["reason"]
    assert query(dsn, "SELECT count(*) FROM movement_node_resolutions") == [(0,)]
    assert _delivery(dsn) == ("UNKNOWN", "STARGATE_UNDELIVERED")

    lz.down = False  # LayerZero delivers, late
    wait_until(lambda: lz.delivered, 30, "LayerZero to deliver")
    r = _post(url, who["bob"], f"/v3/movements/{rid}/resume")
    assert r.status_code == 200, r.text
    wait_until(lambda: all_completed(dsn, [rid]), 60, "the late delivery to complete the node")
    assert _delivery(dsn)[0] == "COMPLETED"
    assert _page(dsn, rid) == [("critical", True)]  # resolved, and raised only once
    _moved_once(world, 5 * USDT)
    assert nodes(dsn)["send"][1] == 1
