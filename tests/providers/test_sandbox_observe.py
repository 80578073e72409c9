"""Sandbox observe and recover: counting observations, injected outcomes, observe-only nodes,
and every lane the reference names."""

from __future__ import annotations

from qtg.db import Database
from qtg.providers.base import ObserveStatus, RecoverOutcome
from qtg.providers.sandbox import (
    LANES,
    OBSERVE_ACTION_TYPES,
    SIDE_EFFECT_ACTION_TYPES,
    SandboxExecutor,
    SandboxSigner,
    submissions,
)

from .helpers import dispatch, make_context

#: Every action_type the reference names (DEFAULT_OBSERVE_INTERVALS and the recovery lanes).
REFERENCE_ACTION_TYPES = {
    "cex_withdrawal", "cex_withdrawal_status", "cex_deposit_status",
    "destination_chain_receive_observe", "destination_chain_finality_observe",
    "protocol_observe", "cctp_burn", "cctp_attestation", "cctp_mint", "cctp_mint_status",
    "ccip_send", "ccip_delivery", "debridge_send", "debridge_fulfillment",
    "stargate_send", "stargate_delivery", "evm_transfer",
}  # fmt: skip


async def test_observe_counts_until_complete_then_reports_artifacts(
    db: Database, sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    ctx = make_context(
        "cex_withdrawal", sandbox={"observations_to_complete": 3, "retry_after_seconds": 7}
    )
    submitted = await dispatch(sandbox, signer, ctx)
    for n in (1, 2):
        pending = await sandbox.observe(ctx)
        assert pending.status is ObserveStatus.PENDING, n
        assert pending.retry_after_seconds == 7
        assert (await submissions(db))[0]["observe_count"] == n
        # not yet final: recovery would send it back to observation
        assert (await sandbox.recover(ctx)).outcome is RecoverOutcome.SUBMITTED
    done = await sandbox.observe(ctx)
    assert done.status is ObserveStatus.COMPLETED
    assert done.provider_refs == submitted.provider_refs
    assert done.artifacts["amount"] == "100.50"
    assert done.artifacts["asset"] == "USDC"
    assert done.artifacts["txid"] == submitted.provider_refs["txid"]
    assert done.artifacts["withdrawal_status"] == "COMPLETED"
    # completion is stable, and recovery now agrees with observation
    assert (await sandbox.observe(ctx)).status is ObserveStatus.COMPLETED
    recovered = await sandbox.recover(ctx)
    assert recovered.outcome is RecoverOutcome.COMPLETED
    assert recovered.artifacts == done.artifacts


async def test_first_observation_completes_by_default(
    sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    ctx = make_context("ccip_send")
    await dispatch(sandbox, signer, ctx)
    result = await sandbox.observe(ctx)
    assert result.status is ObserveStatus.COMPLETED
    assert result.artifacts["message_id"].startswith("0x")


async def test_observe_of_a_never_submitted_action_is_unknown(sandbox: SandboxExecutor) -> None:
    ctx = make_context("cctp_burn")
    result = await sandbox.observe(ctx)
    assert (result.status, result.error_code) == (ObserveStatus.UNKNOWN, "NOT_SUBMITTED")


async def test_observe_failed_is_reported_when_observations_complete(
    sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    ctx = make_context(
        "debridge_send", sandbox={"fail": "observe_failed", "observations_to_complete": 2}
    )
    await dispatch(sandbox, signer, ctx)
    assert (await sandbox.observe(ctx)).status is ObserveStatus.PENDING
    failed = await sandbox.observe(ctx)
    assert failed.status is ObserveStatus.FAILED
    assert failed.error_code == "SANDBOX_OBSERVE_FAILED"
    recovered = await sandbox.recover(ctx)
    assert (recovered.outcome, recovered.error_code) == (
        RecoverOutcome.FAILED,
        "SANDBOX_OBSERVE_FAILED",
    )


async def test_observe_unknown_is_resolved_by_recover(
    sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    """The status endpoint cannot tell; the deeper lookup of recover() can."""
    ctx = make_context("stargate_send", sandbox={"fail": "observe_unknown"})
    submitted = await dispatch(sandbox, signer, ctx)
    unknown = await sandbox.observe(ctx)
    assert (unknown.status, unknown.error_code) == (
        ObserveStatus.UNKNOWN,
        "SANDBOX_OBSERVE_UNKNOWN",
    )
    recovered = await sandbox.recover(ctx)
    assert recovered.outcome is RecoverOutcome.COMPLETED
    assert recovered.provider_refs == submitted.provider_refs
    assert recovered.artifacts["guid"] == submitted.provider_refs["guid"]


async def test_observe_only_nodes_count_on_their_own(
    db: Database, sandbox: SandboxExecutor
) -> None:
    a = make_context(
        "ccip_delivery",
        node_kind="observe",
        sandbox={"observations_to_complete": 2},
        provider_context={"message_id": "0xfeed", "tx_hash": "0xsend"},
    )
    b = make_context("ccip_delivery", node_kind="observe", sandbox={"observations_to_complete": 2})
    assert a.idempotency_key is None
    # before any observation, recovery sends it back to be observed (nothing was sent)
    assert (await sandbox.recover(a)).outcome is RecoverOutcome.SUBMITTED
    assert (await sandbox.observe(a)).status is ObserveStatus.PENDING
    assert (await sandbox.observe(b)).status is ObserveStatus.PENDING
    done = await sandbox.observe(a)
    assert done.status is ObserveStatus.COMPLETED
    # it echoes the message it watches, taken from its predecessor's refs
    assert done.provider_refs["message_id"] == "0xfeed"
    assert done.artifacts["delivery_status"] == "SUCCESS"
    assert done.provider_refs["dest_tx_hash"].startswith("0x")
    assert (await sandbox.recover(a)).outcome is RecoverOutcome.COMPLETED
    assert (await sandbox.recover(b)).outcome is RecoverOutcome.SUBMITTED
    # observing wrote nothing that looks like a side effect
    assert await submissions(db) == []


def test_lanes_cover_every_action_type_the_reference_names() -> None:
    assert set(LANES) == REFERENCE_ACTION_TYPES
    assert {"cctp_burn", "cctp_mint", "ccip_send", "evm_transfer"} == {
        t for t, lane in LANES.items() if lane.needs_signature
    }
    assert all(LANES[t].side_effect for t in SIDE_EFFECT_ACTION_TYPES)
    assert "cctp_attestation" in OBSERVE_ACTION_TYPES
    assert "cex_withdrawal" in SIDE_EFFECT_ACTION_TYPES


async def test_every_action_lane_submits_and_completes(
    sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    for action_type in sorted(SIDE_EFFECT_ACTION_TYPES):
        ctx = make_context(action_type)
        submitted = await dispatch(sandbox, signer, ctx)
        assert set(submitted.provider_refs) == set(LANES[action_type].refs), action_type
        # `$ref:<node>.txid` works downstream of every action
        assert submitted.provider_refs["txid"].startswith("0x"), action_type
        done = await sandbox.observe(ctx)
        assert done.status is ObserveStatus.COMPLETED, action_type
        assert done.artifacts["amount"] == "100.50", action_type


async def test_every_observe_lane_completes_as_an_observe_node(
    sandbox: SandboxExecutor,
) -> None:
    for action_type in sorted(OBSERVE_ACTION_TYPES):
        ctx = make_context(action_type, node_kind="observe")
        await sandbox.preflight(ctx)
        done = await sandbox.observe(ctx)
        assert done.status is ObserveStatus.COMPLETED, action_type
        assert set(done.provider_refs) == set(LANES[action_type].refs), action_type
        for name, value in LANES[action_type].results.items():
            assert done.artifacts[name] == value, action_type
