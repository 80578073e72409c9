"""Treasury view on a real chain (issues 13 and 11): the evm provider's balance
fetcher snapshots what configured addresses hold on anvil, and the snapshot
changes by exactly what an evm_transfer moved."""

from __future__ import annotations

from decimal import Decimal

import pytest

from evm.anvil import ADDRESSES
from evm.test_evm_provider import context, send, settings_for
from qtg.config import ConfigError
from qtg.providers.base import ObserveStatus
from qtg.providers.registry import build_registry
from qtg.services.balance_snapshot import fetch_all, latest_balances


async def _native_of(db, registry, address: str) -> Decimal:
    fetchers = registry.balance_fetcher_registry.fetchers()
    [outcome] = await fetch_all(db, fetchers, source="worker", timeout_seconds=10)
    assert outcome.outcome == "ok", outcome
    latest = await latest_balances(
        db, threshold_seconds=60, account=address.lower(), asset="native"
    )
    [row] = latest["items"]
    assert row["venue_key"].startswith("evm:")
    return Decimal(row["amount"])


async def test_the_evm_fetcher_sees_a_transfer_land(anvil, dsn, db) -> None:
    settings = settings_for(anvil, dsn, MG_EVM_BALANCE_ADDRESSES_CSV=ADDRESSES[1])
    registry = build_registry(settings, db)
    try:
        before = await _native_of(db, registry, ADDRESSES[1])
        assert before == Decimal(anvil.balance(ADDRESSES[1])).scaleb(-18)  # exact, not a float
        executor, _prepared, result = await send(registry, context("bal-1", amount="1.5"))
        observed = await executor.observe(context("bal-1", refs=result.provider_refs))
        assert observed.status is ObserveStatus.COMPLETED, observed
        after = await _native_of(db, registry, ADDRESSES[1])
    finally:
        await registry.aclose()
    assert after - before == Decimal("1.5")


async def test_a_bad_balance_address_stops_start_up_naming_the_variable(anvil, dsn, db) -> None:
    settings = settings_for(anvil, dsn, MG_EVM_BALANCE_TOKENS_CSV="0xnot-an-address")
    with pytest.raises(ConfigError, match=r"^MG_EVM_BALANCE_TOKENS_CSV: '0xnot-an-address'"):
        build_registry(settings, db)
