"""The two anvil chains of tests/cctp (chain ids 31337 and 31338), shared: the same
session fixture and per-test snapshot reset."""

from __future__ import annotations

from cctp.conftest import chains, chains_session

__all__ = ["chains", "chains_session"]
