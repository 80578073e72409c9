"""Movements over Stargate between the two local chains, for the runtime tests."""

from __future__ import annotations

import trio
from evm.anvil import KEYS
from runtime.rt_procs import RuntimeProcess, base_env, query

from qtg.config import Settings
from qtg.db import Database
from qtg.services.movements import approve_movement, create_movement
from qtg.services.templates import create_template
from stargate.local import CHAIN_A, CHAIN_B, chains_env

TEMPLATE = "stargate.usdt_bridge"
#: the delivery poll, fast for tests (default 10 s)
FAST = {"MG_STARGATE_DELIVERY_POLL_SECONDS": "0.2"}
#: node_recovery fast for tests (a SUBMITTING node of a dead runtime is taken at once
#: anyway; a live runtime's after the Stargate arm's grace)
RECOVER_FAST = {
    "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS_STARGATE": "0.5",
    "MG_NODE_RECOVERY_INTERVAL_SECONDS": "0.2",
}


def graph() -> dict:
    cfg = {"stargate": {"source_chain_id": CHAIN_A, "destination_chain_id": CHAIN_B}}
    return {
        "nodes": [
            {"key": "send", "kind": "action", "action_type": "stargate_send", "config": cfg},
            {"key": "delivery", "kind": "observe", "action_type": "stargate_delivery"},
        ],
        "edges": [["send", "delivery"]],
    }


def seed(dsn: str, recipient: str, amounts: list[str], batch: str = "a") -> list[str]:
    """The template and one approved movement per amount (whole USDT)."""

    async def run() -> list[str]:
        settings = Settings.from_env({}).replace(database_url=dsn)
        ids = []
        async with Database(dsn, min_size=1, max_size=2) as db:
            await create_template(
                db, actor="alice", template_key=TEMPLATE, name="USDT over Stargate", graph=graph()
            )
            for i, amount in enumerate(amounts):
                created, _ = await create_movement(
                    db,
                    settings,
                    template_key=TEMPLATE,
                    intent={"asset": "USDT", "amount": amount, "destination": recipient},
                    idempotency_key=f"stargate-{batch}-{i}",
                    actor="alice",
                )
                await approve_movement(db, created["id"], actor="bob")
                ids.append(str(created["id"]))
        return ids

    return trio.run(run)


def launch(procs: list, dsn: str, urls: tuple[str, str], da, db, **env: str) -> RuntimeProcess:
    proc = RuntimeProcess.launcher(
        base_env(
            MG_DATABASE_URL=dsn,
            MG_DB_POOL_MAX_SIZE="10",
            MG_PROVIDERS="evm,stargate",
            MG_EVM_RPC_URLS=f"{CHAIN_A}={urls[0]},{CHAIN_B}={urls[1]}",
            MG_EVM_SIGNER_PRIVATE_KEY=KEYS[0],
            MG_STARGATE_CHAINS=chains_env(da, db),
            **{**FAST, **env},
        )
    )
    procs.append(proc)
    return proc


def nodes(dsn: str, request_id: str | None = None) -> dict[str, tuple]:
    """node_key → (node_state, attempt_no, provider_refs) of one movement."""
    rows = query(
        dsn,
        "SELECT node_key, node_state, attempt_no, provider_refs FROM movement_request_nodes"
        " WHERE %(id)s::uuid IS NULL OR request_id = %(id)s::uuid",
        {"id": request_id},
    )
    return {r[0]: r[1:] for r in rows}
