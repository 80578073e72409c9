"""`$ref:node_key.field` parsing and resolution against completed nodes' provider_refs."""

from __future__ import annotations

from typing import Any

import pytest

from qtg.domain.refs import ConfigRefResolutionError, parse_ref, referenced_nodes, resolve_refs


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("$ref:withdraw.txid", ("withdraw", "txid")),
        ("$ref:withdraw.receipt.txid", ("withdraw", "receipt.txid")),
        ("$ref:n_2.Field-1", ("n_2", "Field-1")),
        ("withdraw.txid", None),
        ("ref:withdraw.txid", None),
        (" $ref:withdraw.txid", None),
        ("", None),
        (42, None),
        (None, None),
        ({"$ref:a.b": 1}, None),
    ],
)
def test_parse_ref(value: Any, parsed: tuple[str, str] | None) -> None:
    assert parse_ref(value) == parsed


@pytest.mark.parametrize(
    "value",
    [
        "$ref:",
        "$ref:withdraw",
        "$ref:.txid",
        "$ref:withdraw.",
        "$ref:withdraw..txid",
        "$ref:Withdraw.txid",
        "$ref:with draw.txid",
        "$ref:withdraw.tx id",
        "$ref:1a.txid",
    ],
)
def test_parse_ref_malformed_raises_naming_the_value(value: str) -> None:
    with pytest.raises(ValueError, match="malformed reference") as info:
        parse_ref(value)
    assert repr(value) in str(info.value)


def test_referenced_nodes_top_level_only() -> None:
    config = {
        "txid": "$ref:withdraw.txid",
        "again": "$ref:withdraw.amount",
        "src": "$ref:burn.receipt.hash",
        "nested": {"x": "$ref:deep.x"},
        "listed": ["$ref:deep.y"],
        "plain": "sandbox",
        "n": 3,
    }
    assert referenced_nodes(config) == {"withdraw", "burn"}
    assert referenced_nodes({}) == set()


REFS = {
    "withdraw": {"txid": "0xabc", "receipt": {"txid": "0xdef", "block": 7}, "nothing": None},
    "burn": {"hash": "0x01", "amounts": [1, 2]},
}


def test_resolve_replaces_top_level_refs_and_copies_the_rest() -> None:
    config = {
        "txid": "$ref:withdraw.txid",
        "deep": "$ref:withdraw.receipt.txid",
        "sub": "$ref:withdraw.receipt",
        "amounts": "$ref:burn.amounts",
        "nested": {"x": "$ref:withdraw.txid"},
        "venue": "sandbox",
        "n": 3,
    }
    out = resolve_refs("mint", config, REFS)
    assert out == {
        "txid": "0xabc",
        "deep": "0xdef",
        "sub": {"txid": "0xdef", "block": 7},
        "amounts": [1, 2],
        "nested": {"x": "$ref:withdraw.txid"},  # nested values are not resolved
        "venue": "sandbox",
        "n": 3,
    }
    # the result shares nothing mutable with its inputs
    out["sub"]["block"] = 8
    out["amounts"].append(3)
    out["nested"]["x"] = "changed"
    assert REFS["withdraw"]["receipt"]["block"] == 7 and REFS["burn"]["amounts"] == [1, 2]
    assert config["nested"] == {"x": "$ref:withdraw.txid"}


def test_resolve_without_refs_is_a_copy() -> None:
    assert resolve_refs("a", {}, {}) == {}
    assert resolve_refs("a", {"k": "v"}, {}) == {"k": "v"}


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        ("$ref:bridge.txid", "'bridge' has not completed"),
        ("$ref:withdraw.fee", "no field 'fee'"),
        ("$ref:withdraw.receipt.fee", "'withdraw.receipt' have no field 'fee'"),
        ("$ref:withdraw.txid.inner", "'withdraw.txid' have no field 'inner'"),  # not a mapping
        ("$ref:withdraw.nothing", "is null"),
        ("$ref:withdraw", "malformed reference"),
    ],
)
def test_unresolvable_refs_raise_naming_node_and_ref(ref: str, reason: str) -> None:
    with pytest.raises(ConfigRefResolutionError) as info:
        resolve_refs("mint", {"ok": "$ref:burn.hash", "x": ref}, REFS)
    err = info.value
    assert (err.node_key, err.ref) == ("mint", ref)
    assert "'mint'" in str(err) and repr(ref) in str(err) and reason in str(err)
