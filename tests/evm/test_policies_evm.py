"""Issue 45 done-when, on anvil with real runtimes and their API:

- a treasury policy ("above 50,000 USDC three of the treasury group; never more
  than 1,000,000 a day; only to addresses in the book; a new address waits"),
  loaded through the API and approved by two admins, governs ERC-20 movements:
  small ones need two approvals, large ones three, an over-limit one is a 403
  naming the rule, a new address waits out its cooling-off time;
- several runtimes and many approvals racing one accumulation window: the sum
  that reached the chain (the token's balances) never exceeds the limit.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import trio
from runtime.rt_procs import RuntimeProcess, query, request_states, wait_until
from treasury_policy import treasury_policy

from evm.anvil import CHAIN_ID, deploy_token, token_balance
from evm.test_transient_and_lanes import fresh_address, launch_runtime
from qtg.db import Database
from qtg.services import tokens

pytestmark = pytest.mark.slow

UNIT = 10**6  # the test token's 6 decimals
PEOPLE = {
    "admin": "admin",
    "admin2": "admin",
    "alice": "operator",
    "bob": "operator",
    "tina": "operator",
    "tom": "operator",
    "tess": "operator",
}


def clients(dsn: str, url: str) -> dict[str, httpx.Client]:
    async def run() -> dict[str, str]:
        async with Database(dsn, min_size=1, max_size=2) as db:
            return {
                name: (await tokens.create_token(db, name=name, role=role, actor="test"))["token"]
                for name, role in PEOPLE.items()
            }

    issued = trio.run(run)
    return {
        name: httpx.Client(base_url=url, headers={"Authorization": f"Bearer {t}"}, timeout=30)
        for name, t in issued.items()
    }


def start(procs: list, dsn: str, anvil: Any, **env: str) -> str:
    proc: RuntimeProcess = launch_runtime(procs, dsn, anvil.url, **env)
    proc.wait_ready()
    return str(proc.wait_for(lambda r: r.get("msg") == "API listening")["url"])


def setup(c: dict[str, httpx.Client], token: str, policy: dict[str, Any]) -> None:
    """The template, and the policy proposed by one admin and approved by another."""
    graph = {
        "nodes": [
            {
                "key": "send",
                "kind": "action",
                "action_type": "evm_transfer",
                "config": {"evm": {"chain_id": CHAIN_ID, "token": token, "decimals": 6}},
            }
        ],
        "edges": [],
    }
    r = c["admin"].post(
        "/v3/templates", json={"template_key": "usdc.pay", "name": "USDC", "graph": graph}
    )
    assert r.status_code == 201, r.text
    r = c["admin"].post("/v3/policies", json={"document": policy})
    assert r.status_code == 201, r.text
    assert c["admin"].post(f"/v3/policies/{r.json()['version']}/approve").status_code == 403
    r = c["admin2"].post(f"/v3/policies/{r.json()['version']}/approve")
    assert r.status_code == 200 and r.json()["state"] == "ACTIVE", r.text


def book(c: dict[str, httpx.Client], address: str, label: str) -> str:
    r = c["admin"].post(
        "/v3/address-book",
        json={"chain": str(CHAIN_ID), "asset": "USDC", "address": address, "label": label},
    )
    assert r.status_code == 201, r.text
    r = c["admin2"].post(f"/v3/address-book/{r.json()['id']}/approve")
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


def create(c: dict[str, httpx.Client], amount: str, to: str) -> httpx.Response:
    return c["alice"].post(
        "/v3/movements",
        json={
            "template_key": "usdc.pay",
            "intent": {"asset": "USDC", "amount": amount, "destination": to},
        },
        headers={"Idempotency-Key": uuid.uuid4().hex},
    )


def test_a_treasury_policy_governs_movements_end_to_end(anvil, dsn, procs) -> None:
    token = deploy_token(anvil, 10_000_000 * UNIT)
    url = start(procs, dsn, anvil, MG_ADDRESS_BOOK_COOLING_OFF_SECONDS="2")
    c = clients(dsn, url)
    setup(c, token, treasury_policy())
    ops, stranger = fresh_address(), fresh_address()
    entry = book(c, ops, "ops")

    # a new address waits out its cooling-off time
    waiting = create(c, "1000", ops)
    assert waiting.status_code == 403, waiting.text
    assert waiting.json()["error"]["detail"]["rule"] == "block-all"
    assert waiting.json()["error"]["detail"]["destination_cooling_off"] is True

    def usable() -> bool:
        items = c["alice"].get("/v3/address-book").json()["items"]
        return any(e["id"] == entry and e["cooling_off_left_seconds"] == 0 for e in items)

    wait_until(usable, 10, "the entry's cooling-off to end")

    small = create(c, "1000", ops)
    assert small.status_code == 201 and small.json()["policy_rule"] == "small", small.text
    large = create(c, "600000", ops)
    assert large.status_code == 201 and large.json()["policy_rule"] == "large", large.text
    sid, lid = small.json()["id"], large.json()["id"]
    assert c["tina"].post(f"/v3/movements/{sid}/approve").status_code == 202
    assert c["bob"].post(f"/v3/movements/{sid}/approve").status_code == 403  # not treasury
    assert c["tom"].post(f"/v3/movements/{sid}/approve").status_code == 200  # two: approved
    assert c["tina"].post(f"/v3/movements/{lid}/approve").status_code == 202
    assert c["tom"].post(f"/v3/movements/{lid}/approve").status_code == 202  # two: not yet
    assert request_states(dsn, [lid]) == {lid: "PENDING_APPROVAL"}
    assert c["tess"].post(f"/v3/movements/{lid}/approve").status_code == 200  # three

    def done() -> bool:
        return set(request_states(dsn, [sid, lid]).values()) == {"COMPLETED"}

    wait_until(done, 60, "both movements to complete on chain")
    assert token_balance(anvil, token, ops) == 601_000 * UNIT

    # 601,000 went out today: 450,000 more would cross 1,000,000
    over = create(c, "450000", ops)
    assert over.status_code == 403, over.text
    assert over.json()["error"]["code"] == "POLICY_BLOCKED"
    assert over.json()["error"]["detail"]["rule"] == "daily-cap"
    outside = create(c, "10", stranger)
    assert outside.status_code == 403
    assert outside.json()["error"]["detail"]["rule"] == "block-all"
    assert token_balance(anvil, token, stranger) == 0
    [(charged,)] = query(dsn, "SELECT sum(amount) FROM policy_charges")
    assert charged == 601_000


def test_racing_runtimes_and_approvals_never_pass_the_cap_on_chain(anvil, dsn, procs) -> None:
    """Three runtimes (two batch dispatchers, one serial) and 30 movements of 1
    USDC under a cap of 10 a day, all created while nothing was charged, then
    approved at once from 8 threads through the three runtimes' APIs."""
    token = deploy_token(anvil, 1_000 * UNIT)
    urls = [
        start(procs, dsn, anvil, MG_ADDRESS_BOOK_COOLING_OFF_SECONDS="0"),
        start(procs, dsn, anvil, MG_ADDRESS_BOOK_COOLING_OFF_SECONDS="0"),
        start(
            procs,
            dsn,
            anvil,
            MG_ADDRESS_BOOK_COOLING_OFF_SECONDS="0",
            MG_NODE_DISPATCH_BATCH_SIZE="1",
        ),
    ]
    c = clients(dsn, urls[0])
    policy = treasury_policy(cap="10")
    policy["rules"][2]["approvals"] = {"count": 1, "group": "treasury"}
    setup(c, token, policy)
    dest = fresh_address()
    book(c, dest, "race")
    ids = []
    for _ in range(30):
        r = create(c, "1", dest)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    approvers = [
        httpx.Client(base_url=urls[i % 3], headers=c["tina"].headers, timeout=30) for i in range(8)
    ]

    def approve(i: int) -> int:
        return approvers[i % 8].post(f"/v3/movements/{ids[i]}/approve").status_code

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(approve, range(30))) == {200}

    def settled() -> tuple[int, int] | None:
        [(completed, waiting)] = query(
            dsn,
            "SELECT count(*) FILTER (WHERE node_state = 'COMPLETED'),"
            " count(*) FILTER (WHERE node_state = 'READY' AND error_code = 'POLICY_LIMIT')"
            " FROM movement_request_nodes",
        )
        return (completed, waiting) if completed + waiting == 30 else None

    completed, waiting = wait_until(settled, 120, "every movement to complete or wait")
    assert (completed, waiting) == (10, 20)
    assert token_balance(anvil, token, dest) == 10 * UNIT  # the chain: never past the cap
    [(charged, n)] = query(dsn, "SELECT sum(amount), count(*) FROM policy_charges")
    assert (charged, n) == (10, 10)
