"""The sandbox executor: a provider that behaves like a remote system, with no network.

Its "remote system" is the `sandbox_submissions` table (migration 0003).
Every call that would cross the network runs in its OWN transaction on its own
pooled connection, never the caller's: a submission must stay done when the
dispatcher's transaction rolls back, exactly as a withdrawal at an exchange
does. That is what lets `recover()` answer "did it happen?" with the truth
after a crash between the write-ahead commit and submit's return. Calls in
flight together share that transaction (qtg/providers/coalesce.py: the submits
of a dispatch batch, the observations of the observer's lanes), as a remote API
that takes batches would: one statement and one commit for all of them, all
or none.

Money-safety properties the tests prove:
- `submit()` is idempotent on the idempotency key (INSERT … ON CONFLICT): a
  repeated or concurrent call makes no second side effect, returns the
  original refs, and is counted in `duplicate_submits`.
- a signature lane refuses (SubmitRejected, before any side effect) a payload
  whose hash is wrong or whose signature does not verify.
- `recover()` reports SUBMITTED/COMPLETED only if the row exists,
  NOT_SUBMITTED only if it does not (unless told to be undecided).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import trio

from qtg.db import Database, Jsonb, sql_family
from qtg.domain.context import ExecutionContext
from qtg.providers.base import (
    HealthReport,
    HealthState,
    ObserveResult,
    ObserveStatus,
    PreflightError,
    PreparedAction,
    ProviderError,
    RecoverOutcome,
    RecoverResult,
    SubmitRejected,
    SubmitResult,
)
from qtg.providers.coalesce import Coalescer
from qtg.providers.sandbox.behaviour import (
    Behaviour,
    Fail,
    Recover,
    SandboxConfigError,
    parse_behaviour,
)
from qtg.providers.sandbox.lanes import (
    ACTION_TYPES,
    LANES,
    OBSERVE_ACTION_TYPES,
    SIDE_EFFECT_ACTION_TYPES,
    SIGNER_KEY,
    Lane,
    build_payload,
    completion_artifacts,
    observed_refs,
    sha256_hex,
    submission_refs,
)
from qtg.providers.sandbox.signer import SandboxSigner

SQL = sql_family(
    "sandbox",
    "record_submission",
    "observe_submission",
    "observe_only",
    "find_submission",
    "find_observation",
    "list_submissions",
    "ping",
)

EXECUTOR_KEY = "sandbox"


class SandboxCrash(RuntimeError):
    """An injected crash inside submit: to the caller, the outcome is unknown."""


@dataclass(frozen=True, slots=True)
class Submitted:
    """One submit as the remote system records it (a row of sandbox_submissions)."""

    idempotency_key: str
    request_id: str
    request_node_id: str
    attempt_no: int
    action_type: str
    payload_hash: str
    signature: str | None
    provider_refs: dict[str, Any]
    artifacts: dict[str, Any]


class SandboxExecutor:
    """One executor serving every sandbox lane (see lanes.py)."""

    action_types: frozenset[str] = ACTION_TYPES
    side_effect_action_types: frozenset[str] = SIDE_EFFECT_ACTION_TYPES
    observe_action_types: frozenset[str] = OBSERVE_ACTION_TYPES

    def __init__(
        self,
        db: Database,
        signer: SandboxSigner,
        *,
        key: str = EXECUTOR_KEY,
        default_latency_ms: int = 0,
        health_state: HealthState = HealthState.HEALTHY,
    ) -> None:
        self.key = key
        self._db = db
        self._signer = signer
        self._default_latency_ms = default_latency_ms
        self._health_state = health_state
        # The remote system takes a batch of submits, and its status endpoints a
        # batch of keys, in one call (one statement, one commit), as the evm
        # provider's JSON-RPC batches do: dozens of observations in flight cost the
        # database one statement a scheduling round, not one each (issue 29 item 3).
        self._submissions: Coalescer[Submitted, dict[str, Any]] = Coalescer(
            self._record_submissions, name="sandbox submit", key=lambda s: s.idempotency_key
        )
        self._observe_only: Coalescer[str, int] = Coalescer(
            self._count_observations, name="sandbox observe_only"
        )
        self._observe_submissions: Coalescer[str, dict[str, Any]] = Coalescer(
            self._observe_submitted, name="sandbox observe_submission"
        )

    def __repr__(self) -> str:
        return f"SandboxExecutor(key={self.key!r})"

    # ---------------------------------------------------------------- preflight

    async def preflight(self, ctx: ExecutionContext) -> None:
        """Executor-side checks before anything is prepared: the node's sandbox config,
        the injected refusal, and the plan's `max_amount` risk control."""
        lane = self._lane(ctx, PreflightError)
        try:
            behaviour = self._behaviour(ctx)
        except SandboxConfigError as exc:
            raise PreflightError(exc.detail, code=exc.code) from None
        if behaviour.fail is Fail.PREFLIGHT:
            raise PreflightError("injected preflight refusal", code=behaviour.failure_code())
        if lane.side_effect:  # risk controls limit what moves; watching moves nothing
            check_amount_limit(ctx)

    # ------------------------------------------------------------------ prepare

    async def prepare(self, ctx: ExecutionContext) -> PreparedAction:
        lane = self._lane(ctx, ProviderError)
        behaviour = self._behaviour(ctx)
        if behaviour.fail is Fail.PREPARE:
            raise ProviderError("injected prepare failure", code=behaviour.failure_code())
        payload_format, payload = build_payload(lane, ctx)
        return PreparedAction(
            action_type=lane.action_type,
            payload_format=payload_format,
            payload=payload,
            payload_hash=sha256_hex(payload),
            needs_signature=lane.needs_signature,
            signer_key=self._signer.key if lane.needs_signature else None,
        )

    # ------------------------------------------------------------------- submit

    async def submit(
        self,
        ctx: ExecutionContext,
        prepared: PreparedAction,
        signature: str | None,
        idempotency_key: str,
    ) -> SubmitResult:
        lane = self._lane(ctx, SubmitRejected)
        behaviour = self._behaviour(ctx)
        if not idempotency_key:
            raise SubmitRejected("an idempotency key is required", code="IDEMPOTENCY_KEY_MISSING")
        if prepared.action_type != lane.action_type:
            raise SubmitRejected(
                f"prepared action is {prepared.action_type!r}, node is {lane.action_type!r}",
                code="ACTION_TYPE_MISMATCH",
            )
        if sha256_hex(prepared.payload) != prepared.payload_hash:
            raise SubmitRejected(
                "payload does not hash to payload_hash", code="PAYLOAD_HASH_MISMATCH"
            )
        if lane.needs_signature and not self._signer.verify(prepared.payload, signature):
            raise SubmitRejected(
                f"{lane.action_type} needs a valid signature by signer {self._signer.key!r}",
                code="SIGNATURE_INVALID",
            )
        if behaviour.fail is Fail.SUBMIT_REJECTED:
            raise SubmitRejected("injected submit refusal", code=behaviour.failure_code())
        if behaviour.fail is Fail.SUBMIT_CRASH_BEFORE:
            raise SandboxCrash("injected crash before the side effect")

        refs = submission_refs(lane, idempotency_key)
        artifacts = completion_artifacts(lane, idempotency_key, refs, ctx.intent)
        # One statement for the submits in flight together: the remote system's own
        # transaction (one round trip), none of them the caller's
        row = await self._submissions.ask(
            Submitted(
                idempotency_key,
                ctx.request_id,
                ctx.request_node_id,
                ctx.attempt_no,
                lane.action_type,
                prepared.payload_hash,
                signature,
                refs,
                artifacts,
            )
        )
        if row is None:  # the INSERT … ON CONFLICT returns every key it was given
            raise ProviderError("the remote system recorded no submission")
        if behaviour.fail is Fail.SUBMIT_CRASH_AFTER:
            raise SandboxCrash("injected crash after the side effect")
        if not row["inserted"] and row["payload_hash"] != prepared.payload_hash:
            # The key was used for another payload: the side effect that happened is
            # the first one. Not SubmitRejected (which would mean "nothing happened").
            raise ProviderError(
                f"idempotency key {idempotency_key!r} was already used for another payload",
                code="IDEMPOTENCY_KEY_REUSED",
            )
        await _latency(behaviour)
        return SubmitResult(provider_refs=dict(row["provider_refs"]))

    # ------------------------------------------------------------------ observe

    async def observe(self, ctx: ExecutionContext) -> ObserveResult:
        lane = self._lane(ctx, ProviderError)
        behaviour = self._behaviour(ctx)
        if ctx.node_kind == "observe":
            count = await self._observe_only.ask(ctx.request_node_id)
            if count is None:  # the INSERT … ON CONFLICT returns every key it was given
                raise ProviderError("the observation counter returned no count")
            refs = observed_refs(lane, ctx.request_node_id, ctx.provider_context)
            artifacts = completion_artifacts(lane, ctx.request_node_id, refs, ctx.intent)
        else:
            if not ctx.idempotency_key:
                return _no_key_observation()
            row = await self._observe_submissions.ask(ctx.idempotency_key)
            if row is None:
                await _latency(behaviour)
                return ObserveResult(
                    status=ObserveStatus.UNKNOWN,
                    error_code="NOT_SUBMITTED",
                    error_detail=f"no submission under idempotency key {ctx.idempotency_key!r}",
                )
            count, refs, artifacts = row["observe_count"], row["provider_refs"], row["artifacts"]
        await _latency(behaviour)
        if count < behaviour.observations_to_complete:
            return ObserveResult(
                status=ObserveStatus.PENDING,
                provider_refs=refs,
                retry_after_seconds=behaviour.retry_after_seconds,
            )
        if behaviour.fail is Fail.OBSERVE_FAILED:
            return ObserveResult(
                status=ObserveStatus.FAILED,
                provider_refs=refs,
                error_code=behaviour.failure_code(),
                error_detail="injected: the provider reports the transfer failed",
            )
        if behaviour.fail is Fail.OBSERVE_UNKNOWN:
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                provider_refs=refs,
                error_code=behaviour.failure_code(),
                error_detail="injected: the provider cannot tell the transfer's status",
            )
        return ObserveResult(
            status=ObserveStatus.COMPLETED, provider_refs=refs, artifacts=artifacts
        )

    async def _record_submissions(self, batch: Sequence[Submitted]) -> dict[str, dict[str, Any]]:
        rows = await self._db.fetch(
            SQL.record_submission,
            {
                "idempotency_keys": [s.idempotency_key for s in batch],
                "request_ids": [s.request_id for s in batch],
                "request_node_ids": [s.request_node_id for s in batch],
                "attempt_nos": [s.attempt_no for s in batch],
                "action_types": [s.action_type for s in batch],
                "payload_hashes": [s.payload_hash for s in batch],
                "signatures": [s.signature for s in batch],
                "provider_refs": [Jsonb(s.provider_refs) for s in batch],
                "artifacts": [Jsonb(s.artifacts) for s in batch],
            },
        )
        return {r["idempotency_key"]: r for r in rows}

    async def _count_observations(self, node_ids: Sequence[str]) -> dict[str, int]:
        rows = await self._db.fetch(SQL.observe_only, {"request_node_ids": list(node_ids)})
        return {r["request_node_id"]: r["observe_count"] for r in rows}

    async def _observe_submitted(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        rows = await self._db.fetch(SQL.observe_submission, {"idempotency_keys": list(keys)})
        return {r["idempotency_key"]: r for r in rows}

    # ------------------------------------------------------------------ recover

    async def recover(self, ctx: ExecutionContext) -> RecoverResult:
        """What really happened, from the remote system's records.

        An `observe_unknown` lane's status endpoint cannot tell, but this deeper
        lookup can: a submission whose observations are complete is COMPLETED.
        """
        lane = self._lane(ctx, ProviderError)
        behaviour = self._behaviour(ctx)
        if behaviour.recover is Recover.UNDECIDED:
            await _latency(behaviour)
            return RecoverResult(
                outcome=RecoverOutcome.UNKNOWN,
                error_code="SANDBOX_RECOVER_UNDECIDED",
                error_detail="injected: the provider cannot tell yet",
            )
        if ctx.node_kind == "observe":  # nothing was sent: observing again is always safe
            count = await self._db.fetchval(
                SQL.find_observation, {"request_node_id": ctx.request_node_id}
            )
            refs = observed_refs(lane, ctx.request_node_id, ctx.provider_context)
            artifacts = completion_artifacts(lane, ctx.request_node_id, refs, ctx.intent)
            await _latency(behaviour)
            return _recovered(behaviour, count or 0, refs, artifacts)
        if not ctx.idempotency_key:
            return RecoverResult(
                outcome=RecoverOutcome.UNKNOWN,
                error_code="IDEMPOTENCY_KEY_MISSING",
                error_detail="the node has no idempotency key: cannot look the submission up",
            )
        row = await self._db.fetchrow(SQL.find_submission, {"idempotency_key": ctx.idempotency_key})
        await _latency(behaviour)
        if row is None:  # the sandbox's records are complete: provably never sent
            return RecoverResult(
                outcome=RecoverOutcome.NOT_SUBMITTED,
                error_code="NOT_SUBMITTED",
                error_detail=f"no submission under idempotency key {ctx.idempotency_key!r}",
            )
        return _recovered(behaviour, row["observe_count"], row["provider_refs"], row["artifacts"])

    # ------------------------------------------------------------------- health

    async def health(self) -> HealthReport:
        detail: dict[str, Any] = {"provider": "sandbox", "action_types": len(self.action_types)}
        try:
            await self._db.fetchval(SQL.ping)
        except Exception as exc:  # the health report is the place to say so
            return HealthReport(
                state=HealthState.UNHEALTHY,
                detail={**detail, "error": type(exc).__name__},
            )
        return HealthReport(state=self._health_state, detail=detail)

    # ----------------------------------------------------------------- helpers

    def _lane(self, ctx: ExecutionContext, error: type[ProviderError]) -> Lane:
        lane = LANES.get(ctx.action_type)
        if lane is None:
            raise error(
                f"the sandbox has no lane for action_type {ctx.action_type!r}",
                code="UNSUPPORTED_ACTION_TYPE",
            )
        return lane

    def _behaviour(self, ctx: ExecutionContext) -> Behaviour:
        return parse_behaviour(ctx.node_config, self._default_latency_ms)


def check_amount_limit(ctx: ExecutionContext) -> None:
    """The plan's `risk_controls.max_amount` (a decimal string) against `intent.amount`."""
    limit_raw = ctx.risk_controls.get("max_amount")
    if limit_raw is None:
        return
    limit = _decimal(limit_raw)
    if limit is None:
        raise PreflightError(
            f"risk_controls.max_amount is not a decimal: {limit_raw!r}", code="RISK_CONTROL_INVALID"
        )
    if "amount" not in ctx.intent:
        raise PreflightError(
            "risk_controls.max_amount is set but the intent has no amount", code="AMOUNT_MISSING"
        )
    amount = _decimal(ctx.intent["amount"])
    if amount is None:
        raise PreflightError(
            f"intent.amount is not a decimal: {ctx.intent['amount']!r}", code="AMOUNT_INVALID"
        )
    if amount > limit:
        raise PreflightError(
            f"intent.amount {amount} exceeds risk_controls.max_amount {limit}",
            code="RISK_LIMIT_EXCEEDED",
        )


def _decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        parsed = Decimal(str(value))
    except InvalidOperation:
        return None
    return parsed if parsed.is_finite() else None


def _recovered(
    behaviour: Behaviour, count: int, refs: dict[str, Any], artifacts: dict[str, Any]
) -> RecoverResult:
    if count < behaviour.observations_to_complete:
        return RecoverResult(outcome=RecoverOutcome.SUBMITTED, provider_refs=refs)
    if behaviour.fail is Fail.OBSERVE_FAILED:
        return RecoverResult(
            outcome=RecoverOutcome.FAILED,
            provider_refs=refs,
            error_code=behaviour.failure_code(),
            error_detail="the provider reports the transfer failed",
        )
    return RecoverResult(outcome=RecoverOutcome.COMPLETED, provider_refs=refs, artifacts=artifacts)


def _no_key_observation() -> ObserveResult:
    return ObserveResult(
        status=ObserveStatus.UNKNOWN,
        error_code="IDEMPOTENCY_KEY_MISSING",
        error_detail="the node has no idempotency key: cannot look the submission up",
    )


async def _latency(behaviour: Behaviour) -> None:
    """The simulated round trip: sleeping IS this provider's behaviour, not a wait."""
    if behaviour.latency_ms:
        await trio.sleep(behaviour.latency_ms / 1000)


async def submissions(db: Database) -> list[dict[str, Any]]:
    """Every sandbox submission, oldest first: what tests count to prove exactly-once."""
    return await db.fetch(SQL.list_submissions)


__all__ = [
    "SIGNER_KEY",
    "SandboxCrash",
    "SandboxExecutor",
    "check_amount_limit",
    "submissions",
]
