"""Why a runtime does not start: one line, no secrets (`StartupError`)."""

from __future__ import annotations


class StartupError(RuntimeError):
    """The runtime cannot start; the message says why (one line, no secrets)."""
