from __future__ import annotations

# the two-chain fixtures of the CCTP tests: chain A 31337, chain B 31338, reverted per test
from cctp.conftest import chains, chains_session

__all__ = ["chains", "chains_session"]
