from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from qtg.config import Settings
from qtg.db import Database
from qtg.providers.registry import build_registry
from qtg.services.context import ServiceContext


@pytest.fixture
def settings(dsn: str) -> Settings:
    # the engine tests' callback receiver listens on loopback, which callbacks
    # refuse by default (issue 17): allow it, and only it
    return Settings.from_env({}).replace(database_url=dsn, callback_allowed_hosts="127.0.0.1")


@pytest.fixture
async def svc(db: Database, settings: Settings) -> AsyncIterator[ServiceContext]:
    providers = build_registry(settings, db)
    try:
        yield ServiceContext(db, settings, providers)
    finally:
        await providers.aclose()
