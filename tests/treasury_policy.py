"""The treasury policy example of issue 45, one definition for every test of it.

"Above 50,000 USDC three of the treasury group; never more than the cap in a
day; only to addresses in the book; everything else blocked." The domain, API
and anvil tests all exercise this same document; they differ only in the daily
cap and in whether the small rule waits, so those are the parameters. Each call
returns a fresh document, so a test may change its copy freely.
"""

from __future__ import annotations

from typing import Any


def treasury_policy(
    cap: str = "1000000", *, small_delay_seconds: int | None = None
) -> dict[str, Any]:
    """The example document: ``cap`` is the daily-cap rule's limit, and
    ``small_delay_seconds`` (when given) the small rule's delay before it runs."""
    small: dict[str, Any] = {
        "name": "small",
        "asset": "USDC",
        "destination": "book",
        "action": "allow",
        "approvals": {"count": 2, "group": "treasury"},
    }
    if small_delay_seconds is not None:
        small["delay_seconds"] = small_delay_seconds
    return {
        "groups": {"treasury": ["tina", "tom", "tess"]},
        "rules": [
            {
                "name": "daily-cap",
                "asset": "USDC",
                "accumulation": {"window_seconds": 86400, "scope": "overall", "gt": cap},
                "action": "block",
            },
            {
                "name": "large",
                "asset": "USDC",
                "destination": "book",
                "amount": {"gt": "50000"},
                "action": "allow",
                "approvals": {"count": 3, "group": "treasury"},
            },
            small,
            {"name": "block-all", "action": "block"},
        ],
    }
