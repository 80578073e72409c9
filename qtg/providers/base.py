"""The provider contract (DESIGN §5): what an Executor and a Signer must do.

Executors and signers are plain objects registered by key; qtg calls them
from the dispatcher, observer, recovery and health workers. The contract
that matters for money: `submit` must be idempotent on `idempotency_key`
(qtg may call `recover` — never `submit` again — after a crash), and its
exceptions say whether a side effect may have happened:

- `SubmitRejected`: the provider refused before any side effect → FAILED.
- any other exception: the outcome is unknown → UNKNOWN, and recovery asks
  `recover()` what really happened.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import msgspec

from qtg.domain.context import ExecutionContext, SignRequest
from qtg.providers import answers


def _clean_answer(result: Any) -> None:
    """Make a provider's answer storable where it is made (issue 44 item 2): every
    result struct below cleans its refs, artifacts and error texts on construction
    (qtg.providers.answers), so no path from a provider to a column can skip it."""
    force = msgspec.structs.force_setattr
    force(result, "provider_refs", answers.clean_object(result.provider_refs))
    force(result, "artifacts", answers.clean_object(result.artifacts))
    if hasattr(result, "error_detail"):
        force(result, "error_detail", answers.clean_optional_text(result.error_detail))
        force(
            result,
            "error_code",
            answers.clean_optional_text(result.error_code, answers.MAX_CODE_CHARS),
        )


class PreparedAction(msgspec.Struct, frozen=True, kw_only=True):
    action_type: str
    payload_format: str  # e.g. "json", "evm_tx_hex"
    payload: str
    payload_hash: str  # lowercase hex sha256 of payload
    needs_signature: bool = False
    signer_key: str | None = None


class SubmitResult(msgspec.Struct, frozen=True, kw_only=True):
    provider_refs: dict[str, Any] = msgspec.field(default_factory=dict)
    artifacts: dict[str, Any] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        _clean_answer(self)


class ObserveStatus(StrEnum):
    PENDING = "pending"
    COMPLETED = "completed"
    FAILED = "failed"
    UNKNOWN = "unknown"


class ObserveResult(msgspec.Struct, frozen=True, kw_only=True):
    status: ObserveStatus
    provider_refs: dict[str, Any] = msgspec.field(default_factory=dict)
    artifacts: dict[str, Any] = msgspec.field(default_factory=dict)
    retry_after_seconds: float | None = None
    error_code: str | None = None
    error_detail: str | None = None

    def __post_init__(self) -> None:
        _clean_answer(self)


class RecoverOutcome(StrEnum):
    SUBMITTED = "submitted"  # it happened and is still in flight: observe it again
    COMPLETED = "completed"  # it happened and is final
    FAILED = "failed"  # it failed for good (or did not happen): safe to retry by hand
    # The provider PROVES that nothing happened under this attempt's idempotency
    # key (no record of it at all): qtg may make a new attempt by itself, with a
    # new key, up to MG_NODE_MAX_ATTEMPTS (issue 10; beyond the reference).
    # Answer it only when a late arrival of the old attempt is impossible.
    NOT_SUBMITTED = "not_submitted"
    UNKNOWN = "unknown"  # still cannot tell: leave it for the next pass / an operator


class RecoverResult(msgspec.Struct, frozen=True, kw_only=True):
    outcome: RecoverOutcome
    provider_refs: dict[str, Any] = msgspec.field(default_factory=dict)
    artifacts: dict[str, Any] = msgspec.field(default_factory=dict)
    error_code: str | None = None
    error_detail: str | None = None

    def __post_init__(self) -> None:
        _clean_answer(self)


class HealthState(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    UNHEALTHY = "unhealthy"


class HealthReport(msgspec.Struct, frozen=True, kw_only=True):
    state: HealthState
    detail: dict[str, Any] = msgspec.field(default_factory=dict)
    signer_address: str | None = None  # signers only: the address they sign as


class ProviderError(Exception):
    """Base of the errors a provider raises on purpose; `code` lands in error_code."""

    code = "PROVIDER_ERROR"

    def __init__(self, detail: str, *, code: str | None = None) -> None:
        detail = answers.clean_text(str(detail))  # it lands in error_detail (issue 44)
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = answers.clean_text(code, answers.MAX_CODE_CHARS)


class PreflightError(ProviderError):
    code = "PREFLIGHT_REJECTED"


class RetryLater(PreflightError):
    """A transient or policy wait before any side effect: the node goes back to READY.

    Raised by preflight/prepare when nothing was sent and the condition may clear by
    itself (an RPC outage, a fee above its cap, an open drift finding). The node is not
    FAILED: it waits `retry_after_seconds` and is paged past a threshold.
    """

    code = "RETRY_LATER"

    def __init__(
        self, detail: str, *, code: str | None = None, retry_after_seconds: float = 5.0
    ) -> None:
        super().__init__(detail, code=code)
        self.retry_after_seconds = retry_after_seconds


class IntentRejected(ProviderError):
    """An intent this executor could never carry out, found by `check_intent` at
    movement creation (nothing exists to send yet). `field` names the intent's
    field (`destination`, `amount`)."""

    code = "INTENT_REJECTED"

    def __init__(self, field: str, detail: str, *, code: str | None = None) -> None:
        super().__init__(detail, code=code)
        self.field = field


class SubmitRejected(ProviderError):
    """Refused before any side effect: the node may be FAILED safely."""

    code = "SUBMIT_REJECTED"


class SigningRefused(ProviderError):
    code = "SIGNING_REFUSED"


@runtime_checkable
class Executor(Protocol):
    key: str
    action_types: frozenset[str]

    async def preflight(self, ctx: ExecutionContext) -> None: ...

    async def prepare(self, ctx: ExecutionContext) -> PreparedAction: ...

    async def submit(
        self,
        ctx: ExecutionContext,
        prepared: PreparedAction,
        signature: str | None,
        idempotency_key: str,
    ) -> SubmitResult: ...

    async def observe(self, ctx: ExecutionContext) -> ObserveResult: ...

    async def recover(self, ctx: ExecutionContext) -> RecoverResult: ...


@runtime_checkable
class Signer(Protocol):
    key: str

    async def sign(self, request: SignRequest) -> str:
        """Return the signature (lowercase hex); raise SigningRefused if the payload
        hash is not `request.signing_intent.allowed_payload_hash`."""
        ...


# `check_intent()` is optional on an executor:
# `def check_intent(self, intent: Mapping[str, Any], node_config: Mapping[str, Any]) -> None`,
# no I/O, raising IntentRejected for an intent whose format can never work with
# this provider (an evm destination that is no address). Movement creation
# calls it for every node the executor would run, so such a movement is a 422
# naming the field instead of a movement someone approves and that then fails.
# `plan_problem()` is optional on an executor:
# `def plan_problem(self, plan: Plan, node: PlanNode) -> tuple[str, str] | None`, no I/O,
# (code, message) for a node this executor could never run where the plan puts it (a
# node that reads its predecessor's provider_refs behind the wrong node). Template
# creation (services.templates.check_executors) refuses such a plan with a 422.
# `health()` is optional on both: `async def health(self) -> HealthReport`.
# Absent, the executor_health worker keeps health_state = 'unknown'.
