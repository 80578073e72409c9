"""The `debridge` provider (issue 46): deBridge DLN orders and their fulfilment.

Registered through the `qtg.providers` entry point `debridge`, after `evm` in
MG_PROVIDERS (it sends with the evm provider's JSON-RPC clients and signer).
MG_DEBRIDGE_CHAINS names each chain's DlnSource, DlnDestination and tokens;
MG_DEBRIDGE_STATUS_URL is DLN's order-status API (or a local stand-in of its shape).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qtg.config import ConfigError, Settings
from qtg.db import Database
from qtg.domain.debridge import parse_chains

if TYPE_CHECKING:
    from qtg.providers.registry import ProviderRegistry


def register(registry: ProviderRegistry, settings: Settings, db: Database) -> None:
    from qtg.providers.debridge.executor import DebridgeExecutor

    if not registry.evm_rpcs or registry.evm_judge is None:
        raise ConfigError(
            "MG_PROVIDERS: the debridge provider needs the evm provider listed before it "
            "(e.g. MG_PROVIDERS=evm,debridge)"
        )
    chains = parse_chains(settings.debridge_chains)
    if len(chains) < 2:
        raise ConfigError("MG_DEBRIDGE_CHAINS: the debridge provider needs at least two chains")
    for chain_id in chains:
        if chain_id not in registry.evm_rpcs:
            raise ConfigError(f"MG_DEBRIDGE_CHAINS: chain {chain_id} is not in MG_EVM_RPC_URLS")
    executor = DebridgeExecutor(
        db,
        dict(registry.evm_rpcs),
        registry.signer("evm_local"),  # type: ignore[arg-type]
        registry.evm_judge,
        chains,
        status_url=settings.debridge_status_url,
        status_timeout=settings.debridge_status_timeout_seconds,
        fulfillment_poll=settings.debridge_fulfillment_poll_seconds,
        unfulfilled_after=settings.debridge_unfulfilled_after_seconds,
        search_blocks=settings.debridge_log_search_blocks,
    )
    registry.add_closer(executor.aclose)
    registry.add_executor(executor)
