"""executor_health (reference §6): health of every registered executor and signer,
and the signer-identity registry evidence.

Each pass calls `health()` on every executor and signer this runtime has
registered, concurrently and each under MG_EXECUTOR_HEALTH_TIMEOUT_SECONDS (a
hung provider is recorded as unhealthy, it does not stall the pass), and
persists the result. A provider without `health()` stays 'unknown'. Rows for
providers this runtime no longer registers are marked `registered = false`
(orphans). All runtimes on one database are expected to register the same
providers (the same MG_PROVIDERS); one that does not would flip rows back and
forth between passes.

Signer identity has two sides with exactly one writer each:
- `observed_signer_address` — written only by this worker: the address a
  signer's `health()` reports, accepted only if it is a nonzero EVM address
  (`0x` + 40 hex digits, not all zeros), stored lowercase; cleared when the
  signer reports none or an invalid one, and when the signer disappears and
  its row becomes an orphan.
- `expected_signer_address` — written only by `set_expected_signer_identity`
  (the admin endpoint PUT /v3/signers/{signer_key}/expected-identity).
The identity posture (match, mismatch, unenrolled, unobserved, orphan) is not
stored: `signer_roster` derives it when read, so it can never disagree with
the two addresses it is made from. Enforcing it at movement or rotation time
is deliberately out of scope (reference §6).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from qtg.db import Database, Jsonb, sql_family
from qtg.providers.base import HealthReport, HealthState
from qtg.services.auditing import record_audit
from qtg.services.context import ServiceContext
from qtg.services.errors import InvalidInput, NotFound

SQL = sql_family(
    "health",
    "lock",
    "upsert_executor",
    "orphan_executors",
    "upsert_signer",
    "orphan_signers",
    "list_signers",
    "list_executors",
    "lock_signer",
    "set_expected",
)

UNKNOWN = "unknown"
UNHEALTHY = HealthState.UNHEALTHY.value
_EVM_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
_ZERO_ADDRESS = "0x" + "0" * 40
_MAX_ERROR = 300

# ------------------------------------------------------------------ rules


def normalize_evm_address(value: object) -> str:
    """The canonical (lowercase) form of a nonzero EVM address; ValueError says why not."""
    if not isinstance(value, str) or not _EVM_ADDRESS.fullmatch(value):
        raise ValueError("must be an EVM address: 0x followed by 40 hex digits")
    lowered = value.lower()
    if lowered == _ZERO_ADDRESS:
        raise ValueError("must not be the zero address")
    return lowered


def identity_posture(*, registered: bool, expected: str | None, observed: str | None) -> str:
    """orphan (runtime no longer has the signer) > unenrolled (no expected identity)
    > unobserved (no observation) > match / mismatch."""
    if not registered:
        return "orphan"
    if expected is None:
        return "unenrolled"
    if observed is None:
        return "unobserved"
    return "match" if expected == observed else "mismatch"


@dataclass(frozen=True, slots=True)
class Probe:
    """What one health() call told us."""

    health_state: str
    detail: dict[str, Any] = field(default_factory=dict)
    reported: bool = False  # health() exists and was called (answered, failed or timed out)
    report: HealthReport | None = None  # the answer, when there was a valid one


def observation(probe: Probe) -> tuple[bool, str | None, str | None]:
    """(replace the observation?, new observed address, why an address was refused).

    No valid report → keep the old observation (no new evidence). A report →
    its address if valid, else NULL (a signer reporting no, or a bad, address
    is not vouching for the old one any more).
    """
    if probe.report is None:
        return False, None, None
    if probe.report.signer_address is None:
        return True, None, None
    try:
        return True, normalize_evm_address(probe.report.signer_address), None
    except ValueError as exc:
        return True, None, f"signer_address {exc}"


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}"[:_MAX_ERROR] if text else type(exc).__name__


async def probe(provider: object, limit_seconds: float) -> Probe:
    """Call `provider.health()` if it has one, bounded by `limit_seconds`."""
    health = getattr(provider, "health", None)
    if not callable(health):
        return Probe(UNKNOWN)
    try:
        with trio.fail_after(limit_seconds):
            report = await health()
    except trio.TooSlowError:
        return Probe(UNHEALTHY, {"error": f"health() timed out after {limit_seconds:g}s"}, True)
    except Exception as exc:
        return Probe(UNHEALTHY, {"error": _error_text(exc)}, True)
    if not isinstance(report, HealthReport):
        return Probe(
            UNHEALTHY,
            {"error": f"health() returned {type(report).__name__}, not a HealthReport"},
            True,
        )
    try:
        state = HealthState(report.state).value
        detail = msgspec.json.decode(msgspec.json.encode(dict(report.detail)))
    except (ValueError, TypeError, msgspec.MsgspecError) as exc:
        return Probe(UNHEALTHY, {"error": f"health() report unusable: {_error_text(exc)}"}, True)
    return Probe(state, detail, True, report)


# ------------------------------------------------------------------- pass


async def refresh_executor_health(ctx: ServiceContext) -> int:
    """The executor_health pass: probe everything, persist it in one transaction.

    Returns how many executors and signers it probed. This is a periodic
    probe, not a queue: the worker registry declares it `drain=False`, so a
    productive pass is not re-run at once (every provider's health() in a
    tight loop), and its heartbeat still counts what it looked at.
    """
    executors = ctx.providers.executors()
    signers = ctx.providers.signers()
    timeout = ctx.settings.executor_health_timeout_seconds
    executor_probes: dict[str, Probe] = {}
    signer_probes: dict[str, Probe] = {}

    async def run(target: dict[str, Probe], key: str, provider: object) -> None:
        target[key] = await probe(provider, timeout)

    async with trio.open_nursery() as nursery:
        for executor in executors:
            nursery.start_soon(run, executor_probes, executor.key, executor)
        for signer in signers:
            nursery.start_soon(run, signer_probes, signer.key, signer)

    async with ctx.db.transaction() as tx:
        await tx.execute(SQL.lock)
        for executor in executors:
            result = executor_probes[executor.key]
            await tx.execute(
                SQL.upsert_executor,
                {
                    "key": executor.key,
                    "action_types": sorted(executor.action_types),
                    "health_state": result.health_state,
                    "health_detail": Jsonb(result.detail),
                    "reported": result.reported,
                },
            )
        await tx.execute(SQL.orphan_executors, {"keys": [e.key for e in executors]})
        for signer in signers:
            result = signer_probes[signer.key]
            observe, observed, refused = observation(result)
            detail = dict(result.detail)
            if refused:
                detail["signer_address_error"] = refused
            await tx.execute(
                SQL.upsert_signer,
                {
                    "key": signer.key,
                    "health_state": result.health_state,
                    "health_detail": Jsonb(detail),
                    "reported": result.reported,
                    "observe": observe,
                    "observed": observed,
                },
            )
        await tx.execute(SQL.orphan_signers, {"keys": [s.key for s in signers]})
    return len(executors) + len(signers)


# -------------------------------------------------------------- read models


async def executor_roster(db: Database) -> list[dict[str, Any]]:
    """Every executor row (GET /v3/executors)."""
    return await db.fetch(SQL.list_executors)


async def signer_roster(db: Database) -> list[dict[str, Any]]:
    """Every signer row with its identity posture derived now (GET /v3/signers)."""
    rows = await db.fetch(SQL.list_signers)
    for row in rows:
        row["identity_posture"] = identity_posture(
            registered=row["registered"],
            expected=row["expected_signer_address"],
            observed=row["observed_signer_address"],
        )
    return rows


# ------------------------------------------------------------ enrollment


async def set_expected_signer_identity(
    db: Database, signer_key: str, address: object, *, actor: str
) -> dict[str, Any]:
    """Enroll the address `signer_key` is expected to sign as (the sole writer of
    expected_signer_address). Returns the signer's roster entry."""
    try:
        expected = normalize_evm_address(address)
    except ValueError as exc:
        raise InvalidInput(
            f"expected_signer_address {exc}", detail={"field": "expected_signer_address"}
        ) from None
    async with db.transaction() as tx:
        row = await tx.fetchrow(SQL.lock_signer, {"key": signer_key})
        if row is None:
            raise NotFound(
                f"signer {signer_key!r} not found (signers appear once a runtime registers them)",
                detail={"signer_key": signer_key},
            )
        await tx.execute(SQL.set_expected, {"key": signer_key, "address": expected, "actor": actor})
        await record_audit(
            tx,
            actor=actor,
            action="signer.expected_identity_set",
            object_type="signer",
            object_id=signer_key,
            detail={"previous": row["expected_signer_address"], "expected": expected},
        )
    return next(r for r in await signer_roster(db) if r["signer_key"] == signer_key)
