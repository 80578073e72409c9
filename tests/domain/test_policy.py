"""Treasury policy rules (issue 45): parsing refuses what cannot be used, naming
its path; evaluation is first match, with the book, ranges and accumulation."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest
from treasury_policy import treasury_policy

from qtg.domain.policy import (
    Approvals,
    BookEntry,
    Facts,
    PolicyError,
    eligible_approvers,
    evaluate,
    parse_policy,
)

TREASURY: dict[str, Any] = treasury_policy(small_delay_seconds=60)


def facts(amount: str = "100", *, entries: tuple[BookEntry, ...] = (), **over: Any) -> Facts:
    base: dict[str, Any] = {
        "template": "evm.transfer",
        "action_types": frozenset({"evm_transfer"}),
        "network_class": "default",
        "sources": frozenset(),
        "asset": "USDC",
        "amount": Decimal(amount),
        "destination": "0xabc",
        "chain": None,
        "initiator": "alice",
        "entries": entries,
    }
    return Facts(**{**base, **over})


def entry(usable: bool = True, tags: frozenset[str] = frozenset()) -> BookEntry:
    return BookEntry("ops", "31337", "USDC", "0xabc", tags, usable)


POLICY = parse_policy(TREASURY)
BOOKED = (entry(),)


def test_first_match_decides_by_amount() -> None:
    small = evaluate(POLICY, facts("50000", entries=BOOKED), {})
    assert (small.rule, small.approvals.count, small.delay_seconds) == ("small", 2, 60)
    large = evaluate(POLICY, facts("50000.01", entries=BOOKED), {})
    assert (large.rule, large.approvals, large.delay_seconds) == (
        "large",
        Approvals(3, group="treasury"),
        0,
    )


def test_outside_the_book_or_cooling_off_falls_to_block_all() -> None:
    outside = evaluate(POLICY, facts(), {})
    assert (outside.rule, outside.blocked) == ("block-all", True)
    cooling = evaluate(POLICY, facts(entries=(entry(usable=False),)), {})
    assert cooling.blocked and cooling.detail["destination_cooling_off"] is True


def test_accumulation_blocks_the_movement_that_would_cross() -> None:
    fits = evaluate(POLICY, facts("100", entries=BOOKED), {"daily-cap": Decimal("999900")})
    assert fits.rule == "small"
    crosses = evaluate(POLICY, facts("100.01", entries=BOOKED), {"daily-cap": Decimal("999900")})
    assert (crosses.rule, crosses.blocked) == ("daily-cap", True)
    assert crosses.detail["accumulated"] == "999900"
    # another asset is not summed by a USDC rule and not matched by it either
    eth = evaluate(POLICY, facts("5", asset="ETH", entries=BOOKED), {"daily-cap": Decimal("1e9")})
    assert eth.rule == "block-all"


def test_destination_tag_and_entry_conditions() -> None:
    doc = {
        "rules": [
            {"name": "by-tag", "destination": {"tag": "exchange"}, "action": "allow"},
            {"name": "by-label", "destination": {"entry": "ops"}, "action": "allow"},
            {"name": "anywhere", "destination": "any", "asset": ["ETH"], "action": "allow"},
            {"name": "block-all", "action": "block"},
        ]
    }
    p = parse_policy(doc)
    assert evaluate(p, facts(entries=(entry(tags=frozenset({"exchange"})),)), {}).rule == "by-tag"
    assert evaluate(p, facts(entries=BOOKED), {}).rule == "by-label"
    assert evaluate(p, facts(asset="ETH"), {}).rule == "anywhere"
    assert evaluate(p, facts(), {}).rule == "block-all"
    # default approvals: today's rule, one operator
    assert evaluate(p, facts(entries=BOOKED), {}).approvals == Approvals(1, role="operator")


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d["rules"].pop(), "rules[2]"),
        (lambda d: d["rules"][-1].update(asset="USDC"), "rules[3]"),
        (lambda d: d["rules"][1]["approvals"].update(group="nobody"), "rules[1].approvals.group"),
        (lambda d: d["rules"][1]["approvals"].update(count=4), "rules[1].approvals.count"),
        (lambda d: d["rules"][1]["approvals"].update(count=0), "rules[1].approvals.count"),
        (lambda d: d["rules"][1]["amount"].update(gt=50000), "rules[1].amount.gt"),
        (
            lambda d: d["rules"][0]["accumulation"].update(scope="moon"),
            "rules[0].accumulation.scope",
        ),
        (lambda d: d["rules"][2].update(name="large"), "rules[2].name"),
        (lambda d: d["rules"][2].update(colour="red"), "rules[2].colour"),
        (lambda d: d["rules"][0].update(approvals={"count": 1, "role": "admin"}), "rules[0]"),
        (lambda d: d["rules"][2].update(destination="elsewhere"), "rules[2].destination"),
    ],
)
def test_unusable_documents_are_refused_naming_the_path(mutate: Any, path: str) -> None:
    doc = copy.deepcopy(TREASURY)
    mutate(doc)
    with pytest.raises(PolicyError) as info:
        parse_policy(doc)
    assert info.value.path == path


def test_approvers_are_distinct_eligible_and_never_the_creator() -> None:
    group = Approvals(2, group="treasury")
    given = [("alice", "operator"), ("tina", "operator"), ("bob", "admin"), ("tina", "operator")]
    assert eligible_approvers(group, POLICY.groups, given, "alice") == ["tina"]
    # the creator never counts, even when in the group
    assert eligible_approvers(group, POLICY.groups, [("tom", "operator")], "tom") == []
    role = Approvals(2, role="admin")
    assert eligible_approvers(role, POLICY.groups, given, "alice") == ["bob"]
