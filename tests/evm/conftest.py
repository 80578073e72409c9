from __future__ import annotations

from collections.abc import Iterator

import pytest

from evm.anvil import Anvil, find_binary


@pytest.fixture(scope="session")
def anvil_session() -> Iterator[Anvil]:
    binary = find_binary()
    if binary is None:
        pytest.skip("anvil needs npm (npm install @foundry-rs/anvil) and npm is not installed")
    node = Anvil(binary)
    yield node
    node.stop()


@pytest.fixture
def anvil(anvil_session: Anvil) -> Iterator[Anvil]:
    """The session's anvil, reset to a fresh snapshot after each test."""
    snapshot = anvil_session.call("evm_snapshot")
    yield anvil_session
    anvil_session.revert(snapshot)
