"""Helpers for provider tests: contexts and sign requests shaped as the dispatcher makes them."""

from __future__ import annotations

import uuid
from typing import Any

from qtg.domain.context import ExecutionContext, SigningIntent, SignRequest
from qtg.providers.base import PreparedAction, SubmitResult
from qtg.providers.sandbox import SandboxExecutor, SandboxSigner


def make_context(
    action_type: str,
    *,
    node_kind: str = "action",
    sandbox: dict[str, Any] | None = None,
    node_config: dict[str, Any] | None = None,
    intent: dict[str, Any] | None = None,
    risk_controls: dict[str, Any] | None = None,
    provider_context: dict[str, Any] | None = None,
    request_node_id: str | None = None,
    attempt_no: int = 1,
    idempotency_key: str | None = "auto",
) -> ExecutionContext:
    """An ExecutionContext as the dispatcher builds it; the idempotency key defaults to
    the write-ahead key (request node id + attempt) of an action node."""
    node_id = request_node_id or str(uuid.uuid4())
    config = dict(node_config or {})
    if sandbox is not None:
        config["sandbox"] = sandbox
    if idempotency_key == "auto":
        idempotency_key = f"{node_id}:{attempt_no}" if node_kind == "action" else None
    return ExecutionContext(
        request_id=str(uuid.uuid4()),
        request_node_id=node_id,
        compiled_plan_hash="ab" * 32,
        template_key="sandbox-test",
        template_version=1,
        node_key=action_type,
        node_kind=node_kind,
        action_type=action_type,
        attempt_no=attempt_no,
        intent={"asset": "USDC", "amount": "100.50", "destination": "0xdest"}
        if intent is None
        else intent,
        input_params={"chain_family": "evm"},
        resolved_bindings={},
        risk_controls=risk_controls or {},
        prior_artifacts=[],
        node_config=config,
        provider_context=provider_context or {},
        timeout_policy={},
        idempotency_key=idempotency_key,
    )


def sign_request(ctx: ExecutionContext, prepared: PreparedAction) -> SignRequest:
    """The SignRequest of the reference's "SignRequest construction"."""
    return SignRequest(
        request_id=ctx.request_id,
        request_node_id=ctx.request_node_id,
        signing_intent=SigningIntent(
            action=prepared.action_type,
            asset=str(ctx.intent.get("asset", "")),
            amount=str(ctx.intent.get("amount", "")),
            destination=str(ctx.intent.get("destination", "")),
            chain_family=str(ctx.input_params.get("chain_family", "evm")),
            allowed_payload_hash=prepared.payload_hash,
        ),
        payload_format=prepared.payload_format,
        payload=prepared.payload,
        payload_hash=prepared.payload_hash,
        metadata=ctx.input_params,
    )


async def dispatch(
    executor: SandboxExecutor, signer: SandboxSigner, ctx: ExecutionContext
) -> SubmitResult:
    """What the dispatcher does with an action node: preflight, prepare, sign, submit."""
    await executor.preflight(ctx)
    prepared = await executor.prepare(ctx)
    signature = await signer.sign(sign_request(ctx, prepared)) if prepared.needs_signature else None
    assert ctx.idempotency_key is not None
    return await executor.submit(ctx, prepared, signature, ctx.idempotency_key)
