"""The treasury view in a real runtime: the worker refreshes the sandbox venue's balances,
`stale` flips once no worker runs, and fresh=true refreshes at once (issue 13)."""

from __future__ import annotations

import signal
from typing import Any

import httpx
import pytest
import trio

from qtg.db import Database
from qtg.services import tokens
from runtime.rt_procs import RuntimeProcess, base_env, wait_until

pytestmark = pytest.mark.slow


def launch(procs: list, dsn: str, *args: str) -> tuple[RuntimeProcess, str]:
    env = base_env(
        MG_DATABASE_URL=dsn,
        MG_DB_POOL_MAX_SIZE="20",
        MG_BALANCE_SNAPSHOT_ENABLED="true",
        MG_BALANCE_SNAPSHOT_INTERVAL_SECONDS="0.5",
        MG_BALANCE_STALE_THRESHOLD_SECONDS="2",
        MG_BALANCE_FRESH_MIN_INTERVAL_SECONDS="0.1",
    )
    proc = RuntimeProcess.launcher(env, *args)
    procs.append(proc)
    proc.wait_ready()
    url = proc.wait_for(lambda r: r.get("msg") == "API listening")["url"]
    return proc, url


def token(dsn: str, name: str, role: str) -> str:
    async def run() -> str:
        async with Database(dsn, min_size=1, max_size=2) as db:
            return (await tokens.create_token(db, name=name, role=role, actor="test"))["token"]

    return trio.run(run)


def balances(url: str, who: str, **params: Any) -> dict[str, Any]:
    r = httpx.get(
        f"{url}/v3/balances", params=params, headers={"Authorization": f"Bearer {who}"}, timeout=10
    )
    assert r.status_code == 200, r.text
    return r.json()


def sandbox_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in body["items"] if i["venue_key"] == "sandbox"]


def test_balances_refresh_go_stale_and_refresh_on_demand(dsn: str, procs: list) -> None:
    viewer, operator = token(dsn, "vic", "viewer"), token(dsn, "olga", "operator")
    runtime, url = launch(procs, dsn)

    def snapshot_of_three() -> dict[str, Any] | None:
        body = balances(url, viewer)
        return body if len(sandbox_items(body)) == 3 else None

    first = wait_until(snapshot_of_three, what="the worker's first snapshot")
    seen = {i["account"] + i["asset"]: i["observed_at"] for i in sandbox_items(first)}
    assert not any(i["stale"] for i in sandbox_items(first))
    # refreshed by the worker: every series gets a newer observation
    wait_until(
        lambda: all(
            i["observed_at"] > seen[i["account"] + i["asset"]]
            for i in sandbox_items(balances(url, viewer))
        ),
        what="a newer snapshot",
    )
    runtime.send(signal.SIGTERM)
    assert runtime.wait_exit(15) == 0

    # no worker any more: the same rows, judged stale once older than the threshold
    _, api_url = launch(procs, dsn, "--api-only")

    def all_stale() -> dict[str, Any] | None:
        body = balances(api_url, viewer)
        items = sandbox_items(body)
        return body if items and all(i["stale"] for i in items) else None

    stale = wait_until(all_stale, timeout=15, what="balances to go stale")
    assert len(sandbox_items(stale)) == 3
    fresh = balances(api_url, operator, fresh="true")
    assert {o["fetcher_key"]: o["outcome"] for o in fresh["fresh"]} == {"sandbox": "ok"}
    items = sandbox_items(fresh)
    assert len(items) == 3 and not any(i["stale"] for i in items)
    assert {i["source"] for i in items} == {"fresh"}
