"""Demo templates on the sandbox provider (`bin/qtg-runtime --seed-demo`).

So that a new user, with nothing but the embedded database, can create and
approve a movement and watch it flow to COMPLETED. Every node runs on the
built-in sandbox executor (no network); seeding is idempotent: a template that
already exists is left as it is (no new version on every start).
"""

from __future__ import annotations

from typing import Any

from qtg.db import Database
from qtg.services.errors import NotFound
from qtg.services.templates import create_template, get_template

DEMO_ACTOR = "qtg-demo-seed"


def _node(key: str, kind: str, action_type: str, **config: Any) -> dict[str, Any]:
    # Named: with a real provider registered too (ccxt's cex_withdrawal, evm_receive's
    # destination_chain_receive_observe) an unnamed node would be ambiguous (issue 28).
    node: dict[str, Any] = {
        "key": key,
        "kind": kind,
        "action_type": action_type,
        "executor_key": "sandbox",
    }
    if config:
        node["config"] = config
    return node


DEMO_TEMPLATES: tuple[dict[str, Any], ...] = (
    {
        "template_key": "demo.cex_to_chain",
        "name": "Demo: exchange withdrawal to a chain address",
        "description": "Withdraw from a (sandbox) exchange, watch the deposit land and finalise.",
        "graph": {
            "nodes": [
                _node("withdraw", "action", "cex_withdrawal", venue="sandbox"),
                _node(
                    "receive",
                    "observe",
                    "destination_chain_receive_observe",
                    txid="$ref:withdraw.txid",
                ),
                _node(
                    "finality",
                    "observe",
                    "destination_chain_finality_observe",
                    txid="$ref:withdraw.txid",
                ),
            ],
            "edges": [["withdraw", "receive"], ["receive", "finality"]],
        },
    },
    {
        "template_key": "demo.cctp_bridge",
        "name": "Demo: CCTP bridge, five steps",
        "description": "Burn, wait for the attestation, mint, confirm the mint, watch finality.",
        "graph": {
            "nodes": [
                _node("burn", "action", "cctp_burn"),
                _node("attestation", "observe", "cctp_attestation"),
                _node("mint", "action", "cctp_mint"),
                _node("mint_status", "observe", "cctp_mint_status"),
                _node("finality", "observe", "destination_chain_finality_observe"),
            ],
            "edges": [
                ["burn", "attestation"],
                ["attestation", "mint"],
                ["mint", "mint_status"],
                ["mint_status", "finality"],
            ],
        },
    },
    {
        "template_key": "debridge.usdc_swap_bridge",
        "name": "Demo: deBridge DLN order, two steps",
        "description": "Create a DLN order on the source chain, watch a taker fulfil it.",
        "graph": {
            "nodes": [
                _node("send", "action", "debridge_send"),
                _node("fulfillment", "observe", "debridge_fulfillment"),
            ],
            "edges": [["send", "fulfillment"]],
        },
    },
    {
        "template_key": "stargate.usdt_bridge",
        "name": "Demo: Stargate V2 send, two steps",
        "description": "Send on the source chain's pool, watch LayerZero deliver it.",
        "graph": {
            "nodes": [
                _node("send", "action", "stargate_send"),
                _node("delivery", "observe", "stargate_delivery"),
            ],
            "edges": [["send", "delivery"]],
        },
    },
)


async def seed_demo_templates(db: Database) -> list[str]:
    """Create the demo templates that do not exist yet; return the keys created now."""
    created = []
    for template in DEMO_TEMPLATES:
        try:
            await get_template(db, template["template_key"])
            continue
        except NotFound:
            pass
        await create_template(db, actor=DEMO_ACTOR, **template)
        created.append(template["template_key"])
    return created
