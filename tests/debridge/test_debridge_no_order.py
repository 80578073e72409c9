"""A debridge_fulfillment with no order to observe (review of issue 46, item a).

- The runtime: a fulfilment whose direct predecessors hand it no order (a template stored
  before the check below, or a send resolved COMPLETED by operators with no order in its
  refs) is UNKNOWN DEBRIDGE_NO_ORDER and pages — never FAILED: the order may exist and be
  fillable, and FAILED would invite a second order (a double payment);
- template creation refuses a debridge_fulfillment with no debridge_send right before it
  (DEBRIDGE_FULFILLMENT_WITHOUT_SEND), naming the node.
"""

from __future__ import annotations

import pytest
import trio
from evm.anvil import ADDRESSES
from runtime.rt_procs import query, request_states, wait_until

from debridge.flow import CHAIN_A, CHAIN_B, launch
from debridge.local import LocalDln, set_up
from debridge.test_debridge_intent import _executor
from qtg.config import Settings
from qtg.db import Database
from qtg.domain.plan import compile_graph
from qtg.providers.registry import ProviderRegistry
from qtg.services.errors import InvalidInput
from qtg.services.movements import approve_movement, create_movement
from qtg.services.templates import check_executors, create_template

CFG = {"debridge": {"source_chain_id": CHAIN_A, "destination_chain_id": CHAIN_B}}
SEND = {"key": "send", "kind": "action", "action_type": "debridge_send", "config": CFG}
FULFIL = {"key": "fulfillment", "kind": "observe", "action_type": "debridge_fulfillment"}
BETWEEN = {"key": "check", "kind": "manual", "action_type": "manual_check"}


def _registry() -> ProviderRegistry:
    registry = ProviderRegistry()
    registry.add_executor(_executor())
    return registry


@pytest.mark.parametrize(
    "graph",
    [
        {"nodes": [FULFIL], "edges": []},
        {"nodes": [SEND, BETWEEN, FULFIL], "edges": [["send", "check"], ["check", "fulfillment"]]},
    ],
)
def test_a_fulfilment_not_right_after_a_send_is_refused_at_creation(graph) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_executors(compile_graph(graph), _registry())
    assert caught.value.code == "DEBRIDGE_FULFILLMENT_WITHOUT_SEND"
    assert caught.value.detail["node_key"] == "fulfillment"


def test_a_fulfilment_right_after_a_send_passes() -> None:
    graph = {"nodes": [SEND, FULFIL], "edges": [["send", "fulfillment"]]}
    check_executors(compile_graph(graph), _registry())


@pytest.mark.slow
def test_a_fulfilment_with_no_order_pages_and_is_never_failed(chains, dsn, procs) -> None:
    a, b = chains
    dep = set_up(a, b, 10**6)
    dln = LocalDln(a, b, dep).start()
    try:
        launch(
            procs, dsn, (a.url, b.url), dep, dln.url, MG_NODE_UNKNOWN_ATTENTION_SECONDS="1"
        ).wait_ready()

        async def seed() -> str:
            settings = Settings.from_env({}).replace(database_url=dsn)
            async with Database(dsn, min_size=1, max_size=2) as db:
                # stored with no registry: as a template older than the check
                await create_template(
                    db, actor="alice", template_key="debridge.bare", name="bare",
                    graph={"nodes": [FULFIL], "edges": []},
                )  # fmt: skip
                created, _ = await create_movement(
                    db, settings, template_key="debridge.bare",
                    intent={"asset": "USDC", "amount": "1", "destination": ADDRESSES[1]},
                    idempotency_key="debridge-bare", actor="alice",
                )  # fmt: skip
                await approve_movement(db, created["id"], actor="bob")
                return str(created["id"])

        rid = trio.run(seed)
        wait_until(
            lambda: request_states(dsn, [rid]).get(rid) == "MANUAL_INTERVENTION", 60, "the page"
        )
        [(state, code)] = query(
            dsn, "SELECT node_state, error_code FROM movement_request_nodes"
            " WHERE node_key = 'fulfillment'",
        )  # fmt: skip
        assert (state, code) == ("UNKNOWN", "DEBRIDGE_NO_ORDER")
    finally:
        dln.stop()
