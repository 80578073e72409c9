"""Shared set-up for the treasury tests: settings, a provider registry, row counts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from qtg.config import Settings
from qtg.db import Database, Query
from qtg.providers.registry import ProviderRegistry, build_registry
from qtg.services.context import ServiceContext

DEPOSITOR_A = "0x" + "a1" * 20
DEPOSITOR_B = "0x" + "b2" * 20

SNAPSHOTS = Query(
    "test/snapshots",
    "SELECT venue_key, account, asset, amount, source, fetcher_key, detail, observed_at"
    " FROM balance_snapshots ORDER BY venue_key, account, asset, id",
)
ATTEMPTS = Query(
    "test/attempts",
    "SELECT fetcher_key, venue_key, source, outcome, error, rows, started_at, finished_at"
    " FROM balance_fetch_attempts ORDER BY id",
)


def treasury_settings(dsn: str, **changes: Any) -> Settings:
    return Settings().replace(database_url=dsn, **changes)


def gateway_answer(parts: dict[str, dict[int, str]]) -> dict[str, Any]:
    """Gateway's POST /v1/balances response for {depositor: {domain: balance}}."""
    return {
        "token": "USDC",
        "balances": [
            {"domain": domain, "depositor": depositor, "balance": balance}
            for depositor, domains in parts.items()
            for domain, balance in domains.items()
        ],
    }


@asynccontextmanager
async def service_context(db: Database, settings: Settings) -> AsyncIterator[ServiceContext]:
    """A context whose providers come from MG_PROVIDERS, released afterwards."""
    registry: ProviderRegistry = build_registry(settings, db)
    try:
        yield ServiceContext(db=db, settings=settings, providers=registry)
    finally:
        await registry.aclose()


async def race(pass_fn: Any, *contexts: ServiceContext) -> list[int]:
    """Run one pass per context at the same instant (several runtimes); their results."""
    import trio

    results: list[int] = []

    async def run(ctx: ServiceContext) -> None:
        results.append(await pass_fn(ctx))

    async with trio.open_nursery() as nursery:
        for ctx in contexts:
            nursery.start_soon(run, ctx)
    return results
