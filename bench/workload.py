"""What the benchmark runs: its templates, and movements made through the engine's own API.

Movements are created and approved with `create_movement` / `approve_movement`
— the same functions the HTTP API calls — so every row, event, audit fact and
notification is exactly what production writes. Every node is an instant
sandbox node (MG_SANDBOX_LATENCY_MS=0, one observation to complete), so what
is measured is qtg and PostgreSQL, not a simulated remote system.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio

from bench.procs import AUDIT_HMAC_KEY
from qtg.config import Settings, audit_keys
from qtg.db import Database
from qtg.runtime.demo import seed_demo_templates
from qtg.services.audit import promote_pending
from qtg.services.movements import approve_movement, create_movement
from qtg.services.templates import create_template

#: One action node: the pickup benchmark's movement.
ONE_ACTION = "bench.one_action"
#: Three action nodes in a chain: the throughput benchmark's movement. Every node
#: is a side effect (write-ahead SUBMITTING, submit, SUBMITTED, observed COMPLETED),
#: so "sandbox submissions per node" is exactly 1 when nothing is done twice. The
#: middle node is signed, as an on-chain transfer is.
THREE_ACTIONS = "bench.three_actions"
#: The 5-node chain of the DAG-latency benchmark (burn → attestation → mint →
#: mint_status → finality): the runtime's `--seed-demo` template.
FIVE_CHAIN = "demo.cctp_bridge"

INTENT = {"asset": "USDC", "amount": "10.00", "destination": "0xbench"}
INPUT_PARAMS = {"chain_family": "evm"}
CREATOR, APPROVER = "bench-alice", "bench-bob"

#: Created movements wait for approval this long; the benchmark approves them
#: minutes later, so the default 300 s window would be too tight.
APPROVAL_TTL_SECONDS = 86_400.0


def _node(key: str, action_type: str) -> dict[str, Any]:
    return {"key": key, "kind": "action", "action_type": action_type}


TEMPLATES: tuple[dict[str, Any], ...] = (
    {
        "template_key": ONE_ACTION,
        "name": "Benchmark: one exchange withdrawal",
        "graph": {"nodes": [_node("withdraw", "cex_withdrawal")], "edges": []},
    },
    {
        "template_key": THREE_ACTIONS,
        "name": "Benchmark: three side effects in a chain",
        "graph": {
            "nodes": [
                _node("withdraw", "cex_withdrawal"),
                _node("transfer", "evm_transfer"),
                _node("send", "debridge_send"),
            ],
            "edges": [["withdraw", "transfer"], ["transfer", "send"]],
        },
    },
)


def settings_for(dsn: str) -> Settings:
    return Settings.from_env({}).replace(
        database_url=dsn, approval_ttl_seconds=APPROVAL_TTL_SECONDS
    )


async def install_templates(db: Database) -> None:
    """The benchmark templates and the demo ones (the 5-node chain)."""
    await seed_demo_templates(db)
    for template in TEMPLATES:
        await create_template(db, actor="bench-admin", **template)


async def create_movements(
    db: Database,
    settings: Settings,
    template_key: str,
    count: int,
    *,
    tag: str,
    approve: bool,
    concurrency: int = 4,
) -> list[Any]:
    """Create `count` movements (approved when `approve`), `concurrency` at a time.

    Returns their ids in creation order.
    """
    ids: list[Any] = [None] * count
    next_index = iter(range(count))

    async def worker() -> None:
        for i in next_index:
            created, _ = await create_movement(
                db,
                settings,
                template_key=template_key,
                intent=INTENT,
                input_params=INPUT_PARAMS,
                idempotency_key=f"bench-{tag}-{i}",
                actor=CREATOR,
            )
            if approve:
                await approve_movement(db, created["id"], actor=APPROVER)
            ids[i] = created["id"]

    async with trio.open_nursery() as nursery:
        for _ in range(max(1, concurrency)):
            nursery.start_soon(worker)
    return ids


async def approve(db: Database, request_id: Any) -> None:
    await approve_movement(db, request_id, actor=APPROVER)


async def approve_all(db: Database, ids: Sequence[Any], *, concurrency: int = 4) -> None:
    pending = iter(ids)

    async def worker() -> None:
        for request_id in pending:
            await approve(db, request_id)

    async with trio.open_nursery() as nursery:
        for _ in range(max(1, concurrency)):
            nursery.start_soon(worker)


async def settle_audit(db: Database) -> int:
    """Promote every pending audit fact, as the runtime's promoter would have by now.

    A prepared backlog then holds only the movements' own work: the drain does
    not also pay for promoting the audit facts of 2,000 past approvals. Keyed
    with the runtimes' key: a keyed runtime refuses to extend an unkeyed head.
    """
    keys = audit_keys(Settings.from_env({}).replace(audit_hmac_key=AUDIT_HMAC_KEY))
    total = 0
    while promoted := await promote_pending(db, keys=keys):
        total += promoted
    return total
