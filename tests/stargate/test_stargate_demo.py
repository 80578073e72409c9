"""`--seed-demo` registers `stargate.usdt_bridge` run by the sandbox (no chain needed), and
its movement flows to COMPLETED like the other demo templates."""

from __future__ import annotations

import pytest
import trio
from runtime.rt_procs import RuntimeProcess, all_completed, base_env, query, wait_until

from qtg.config import Settings
from qtg.db import Database
from qtg.services.movements import approve_movement, create_movement
from stargate.flow import TEMPLATE

pytestmark = pytest.mark.slow


def test_the_demo_template_runs_on_the_sandbox(dsn, procs) -> None:
    proc = RuntimeProcess.launcher(base_env(MG_DATABASE_URL=dsn), "--seed-demo")
    procs.append(proc)
    proc.wait_ready()
    wait_until(
        lambda: query(
            dsn,
            "SELECT 1 FROM movement_templates WHERE template_key = %s",
            (TEMPLATE,),
        ),
        30,
        "the demo templates",
    )

    async def run() -> str:
        settings = Settings.from_env({}).replace(database_url=dsn)
        async with Database(dsn, min_size=1, max_size=2) as db:
            created, _ = await create_movement(
                db,
                settings,
                template_key=TEMPLATE,
                intent={"asset": "USDT", "amount": "5", "destination": "0x" + "ab" * 20},
                idempotency_key="stargate-demo",
                actor="alice",
            )
            await approve_movement(db, created["id"], actor="bob")
            return str(created["id"])

    rid = trio.run(run)
    wait_until(lambda: all_completed(dsn, [rid]), 60, "the demo movement on the sandbox")
    rows = query(dsn, "SELECT node_key, node_state FROM movement_request_nodes ORDER BY 1")
    assert rows == [("delivery", "COMPLETED"), ("send", "COMPLETED")]
