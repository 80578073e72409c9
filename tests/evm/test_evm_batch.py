"""Nonce lanes under the batch dispatcher (issue 15): nodes that share the
signer on one chain, claimed in one batch, are submitted in claim order, so
their nonces reach the chain ascending — never a later nonce first."""

from __future__ import annotations

import json

from evm.anvil import ADDRESSES, CHAIN_ID, KEYS
from qtg.config import Settings
from qtg.db import Query
from qtg.providers.registry import build_registry
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.movements import approve_movement, create_movement
from qtg.services.templates import create_template

CLAIM_ORDER = Query(
    "tests/claim-order",
    "SELECT n.id FROM movement_request_nodes n JOIN movement_requests r"
    " ON r.id = n.request_id ORDER BY r.created_at, n.id",
)


async def test_one_signer_in_one_batch_submits_nonces_in_claim_order(anvil, dsn, db) -> None:
    settings = Settings.from_env(
        {
            "MG_DATABASE_URL": dsn,
            "MG_PROVIDERS": "evm",
            "MG_EVM_RPC_URLS": f"{CHAIN_ID}={anvil.url}",
            "MG_EVM_SIGNER_PRIVATE_KEY": KEYS[0],
            "MG_NODE_DISPATCH_BATCH_SIZE": "8",
        }
    )
    registry = build_registry(settings, db)
    svc = ServiceContext(db, settings, registry)
    executor = registry.executor_for("evm_transfer")
    submitted: list[tuple[str, int]] = []
    real_submit = executor.submit

    async def recording_submit(ctx, prepared, signature, key):  # the real submit, observed
        submitted.append((str(ctx.request_node_id), int(json.loads(prepared.payload)["nonce"])))
        return await real_submit(ctx, prepared, signature, key)

    executor.submit = recording_submit  # type: ignore[method-assign]
    try:
        await create_template(
            db,
            actor="alice",
            template_key="evm.lane",
            name="EVM lane",
            graph={
                "nodes": [
                    {
                        "key": "send",
                        "kind": "action",
                        "action_type": "evm_transfer",
                        "config": {"evm": {"chain_id": CHAIN_ID}},
                    }
                ],
                "edges": [],
            },
        )
        for i in range(4):
            created, _ = await create_movement(
                db,
                settings,
                template_key="evm.lane",
                intent={"asset": "ETH", "amount": "0.01", "destination": ADDRESSES[1]},
                idempotency_key=f"lane-{i}",
                actor="alice",
            )
            await approve_movement(db, created["id"], actor="bob")
        nonce_before = anvil.nonce(ADDRESSES[0])
        assert await dispatch_ready_nodes(svc) == 4  # one batch
    finally:
        await registry.aclose()
    claim_order = [str(r["id"]) for r in await db.fetch(CLAIM_ORDER)]
    assert [node_id for node_id, _ in submitted] == claim_order
    assert [nonce for _, nonce in submitted] == list(range(nonce_before, nonce_before + 4))
    assert anvil.nonce(ADDRESSES[0]) == nonce_before + 4  # all four landed
