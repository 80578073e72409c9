"""Issue 24, found by the fault harness: a ccip_send whose nonce was taken back by the
nonce reaper between prepare and submit (a prepare slowed past
MG_EVM_NONCE_RESERVATION_STALE_SECONDS by RPC faults) sends nothing and waits for a new
attempt (RetryLater) — it is not FAILED, as the evm executor's EVM_NONCE_RECLAIMED."""

from __future__ import annotations

import pytest
from evm.anvil import ADDRESSES, CHAIN_ID, KEYS
from runtime.rt_procs import query

from ccip.flow import nodes
from ccip.local import LANE, ccip_send_count, set_up
from qtg.config import Settings
from qtg.domain.context import ExecutionContext
from qtg.domain.execution import build_sign_request
from qtg.providers.base import RetryLater
from qtg.providers.registry import build_registry
from qtg.services import evm_nonces
from qtg.services.context import ServiceContext


def context(node_id: str, local, amount: str = "0.5") -> ExecutionContext:
    return ExecutionContext(
        request_id="r-" + node_id,
        request_node_id=node_id,
        compiled_plan_hash="0" * 64,
        template_key="ccip.r",
        template_version=1,
        node_key="send",
        node_kind="action",
        action_type="ccip_send",
        attempt_no=1,
        intent={"asset": "CCIP-BnM", "amount": amount, "destination": local.receiver},
        input_params={},
        resolved_bindings={},
        risk_controls={},
        prior_artifacts=[],
        node_config={"ccip": {"lane": LANE, "token": local.bnm, "decimals": 18}},
        provider_context={},
        timeout_policy={},
        node_provider_refs={},
    )


async def test_a_send_whose_nonce_was_taken_back_waits_for_a_new_attempt(anvil, dsn, db):
    local = set_up(anvil)
    settings = Settings.from_env(
        {
            "MG_DATABASE_URL": dsn,
            "MG_PROVIDERS": "evm,ccip",
            "MG_EVM_RPC_URLS": f"{CHAIN_ID}={anvil.url}",
            "MG_EVM_SIGNER_PRIVATE_KEY": KEYS[0],
            "MG_CCIP_LANES": local.lanes_env(),
            "MG_EVM_NONCE_RESERVATION_STALE_SECONDS": "0.001",
        }
    )
    registry = build_registry(settings, db)
    executor = registry.executor_for("ccip_send")
    first = anvil.nonce(ADDRESSES[0])
    try:
        [node_id] = await nodes(db, local, 1)
        ctx = context(node_id, local)
        await executor.preflight(ctx)
        prepared = await executor.prepare(ctx)  # reserves the raise's and the send's nonces
        signature = await registry.signer(prepared.signer_key).sign(
            build_sign_request(ctx, prepared)
        )
        query(dsn, "SELECT pg_sleep(0.01)")  # the reservations are stale (1 ms) now
        # the reaper takes the unsigned reservations back, as it does a slow prepare's
        await evm_nonces.reap_stale_nonces(
            ServiceContext(db=db, settings=settings, providers=registry)
        )
        states = "SELECT state FROM evm_nonce_reservations ORDER BY nonce"
        assert query(dsn, states) == [("released",), ("released",)]
        with pytest.raises(RetryLater) as refused:
            await executor.submit(ctx, prepared, signature, f"{node_id}:1")
    finally:
        await registry.aclose()
    assert refused.value.code == "CCIP_NONCE_RECLAIMED"
    assert refused.value.retry_after_seconds <= 1.0  # a new attempt soon
    # nothing left: no raise, no send; the intent says why
    assert anvil.nonce(ADDRESSES[0]) == first and ccip_send_count(anvil, local.router) == 0
    [(state, detail)] = query(dsn, "SELECT state, state_detail FROM ccip_send_intents")
    assert (state, detail) == ("released", "nonce taken back")
