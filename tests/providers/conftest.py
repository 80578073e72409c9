"""Fixtures for provider tests: a sandbox wired to the test database."""

from __future__ import annotations

import pytest

from qtg.db import Database
from qtg.providers.sandbox import SandboxExecutor, SandboxSigner

SIGNER_SECRET = "test-signer-secret"


@pytest.fixture
def signer() -> SandboxSigner:
    return SandboxSigner(SIGNER_SECRET)


@pytest.fixture
def sandbox(db: Database, signer: SandboxSigner) -> SandboxExecutor:
    return SandboxExecutor(db, signer)
