"""Provider answers made storable: one place that cleans what a provider says
before any of it reaches a text or jsonb column (issue 44 item 2).

PostgreSQL refuses a NUL character in `text` ("invalid byte sequence") and a
`\\u0000` escape in `jsonb` ("unsupported Unicode escape sequence"). The
observer writes every still-pending observation of a batch in ONE statement,
so a single NUL in one node's refs used to fail the write for all 32 nodes of
the batch — and, the leases then holding them until they ran out, the same
batch came round again, the bad node first. Sizes are bounded here too: an
answer is stored, logged and sent in notifications and callbacks, so a
provider that returns megabytes must not make every row that carries it that
large.

Pure functions, no I/O: the result structs of `qtg.providers.base` clean
themselves on construction (`__post_init__`), and the services clean the text
they build from an exception (`clean_text`). A cleaned value keeps its shape;
what was cut says so (`…[N more characters]`), so nothing is lost silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: A NUL is replaced by this (U+FFFD, the replacement character): visible, storable.
NUL_REPLACEMENT = "\ufffd"
#: Longest string value kept inside provider_refs / artifacts (a signed transaction,
#: a receipt's field, a venue's message fit many times over).
MAX_VALUE_CHARS = 16_384
#: Longest key of a provider_refs / artifacts object.
MAX_KEY_CHARS = 256
#: Most entries of one object or array kept.
MAX_ITEMS = 512
#: Deepest nesting kept; deeper values are replaced by a marker.
MAX_DEPTH = 16
#: Longest error_detail / error_code text (the columns' users cut at 2000 already).
MAX_DETAIL_CHARS = 2000
MAX_CODE_CHARS = 100

TOO_DEEP = "[nested too deep]"


def clean_text(value: str, limit: int = MAX_DETAIL_CHARS) -> str:
    """`value` with every NUL replaced and cut to `limit` characters (saying so)."""
    if "\x00" in value:
        value = value.replace("\x00", NUL_REPLACEMENT)
    if len(value) > limit:
        marker = f"…[{len(value) - limit} more characters]"
        value = value[: max(0, limit - len(marker))] + marker
    return value


def clean_optional_text(value: Any, limit: int = MAX_DETAIL_CHARS) -> str | None:
    """`clean_text` of a value that may be None or not a string (stringified)."""
    if value is None:
        return None
    return clean_text(value if isinstance(value, str) else str(value), limit)


def clean_json(value: Any, depth: int = 0) -> Any:
    """A JSON-shaped value (provider_refs, artifacts) made storable in jsonb:
    NULs replaced in keys and strings, strings, objects and arrays bounded,
    nesting bounded. Other values (numbers, booleans, None, and whatever the
    JSON encoder turns into them) are returned as they are."""
    if isinstance(value, str):
        return clean_text(value, MAX_VALUE_CHARS)
    if isinstance(value, Mapping):
        if depth >= MAX_DEPTH:
            return TOO_DEEP
        out: dict[str, Any] = {}
        for i, (k, v) in enumerate(value.items()):
            if i >= MAX_ITEMS:
                out["…"] = f"[{len(value) - MAX_ITEMS} more entries]"
                break
            out[clean_text(k if isinstance(k, str) else str(k), MAX_KEY_CHARS)] = clean_json(
                v, depth + 1
            )
        return out
    if isinstance(value, list | tuple):
        if depth >= MAX_DEPTH:
            return TOO_DEEP
        items = [clean_json(v, depth + 1) for v in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            items.append(f"[{len(value) - MAX_ITEMS} more items]")
        return items
    return value


def clean_object(value: Any) -> dict[str, Any]:
    """`clean_json` of a provider_refs / artifacts object (None: empty)."""
    if value is None:
        return {}
    cleaned = clean_json(value)
    return cleaned if isinstance(cleaned, dict) else {"value": cleaned}


def contains_nul(value: Any, depth: int = 0) -> bool:
    """Whether a NUL hides in `value` (a string, or the strings and keys of a
    JSON-shaped value): what a column cannot store and must not be cleaned
    silently — a prepared action's payload is hashed and signed as it is."""
    if isinstance(value, str):
        return "\x00" in value
    if depth >= MAX_DEPTH:
        return False
    if isinstance(value, Mapping):
        return any(contains_nul(k) or contains_nul(v, depth + 1) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(contains_nul(v, depth + 1) for v in value)
    return False
