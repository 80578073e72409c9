"""JSON whose size and nesting are bounded before any recursive parser sees it.

Python's `json` decoder (and msgspec's, and most others) descend one C frame
per level of nesting and stop only at the interpreter's recursion limit.
`py_ecc`, imported through eth-account, raises that limit to 100,000, far
beyond what the C stack holds: a 200 KB body of 100,000 `[` then segfaulted
the whole runtime (API and workers) with no log line (issue 44). A limit a
library may change is no bound; this module is.

`scan` measures depth without recursion and without decoding: strings are
cut out by one regular expression (so a `[` inside a string is not counted),
the remaining bytes are reduced to the four bracket characters, and a running
sum of +1/-1 gives the deepest level. Everything is done by C loops over the
bytes, so a hostile 1 MB body costs milliseconds, and nothing in it can
exhaust a stack. Every place input arrives from outside (the API's bodies,
provider answers, the event stream's messages to `qtg watch`) calls `loads`
or `scan` first.
"""

from __future__ import annotations

import json
import operator
import re
from itertools import accumulate, repeat
from typing import Any

#: The deepest nesting accepted anywhere. The deepest legitimate input (a
#: template's node config, a JSON-RPC receipt with its logs) is under 10.
MAX_DEPTH = 64

#: Largest provider answer decoded (a JSON-RPC batch of receipts with logs).
MAX_ANSWER_BYTES = 32 * 1024 * 1024

# A JSON string, escapes included ("unrolled loop": linear, no backtracking).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# Every byte but the four brackets is deleted; openers become 2, closers 0,
# so that (byte - 1) is the step of the running depth.
_KEEP = b"[]{}"
_DELETE = bytes(b for b in range(256) if b not in _KEEP)
_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


class BoundedJsonError(ValueError):
    """Input refused before decoding. A ValueError, so that callers that
    already treat undecodable JSON as "no answer" treat this one the same."""

    code = "JSON_REFUSED"


class JsonTooDeep(BoundedJsonError):
    code = "JSON_TOO_DEEP"

    def __init__(self, max_depth: int) -> None:
        super().__init__(f"JSON nested deeper than {max_depth} levels")
        self.max_depth = max_depth


class JsonTooLarge(BoundedJsonError):
    code = "JSON_TOO_LARGE"

    def __init__(self, size: int, max_bytes: int) -> None:
        super().__init__(f"JSON of {size} bytes, more than the {max_bytes} accepted")
        self.size = size
        self.max_bytes = max_bytes


def _as_bytes(raw: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(raw, str):
        return raw.encode("utf-8", "surrogatepass")
    return bytes(raw)


def depth(raw: bytes | bytearray | memoryview | str) -> int:
    """The deepest nesting of arrays and objects in `raw` (0 for a scalar).

    Brackets inside strings do not count. On text that is not JSON the
    figure is still a bound of what a decoder would descend into: an
    unterminated string's brackets count, which can only over-estimate.
    """
    brackets = _STRING.sub(b"", _as_bytes(raw)).translate(None, _DELETE)
    if not brackets:
        return 0
    steps = map(operator.sub, brackets.translate(_STEPS), repeat(1))
    deepest: int = max(accumulate(steps))
    return max(0, deepest)


def scan(
    raw: bytes | bytearray | memoryview | str,
    *,
    max_depth: int = MAX_DEPTH,
    max_bytes: int | None = None,
) -> None:
    """Raise JsonTooLarge or JsonTooDeep unless `raw` is within both bounds."""
    size = len(raw.encode("utf-8", "surrogatepass")) if isinstance(raw, str) else len(raw)
    if max_bytes is not None and size > max_bytes:
        raise JsonTooLarge(size, max_bytes)
    if depth(raw) > max_depth:
        raise JsonTooDeep(max_depth)


def loads(
    raw: bytes | bytearray | memoryview | str,
    *,
    max_depth: int = MAX_DEPTH,
    max_bytes: int | None = MAX_ANSWER_BYTES,
    **kwargs: Any,
) -> Any:
    """`json.loads` after `scan`: BoundedJsonError (a ValueError) when out of bounds."""
    scan(raw, max_depth=max_depth, max_bytes=max_bytes)
    return json.loads(_as_bytes(raw) if isinstance(raw, memoryview) else raw, **kwargs)
