"""Observation cadence, observation timeouts and recovery lanes (reference §2, §3).

Pure rules; the observer and recovery services apply them to rows they loaded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

#: Reference, "Default observation intervals" (seconds); any other action_type: 10.
DEFAULT_OBSERVE_INTERVALS: Mapping[str, float] = MappingProxyType(
    {
        "cex_withdrawal_status": 5,
        "cex_deposit_status": 10,
        "destination_chain_receive_observe": 10,
        "destination_chain_finality_observe": 15,
        "protocol_observe": 15,
        "cctp_attestation": 15,
        "cctp_mint_status": 5,
        "ccip_delivery": 60,
        "debridge_fulfillment": 30,
    }
)
DEFAULT_OBSERVE_INTERVAL: float = 10
#: Upper bound of an executor's retry hint (reference: "clamped to MAX_BACKOFF_SECONDS=600").
MAX_BACKOFF_SECONDS = 600

#: Recovery arms in priority order (reference §3); each takes recovery_arm_size(batch).
RECOVERY_LANES = ("ccip", "stargate", "cex", "other")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)


def observe_interval(action_type: str, retry_after_seconds: float | None) -> float:
    """Seconds until the next observation.

    The executor's retry_after_seconds wins, clamped to at most MAX_BACKOFF_SECONDS. A
    hint that is not a positive number (0, negative, NaN) is ignored in favour of the
    table: re-observing at once would let a misbehaving executor spin the observer.
    """
    if (
        retry_after_seconds is not None
        and _is_number(retry_after_seconds)
        and retry_after_seconds > 0
    ):
        return float(min(retry_after_seconds, MAX_BACKOFF_SECONDS))
    return float(DEFAULT_OBSERVE_INTERVALS.get(action_type, DEFAULT_OBSERVE_INTERVAL))


def _as_utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def observation_timed_out(
    timeout_policy: Mapping[str, object],
    started_at: datetime | None,
    now: datetime,
    *,
    enforcement_enabled: bool,
) -> bool:
    """True when enforcement is on and more than the positive observe_seconds have
    passed since started_at (reference, "Observation timeout enforcement").

    A missing, non-positive or non-numeric observe_seconds, or no started_at, never
    times out. Naive datetimes are taken as UTC.
    """
    if not enforcement_enabled or started_at is None:
        return False
    seconds = timeout_policy.get("observe_seconds")
    if not _is_number(seconds) or seconds <= 0 or math.isinf(seconds):  # type: ignore[operator,arg-type]
        return False
    return _as_utc(now) - _as_utc(started_at) > timedelta(seconds=seconds)  # type: ignore[arg-type]


def recovery_lane(action_type: str) -> str:
    """The recovery arm an action_type belongs to, by prefix."""
    for lane in RECOVERY_LANES[:-1]:
        if action_type.startswith(f"{lane}_"):
            return lane
    return "other"


def recovery_arm_size(batch_size: int) -> int:
    """Each arm's share of MG_NODE_RECOVERY_BATCH_SIZE: max(1, batch // 4)."""
    return max(1, batch_size // 4)
