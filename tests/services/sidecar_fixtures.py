"""Shared set-up for the sidecar service tests: settings, a context, real movements."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from qtg.config import Settings
from qtg.db import Database
from qtg.providers.registry import ProviderRegistry
from qtg.services.context import ServiceContext
from qtg.services.movements import create_movement
from qtg.services.templates import create_template

TEMPLATE_KEY = "sidecar-test"
GRAPH = {"nodes": [{"key": "confirm", "kind": "manual", "action_type": "manual_confirm"}]}
INTENT = {"asset": "USDC", "amount": "12.50", "destination": "0xabc"}

_keys = itertools.count(1)


def make_settings(tmp_path: Path, **changes: Any) -> Settings:
    base = Settings().replace(
        callback_signing_secret="test-callback-secret",
        callback_timeout_seconds=2.0,
        # the test receivers listen on loopback, which callbacks refuse by default
        callback_allowed_hosts="127.0.0.1",
        embedded_data_dir=str(tmp_path),
    )
    return base.replace(**changes)


def context(
    db: Database, settings: Settings, providers: ProviderRegistry | None = None
) -> ServiceContext:
    return ServiceContext(db=db, settings=settings, providers=providers or ProviderRegistry())


async def ensure_template(db: Database) -> None:
    await create_template(
        db, template_key=TEMPLATE_KEY, name="sidecar test", graph=GRAPH, actor="admin:test"
    )


async def new_movement(
    db: Database, settings: Settings, *, callback_url: str | None = None, actor: str = "op:alice"
) -> dict[str, Any]:
    """A PENDING_APPROVAL movement made by the real operation (one callback row when
    callback_url is set: its request_created event)."""
    movement, created = await create_movement(
        db,
        settings,
        template_key=TEMPLATE_KEY,
        intent=INTENT,
        idempotency_key=f"sidecar-{next(_keys)}",
        callback_url=callback_url,
        actor=actor,
    )
    assert created
    return movement
