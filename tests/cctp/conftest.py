from __future__ import annotations

from collections.abc import Iterator

import pytest
from evm.anvil import find_binary

from cctp.local import CHAIN_A, CHAIN_B, ChainNode


@pytest.fixture(scope="session")
def chains_session() -> Iterator[tuple[ChainNode, ChainNode]]:
    binary = find_binary()
    if binary is None:
        pytest.skip("anvil needs npm (npm install @foundry-rs/anvil) and npm is not installed")
    a, b = ChainNode(binary, CHAIN_A), ChainNode(binary, CHAIN_B)
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture
def chains(chains_session) -> Iterator[tuple[ChainNode, ChainNode]]:
    """Both chains, reset to a fresh snapshot after each test."""
    a, b = chains_session
    snaps = a.call("evm_snapshot"), b.call("evm_snapshot")
    yield a, b
    a.revert(snaps[0])
    b.revert(snaps[1])
