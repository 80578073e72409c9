"""Movements over CCTP between the two local chains, for the runtime tests."""

from __future__ import annotations

import trio
from evm.anvil import KEYS
from runtime.rt_procs import RuntimeProcess, base_env, query

from cctp.local import CHAIN_A, CHAIN_B, chains_env
from qtg.config import Settings
from qtg.db import Database
from qtg.services.movements import approve_movement, create_movement
from qtg.services.templates import create_template

TEMPLATE = "cctp.usdc_bridge"
#: the runtime's pollers, fast for tests (defaults: the reference's 15 s and 5 s)
FAST = {
    "MG_CCTP_ATTESTATION_POLL_SECONDS": "0.2",
    "MG_CCTP_MINT_POLL_SECONDS": "0.2",
    "MG_CCTP_ATTESTATION_TIMEOUT_SECONDS": "2",
}
RECOVER_FAST = {
    "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS": "0.5",
    "MG_NODE_RECOVERY_INTERVAL_SECONDS": "0.2",
}


def graph() -> dict:
    cfg = {"cctp": {"source_chain_id": CHAIN_A, "destination_chain_id": CHAIN_B}}
    return {
        "nodes": [
            {"key": "burn", "kind": "action", "action_type": "cctp_burn", "config": cfg},
            {"key": "attestation", "kind": "observe", "action_type": "cctp_attestation"},
            {"key": "mint", "kind": "action", "action_type": "cctp_mint"},
            {"key": "mint_status", "kind": "observe", "action_type": "cctp_mint_status"},
        ],
        "edges": [["burn", "attestation"], ["attestation", "mint"], ["mint", "mint_status"]],
    }


def seed(dsn: str, recipient: str, amounts: list[str], batch: str = "a") -> list[str]:
    """The template and one approved movement per amount (whole USDC)."""

    async def run() -> list[str]:
        settings = Settings.from_env({}).replace(database_url=dsn)
        ids = []
        async with Database(dsn, min_size=1, max_size=2) as db:
            await create_template(
                db, actor="alice", template_key=TEMPLATE, name="USDC over CCTP", graph=graph()
            )
            for i, amount in enumerate(amounts):
                created, _ = await create_movement(
                    db,
                    settings,
                    template_key=TEMPLATE,
                    intent={"asset": "USDC", "amount": amount, "destination": recipient},
                    idempotency_key=f"cctp-{batch}-{i}",
                    actor="alice",
                )
                await approve_movement(db, created["id"], actor="bob")
                ids.append(str(created["id"]))
        return ids

    return trio.run(run)


def launch(procs: list, dsn: str, a, b, da, db, api_url: str, **env: str) -> RuntimeProcess:
    proc = RuntimeProcess.launcher(
        base_env(
            MG_DATABASE_URL=dsn,
            MG_DB_POOL_MAX_SIZE="10",
            MG_PROVIDERS="evm,cctp",
            MG_EVM_RPC_URLS=f"{CHAIN_A}={a.url},{CHAIN_B}={b.url}",
            MG_EVM_SIGNER_PRIVATE_KEY=KEYS[0],
            MG_CCTP_CHAINS=chains_env(da, db),
            MG_CCTP_ATTESTATION_URL=api_url,
            **{**FAST, **env},
        )
    )
    procs.append(proc)
    return proc


def nodes(dsn: str) -> dict[str, tuple]:
    """node_key → (node_state, attempt_no, provider_refs) of the (one) movement."""
    rows = query(
        dsn,
        "SELECT node_key, node_state, attempt_no, provider_refs FROM movement_request_nodes",
    )
    return {r[0]: r[1:] for r in rows}
