"""The non-recursive depth and size scan every entry point runs before decoding (issue 44)."""

from __future__ import annotations

import json
import sys

import pytest

from qtg.domain import bounded_json
from qtg.domain.bounded_json import JsonTooDeep, JsonTooLarge, depth, loads, scan


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"1", 0),
        (b'"[[[{{"', 0),  # brackets inside a string do not count
        (b'"\\"[["', 0),  # nor after an escaped quote
        (b'["\\\\", [[]]]', 3),  # an escaped backslash ends before the quote
        (b'{"a": [1, {"b": "]]]"}], "c": {}}', 3),
        (b"[[],[[]],[]]", 3),
        (b"]]]]", 0),
        ('{"é": ["ü"]}', 2),
    ],
)
def test_depth_matches_the_nesting(raw: bytes | str, expected: int) -> None:
    assert depth(raw) == expected
    if expected and isinstance(raw, bytes) and not raw.startswith(b"]"):
        assert _nesting(json.loads(raw)) == expected


def _nesting(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_nesting, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_nesting, value), default=0)
    return 0


def test_the_limit_is_inclusive() -> None:
    scan(b"[" * 64 + b"]" * 64)
    with pytest.raises(JsonTooDeep) as caught:
        scan(b"[" * 65 + b"]" * 65)
    assert caught.value.max_depth == 64 and caught.value.code == "JSON_TOO_DEEP"


def test_the_scan_does_not_depend_on_the_recursion_limit() -> None:
    """100,000 levels and a recursion limit of 100,000 (what py_ecc sets): refused, no descent."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(100_000)
    try:
        deep = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
        with pytest.raises(JsonTooDeep):
            loads(deep)
    finally:
        sys.setrecursionlimit(before)


def test_size_is_bounded_before_depth() -> None:
    with pytest.raises(JsonTooLarge) as caught:
        scan(b"[" * 10 + b"]" * 10, max_bytes=8)
    assert (caught.value.size, caught.value.max_bytes) == (20, 8)


def test_refusals_are_value_errors_so_callers_treat_them_as_undecodable() -> None:
    assert issubclass(bounded_json.BoundedJsonError, ValueError)
    assert loads(b'{"x": [1, 2]}') == {"x": [1, 2]}
    assert loads('{"x": "y"}') == {"x": "y"}
