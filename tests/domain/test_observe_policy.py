"""Observation intervals, retry-hint clamping, observation timeouts, recovery lanes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from qtg.domain.observe_policy import (
    DEFAULT_OBSERVE_INTERVALS,
    MAX_BACKOFF_SECONDS,
    RECOVERY_LANES,
    observation_timed_out,
    observe_interval,
    recovery_arm_size,
    recovery_lane,
)


@pytest.mark.parametrize(
    ("action_type", "seconds"),
    [
        ("cex_withdrawal_status", 5),
        ("cex_deposit_status", 10),
        ("destination_chain_receive_observe", 10),
        ("destination_chain_finality_observe", 15),
        ("protocol_observe", 15),
        ("cctp_attestation", 15),
        ("cctp_mint_status", 5),
        ("ccip_delivery", 60),
        ("debridge_fulfillment", 30),
        ("stargate_delivery", 10),
        ("anything_else", 10),
    ],
)
def test_default_intervals(action_type: str, seconds: float) -> None:
    assert observe_interval(action_type, None) == seconds


def test_table_is_the_reference_table_and_read_only() -> None:
    assert len(DEFAULT_OBSERVE_INTERVALS) == 9
    with pytest.raises(TypeError):
        DEFAULT_OBSERVE_INTERVALS["x"] = 1  # type: ignore[index]


@pytest.mark.parametrize(
    ("hint", "seconds"),
    [
        (1, 1.0),
        (0.25, 0.25),
        (120, 120.0),
        (600, 600.0),
        (601, 600.0),
        (86_400, 600.0),
        (float("inf"), 600.0),
        # not a positive number: ignored, the table applies (ccip_delivery: 60)
        (0, 60.0),
        (-5, 60.0),
        (float("nan"), 60.0),
        (True, 60.0),
        ("30", 60.0),
    ],
)
def test_retry_hint_wins_clamped_to_600(hint: Any, seconds: float) -> None:
    assert observe_interval("ccip_delivery", hint) == seconds
    assert MAX_BACKOFF_SECONDS == 600


T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("policy", "elapsed", "enabled", "expected"),
    [
        ({"observe_seconds": 1800}, 1801, True, True),
        ({"observe_seconds": 1800}, 1800, True, False),  # "exceeded": strictly more
        ({"observe_seconds": 1800}, 10, True, False),
        ({"observe_seconds": 1800}, 1801, False, False),  # enforcement off (the default)
        ({"observe_seconds": 0.5}, 1, True, True),
        ({}, 10**6, True, False),
        ({"observe_seconds": 0}, 10**6, True, False),
        ({"observe_seconds": -1}, 10**6, True, False),
        ({"observe_seconds": None}, 10**6, True, False),
        ({"observe_seconds": "60"}, 10**6, True, False),
        ({"observe_seconds": True}, 10**6, True, False),
        ({"observe_seconds": float("nan")}, 10**6, True, False),
        ({"observe_seconds": float("inf")}, 10**6, True, False),
    ],
)
def test_observation_timed_out(policy: dict, elapsed: float, enabled: bool, expected: bool) -> None:
    now = T0 + timedelta(seconds=elapsed)
    assert observation_timed_out(policy, T0, now, enforcement_enabled=enabled) is expected


def test_timeout_needs_a_start_and_handles_time_zones() -> None:
    policy = {"observe_seconds": 60}
    assert not observation_timed_out(policy, None, T0, enforcement_enabled=True)
    naive_start = datetime(2025, 1, 1, 12, 0)  # taken as UTC
    assert observation_timed_out(
        policy, naive_start, T0 + timedelta(seconds=61), enforcement_enabled=True
    )
    # the same instant expressed at +02:00 is not 2 hours later
    plus2 = (T0 + timedelta(seconds=30)).astimezone(timezone(timedelta(hours=2)))
    assert not observation_timed_out(policy, T0, plus2, enforcement_enabled=True)


@pytest.mark.parametrize(
    ("action_type", "lane"),
    [
        ("ccip_send", "ccip"),
        ("ccip_delivery", "ccip"),
        ("stargate_send", "stargate"),
        ("cex_withdrawal", "cex"),
        ("cex_deposit_status", "cex"),
        ("cctp_burn", "other"),
        ("debridge_send", "other"),
        ("ccipx", "other"),
        ("cex", "other"),
        ("manual_confirm", "other"),
    ],
)
def test_recovery_lane(action_type: str, lane: str) -> None:
    assert recovery_lane(action_type) == lane
    assert RECOVERY_LANES == ("ccip", "stargate", "cex", "other")


@pytest.mark.parametrize(
    ("batch", "arm"), [(0, 1), (1, 1), (3, 1), (4, 1), (7, 1), (8, 2), (10, 2), (40, 10)]
)
def test_recovery_arm_size(batch: int, arm: int) -> None:
    assert recovery_arm_size(batch) == arm
