"""Movements over the local CCIP lane, for the runtime tests: template, seeding, reading."""

from __future__ import annotations

import trio
from evm.anvil import CHAIN_ID, KEYS
from runtime.rt_procs import RuntimeProcess, base_env, query

from ccip.local import LANE, Local
from qtg.config import Settings
from qtg.db import Database
from qtg.services.movements import approve_movement, create_movement
from qtg.services.templates import create_template

TEMPLATE = "ccip.local"


def graph(local: Local) -> dict:
    cfg = {"ccip": {"lane": LANE, "token": local.bnm, "decimals": 18}}
    return {
        "nodes": [
            {"key": "send", "kind": "action", "action_type": "ccip_send", "config": cfg},
            {"key": "deliver", "kind": "observe", "action_type": "ccip_delivery", "config": {}},
        ],
        "edges": [["send", "deliver"]],
    }


def seed(dsn: str, local: Local, amounts: list[str], batch: str = "a") -> list[str]:
    """The template (once per batch) and one approved movement per amount."""

    async def run() -> list[str]:
        settings = Settings.from_env({}).replace(database_url=dsn)
        key = f"{TEMPLATE}.{batch}"
        ids = []
        async with Database(dsn, min_size=1, max_size=2) as db:
            await create_template(
                db, actor="alice", template_key=key, name="CCIP local", graph=graph(local)
            )
            for i, amount in enumerate(amounts):
                created, _ = await create_movement(
                    db,
                    settings,
                    template_key=key,
                    intent={"asset": "CCIP-BnM", "amount": amount, "destination": local.receiver},
                    idempotency_key=f"ccip-{batch}-{i}",
                    actor="alice",
                )
                await approve_movement(db, created["id"], actor="bob")
                ids.append(str(created["id"]))
        return ids

    return trio.run(run)


def states(dsn: str, ids: list[str]) -> dict[str, str]:
    return dict(
        query(
            dsn,
            "SELECT id::text, request_state FROM movement_requests WHERE id = ANY(%s::uuid[])",
            (ids,),
        )
    )


def completed(dsn: str, ids: list[str]) -> bool:
    rows = states(dsn, ids)
    stuck = {k: v for k, v in rows.items() if v in ("FAILED", "MANUAL_INTERVENTION")}
    if stuck:
        why = query(
            dsn,
            "SELECT node_key, node_state, error_code, error_detail FROM movement_request_nodes"
            " WHERE request_id = ANY(%s::uuid[]) AND error_code IS NOT NULL",
            (list(stuck),),
        )
        raise AssertionError(f"{stuck}: {why}")
    return len(rows) == len(ids) and set(rows.values()) == {"COMPLETED"}


def intents(dsn: str) -> list[tuple]:
    return query(
        dsn,
        "SELECT state, tx_hash, message_id, attempt_no, dest_tx_hash FROM ccip_send_intents"
        " ORDER BY id",
    )


def launch(procs: list, dsn: str, anvil, local: Local, **env: str) -> RuntimeProcess:
    proc = RuntimeProcess.launcher(
        base_env(
            MG_DATABASE_URL=dsn,
            MG_DB_POOL_MAX_SIZE="10",
            MG_PROVIDERS="evm,ccip",
            MG_EVM_RPC_URLS=f"{CHAIN_ID}={anvil.url}",
            MG_EVM_SIGNER_PRIVATE_KEY=KEYS[0],
            **{"MG_CCIP_LANES": local.lanes_env(), **env},
        )
    )
    procs.append(proc)
    return proc
