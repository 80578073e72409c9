"""The `stargate` provider (issue 46): Stargate V2 sends and their LayerZero delivery.

Registered through the `qtg.providers` entry point `stargate`, after `evm` in
MG_PROVIDERS (it sends with the evm provider's JSON-RPC clients and signer).
MG_STARGATE_CHAINS names each chain's LayerZero endpoint id, Stargate pool (or
OFT) and its token. Delivery is read from the destination chain itself (the
pool's OFTReceived of the message's GUID): no LayerZero API is needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qtg.config import ConfigError, Settings
from qtg.db import Database
from qtg.domain.stargate import parse_chains

if TYPE_CHECKING:
    from qtg.providers.registry import ProviderRegistry


def register(registry: ProviderRegistry, settings: Settings, db: Database) -> None:
    from qtg.providers.stargate.executor import StargateExecutor

    if not registry.evm_rpcs or registry.evm_judge is None:
        raise ConfigError(
            "MG_PROVIDERS: the stargate provider needs the evm provider listed before it "
            "(e.g. MG_PROVIDERS=evm,stargate)"
        )
    chains = parse_chains(settings.stargate_chains)
    if len(chains) < 2:
        raise ConfigError("MG_STARGATE_CHAINS: the stargate provider needs at least two chains")
    for chain_id in chains:
        if chain_id not in registry.evm_rpcs:
            raise ConfigError(f"MG_STARGATE_CHAINS: chain {chain_id} is not in MG_EVM_RPC_URLS")
    registry.add_executor(
        StargateExecutor(
            db,
            dict(registry.evm_rpcs),
            registry.signer("evm_local"),  # type: ignore[arg-type]
            registry.evm_judge,
            chains,
            delivery_poll=settings.stargate_delivery_poll_seconds,
            search_blocks=settings.stargate_delivery_search_blocks,
            undelivered_after=settings.stargate_undelivered_after_seconds,
        )
    )
