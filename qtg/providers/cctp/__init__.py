"""The `cctp` provider (issue 28): Circle CCTP burns, attestations and mints.

Registered through the `qtg.providers` entry point `cctp`, after `evm` in
MG_PROVIDERS (it sends with the evm provider's JSON-RPC clients and signer).
MG_CCTP_CHAINS names each chain's domain and contracts; MG_CCTP_ATTESTATION_URL
is Circle's attestation API (or a local stand-in speaking its shape).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qtg.config import ConfigError, Settings
from qtg.db import Database
from qtg.domain.cctp import parse_chains

if TYPE_CHECKING:
    from qtg.providers.registry import ProviderRegistry


def register(registry: ProviderRegistry, settings: Settings, db: Database) -> None:
    from qtg.providers.cctp.executor import CctpExecutor

    if not registry.evm_rpcs or registry.evm_judge is None:
        raise ConfigError(
            "MG_PROVIDERS: the cctp provider needs the evm provider listed before it "
            "(e.g. MG_PROVIDERS=evm,cctp)"
        )
    chains = parse_chains(settings.cctp_chains)
    if len(chains) < 2:
        raise ConfigError("MG_CCTP_CHAINS: the cctp provider needs at least two chains")
    for chain_id in chains:
        if chain_id not in registry.evm_rpcs:
            raise ConfigError(f"MG_CCTP_CHAINS: chain {chain_id} is not in MG_EVM_RPC_URLS")
    executor = CctpExecutor(
        db,
        dict(registry.evm_rpcs),
        registry.signer("evm_local"),  # type: ignore[arg-type]
        registry.evm_judge,
        chains,
        attestation_url=settings.cctp_attestation_url,
        attestation_timeout=settings.cctp_attestation_timeout_seconds,
        attestation_poll=settings.cctp_attestation_poll_seconds,
        mint_poll=settings.cctp_mint_poll_seconds,
    )
    registry.add_closer(executor.aclose)
    registry.add_executor(executor)
