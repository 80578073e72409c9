"""Movements over deBridge DLN between the two local chains, for the runtime tests."""

from __future__ import annotations

import trio
from evm.anvil import KEYS
from runtime.rt_procs import RuntimeProcess, base_env, query

from debridge.local import CHAIN_A, CHAIN_B, Deployment
from qtg.config import Settings
from qtg.db import Database
from qtg.services.movements import approve_movement, create_movement
from qtg.services.templates import create_template

TEMPLATE = "debridge.usdc_swap_bridge"
#: the runtime's poll, fast for tests (default: the reference's 30 s)
FAST = {
    "MG_DEBRIDGE_FULFILLMENT_POLL_SECONDS": "0.2",
    "MG_DEBRIDGE_STATUS_TIMEOUT_SECONDS": "2",
}
RECOVER_FAST = {
    "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS": "0.5",
    "MG_NODE_RECOVERY_INTERVAL_SECONDS": "0.2",
}
#: the taker's margin the tests' template asks for: 1 % over what the receiver gets
MARGIN_BPS = 100


def graph() -> dict:
    cfg = {
        "debridge": {
            "source_chain_id": CHAIN_A,
            "destination_chain_id": CHAIN_B,
            "taker_margin_bps": MARGIN_BPS,
        }
    }
    return {
        "nodes": [
            {"key": "send", "kind": "action", "action_type": "debridge_send", "config": cfg},
            {"key": "fulfillment", "kind": "observe", "action_type": "debridge_fulfillment"},
        ],
        "edges": [["send", "fulfillment"]],
    }


def seed(dsn: str, recipient: str, amounts: list[str], batch: str = "a") -> list[str]:
    """The template and one approved movement per amount (whole USDC the receiver gets)."""

    async def run() -> list[str]:
        settings = Settings.from_env({}).replace(database_url=dsn)
        ids = []
        async with Database(dsn, min_size=1, max_size=2) as db:
            await create_template(
                db, actor="alice", template_key=TEMPLATE, name="USDC over DLN", graph=graph()
            )
            for i, amount in enumerate(amounts):
                created, _ = await create_movement(
                    db,
                    settings,
                    template_key=TEMPLATE,
                    intent={"asset": "USDC", "amount": amount, "destination": recipient},
                    idempotency_key=f"debridge-{batch}-{i}",
                    actor="alice",
                )
                await approve_movement(db, created["id"], actor="bob")
                ids.append(str(created["id"]))
        return ids

    return trio.run(run)


def launch(
    procs: list, dsn: str, urls: tuple[str, str], dep: Deployment, status_url: str, **env: str
) -> RuntimeProcess:
    proc = RuntimeProcess.launcher(
        base_env(
            MG_DATABASE_URL=dsn,
            MG_DB_POOL_MAX_SIZE="10",
            MG_PROVIDERS="evm,debridge",
            MG_EVM_RPC_URLS=f"{CHAIN_A}={urls[0]},{CHAIN_B}={urls[1]}",
            MG_EVM_SIGNER_PRIVATE_KEY=KEYS[0],
            MG_DEBRIDGE_CHAINS=dep.chains_env(),
            MG_DEBRIDGE_STATUS_URL=status_url,
            **{**FAST, **env},
        )
    )
    procs.append(proc)
    return proc


def nodes(dsn: str) -> dict[str, tuple]:
    """node_key → (node_state, attempt_no, provider_refs, observe_count) of the movement."""
    rows = query(
        dsn,
        "SELECT node_key, node_state, attempt_no, provider_refs, observe_count"
        " FROM movement_request_nodes",
    )
    return {r[0]: r[1:] for r in rows}
