"""Movements over the local CCIP lane, for the runtime tests: template, seeding, reading."""

from __future__ import annotations

import os

import trio
from evm.anvil import CHAIN_ID, KEYS
from runtime.rt_procs import RuntimeProcess, base_env, query

from ccip.local import LANE, SELECTOR, Local
from qtg.config import Settings
from qtg.db import Database
from qtg.providers.ccip import intents as ccip_intents
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
            MG_EVM_SIGNER_PRIVATE_KEY=KEYS[0],
            **{
                "MG_EVM_RPC_URLS": f"{CHAIN_ID}={anvil.url}",
                "MG_CCIP_LANES": local.lanes_env(),
                **env,
            },
        )
    )
    procs.append(proc)
    return proc


# ---- planted send intents (the reaper tests)


async def nodes(
    db: Database, local, count: int, network_class: str = "default", first: int = 0
) -> list[str]:
    """`count` movements over the lane (not approved: no worker touches them) in
    `network_class`; their send nodes. `first` > 0 adds to a template made before."""
    settings = Settings.from_env({}).replace(network_class=network_class)
    if not first:
        await create_template(
            db, actor="alice", template_key="ccip.r", name="r", graph=graph(local)
        )
    out = []
    for i in range(first, first + count):
        created, _ = await create_movement(
            db,
            settings,
            template_key="ccip.r",
            intent={"asset": "CCIP-BnM", "amount": "0.1", "destination": local.receiver},
            idempotency_key=f"r-{i}",
            actor="alice",
        )
        [(node_id,)] = query(
            db.dsn,
            "SELECT id::text FROM movement_request_nodes"
            " WHERE request_id = %s AND node_key = 'send'",
            (created["id"],),
        )
        out.append(node_id)
    return out


async def intent(db: Database, local, node_id: str, *, tx_hash: str, nonce: int, sender: str):
    return await ccip_intents.write_intent(
        db,
        request_node_id=node_id,
        attempt_no=1,
        idempotency_key=f"{node_id}:1",
        lane=LANE,
        chain_id=CHAIN_ID,
        source_selector=SELECTOR,
        dest_selector=SELECTOR,
        router=local.router,
        sender=sender.lower(),
        receiver=local.receiver,
        token=local.bnm,
        amount=10**17,
        fee_token=None,
        fee=0,
        nonce=nonce,
        tx_hash=tx_hash,
    )


def never_broadcast() -> str:
    return "0x" + os.urandom(32).hex()
