"""What an executor and a signer are handed (reference: "ExecutionContext construction",
"SignRequest construction"). Plain immutable structs, built by pure functions in
qtg/services/dispatch.py from rows already loaded."""

from __future__ import annotations

from typing import Any

import msgspec

PROTOCOL_VERSION = "1.0"


class ExecutionContext(msgspec.Struct, frozen=True, kw_only=True):
    protocol_version: str = PROTOCOL_VERSION
    request_id: str
    request_node_id: str
    compiled_plan_hash: str
    template_key: str
    template_version: int
    node_key: str
    node_kind: str
    action_type: str
    attempt_no: int
    intent: dict[str, Any]
    input_params: dict[str, Any]
    resolved_bindings: dict[str, Any]
    risk_controls: dict[str, Any]
    prior_artifacts: list[dict[str, Any]]  # artifacts of direct-predecessor COMPLETED nodes
    node_config: dict[str, Any]  # plan node config after top-level $ref resolution
    provider_context: dict[str, Any]  # flat merge of direct predecessors' provider_refs
    timeout_policy: dict[str, Any]
    # Beyond the reference: what observe()/recover() need about the node itself.
    idempotency_key: str | None = None  # write-ahead key of this attempt
    node_provider_refs: dict[str, Any] = msgspec.field(default_factory=dict)
    observe_count: int = 0


class SigningIntent(msgspec.Struct, frozen=True, kw_only=True):
    action: str
    asset: str
    amount: str
    destination: str
    max_fee_usd: str | None = None
    chain_family: str = "evm"
    allowed_payload_hash: str


class SignRequest(msgspec.Struct, frozen=True, kw_only=True):
    protocol_version: str = PROTOCOL_VERSION
    request_id: str
    request_node_id: str
    signing_intent: SigningIntent
    payload_format: str
    payload: str
    payload_hash: str
    metadata: dict[str, Any]
