"""Issue 24 item 4 for CCIP: an open drift finding on the lane (or the token's code) holds a
send before anything is signed (RetryLater CCIP_DRIFT_HOLD), and lets it go once cleared."""

from __future__ import annotations

import pytest
from evm.anvil import CHAIN_ID, KEYS
from runtime.rt_procs import query

from ccip.local import LANE, set_up
from qtg.config import Settings
from qtg.domain.context import ExecutionContext
from qtg.providers.base import RetryLater
from qtg.providers.registry import build_registry


def context(local, node_id: str) -> ExecutionContext:
    return ExecutionContext(
        request_id="r-" + node_id,
        request_node_id=node_id,
        compiled_plan_hash="0" * 64,
        template_key="t",
        template_version=1,
        node_key="send",
        node_kind="action",
        action_type="ccip_send",
        attempt_no=1,
        intent={"amount": "0.1", "destination": local.receiver},
        input_params={},
        resolved_bindings={},
        risk_controls={},
        prior_artifacts=[],
        node_config={"ccip": {"lane": LANE, "token": local.bnm, "decimals": 18}},
        provider_context={},
        timeout_policy={},
        node_provider_refs={},
    )


@pytest.mark.parametrize(
    ("subject", "check", "holds"),
    [("lane", "router", True), ("token", "code_hash", True), ("lane", "reachable", False)],
)
async def test_an_open_drift_finding_holds_a_send_until_it_clears(
    anvil, dsn, db, subject, check, holds
) -> None:
    local = set_up(anvil, drips=0)
    settings = Settings.from_env(
        {
            "MG_DATABASE_URL": dsn,
            "MG_PROVIDERS": "evm,ccip",
            "MG_EVM_RPC_URLS": f"{CHAIN_ID}={anvil.url}",
            "MG_EVM_SIGNER_PRIVATE_KEY": KEYS[0],
            "MG_CCIP_LANES": local.lanes_env(),
        }
    )
    registry = build_registry(settings, db)
    executor = registry.executor_for("ccip_send", "ccip")
    query(
        dsn,
        "INSERT INTO drift_findings (chain_id, subject, check_name, expected, observed)"
        " VALUES (%s, %s, %s, 'a', 'b')",
        (CHAIN_ID, f"ccip:{LANE}" if subject == "lane" else local.bnm, check),
    )
    ctx = context(local, f"hold-{subject}-{check}")
    try:
        if holds:
            with pytest.raises(RetryLater) as held:
                await executor.preflight(ctx)
            assert held.value.code == "CCIP_DRIFT_HOLD"
            query(dsn, "UPDATE drift_findings SET cleared_at = now()")
        await executor.preflight(ctx)  # no finding that matters: it goes
    finally:
        await registry.aclose()
    assert query(dsn, "SELECT count(*) FROM evm_nonce_reservations") == [(0,)]
