"""Errors the pure rules raise.

`ConfigError` lives here, below the domain's setting parsers (`parse_rpc_urls`,
`parse_lanes`, …), so that the domain imports nothing of qtg above it;
`qtg.config` re-exports it for everyone else.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting has a value that cannot be used; the message names the variable."""
