"""Sandbox preflight: executor-side checks, including the plan's max_amount risk control."""

from __future__ import annotations

import pytest

from qtg.providers.base import PreflightError
from qtg.providers.sandbox import SandboxExecutor

from .helpers import make_context


async def preflight_code(executor: SandboxExecutor, /, **kwargs: object) -> str | None:
    try:
        await executor.preflight(make_context(**kwargs))  # type: ignore[arg-type]
    except PreflightError as exc:
        return exc.code
    return None


@pytest.mark.parametrize(
    ("amount", "limit", "code"),
    [
        ("100.50", "100.49", "RISK_LIMIT_EXCEEDED"),
        ("100.50", "100.5", None),  # equal is allowed
        ("1e3", "999.99", "RISK_LIMIT_EXCEEDED"),
        (50, "100", None),
        ("lots", "100", "AMOUNT_INVALID"),
        ("NaN", "100", "AMOUNT_INVALID"),
        ("100", "a hundred", "RISK_CONTROL_INVALID"),
    ],
)
async def test_max_amount_risk_control(
    sandbox: SandboxExecutor, amount: object, limit: str, code: str | None
) -> None:
    got = await preflight_code(
        sandbox,
        action_type="cex_withdrawal",
        intent={"asset": "USDC", "amount": amount},
        risk_controls={"max_amount": limit},
    )
    assert got == code


async def test_risk_limit_message_names_both_amounts(sandbox: SandboxExecutor) -> None:
    ctx = make_context("evm_transfer", risk_controls={"max_amount": "10"})
    with pytest.raises(PreflightError, match=r"100\.50 exceeds risk_controls\.max_amount 10"):
        await sandbox.preflight(ctx)


async def test_missing_amount_under_a_limit_is_refused(sandbox: SandboxExecutor) -> None:
    code = await preflight_code(
        sandbox,
        action_type="ccip_send",
        intent={"asset": "USDC"},
        risk_controls={"max_amount": "1"},
    )
    assert code == "AMOUNT_MISSING"


async def test_observe_lanes_move_nothing_so_limits_do_not_apply(sandbox: SandboxExecutor) -> None:
    code = await preflight_code(
        sandbox,
        action_type="cctp_attestation",
        node_kind="observe",
        risk_controls={"max_amount": "1"},
    )
    assert code is None


async def test_injected_refusal_and_invalid_config(sandbox: SandboxExecutor) -> None:
    assert (
        await preflight_code(sandbox, action_type="cctp_burn", sandbox={"fail": "preflight"})
        == "SANDBOX_PREFLIGHT_REJECTED"
    )
    with pytest.raises(PreflightError, match=r"unknown field `fial`") as err:
        await sandbox.preflight(make_context("cctp_burn", sandbox={"fial": "preflight"}))
    assert err.value.code == "SANDBOX_CONFIG_INVALID"
    with pytest.raises(PreflightError, match=r"sandbox.observations_to_complete"):
        await sandbox.preflight(make_context("cctp_burn", sandbox={"observations_to_complete": 0}))


async def test_unknown_action_type_is_refused(sandbox: SandboxExecutor) -> None:
    with pytest.raises(PreflightError, match=r"'wire_transfer'") as err:
        await sandbox.preflight(make_context("wire_transfer"))
    assert err.value.code == "UNSUPPORTED_ACTION_TYPE"
