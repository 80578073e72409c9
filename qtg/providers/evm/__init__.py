"""The `evm` provider (issue 11): JSON-RPC clients, the evm_transfer executor, a local-key signer.

Registered through the `qtg.providers` entry point `evm`. With MG_EVM_RPC_URLS
set, the registry gains the `evm_rpc` capability, so evm_nonce_reaper runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qtg.config import ConfigError, Settings
from qtg.db import Database
from qtg.domain.chain_outcome import parse_depths, parse_fee_caps
from qtg.domain.evm import is_address, parse_rpc_urls
from qtg.providers.evm.rpc import EvmRpc

if TYPE_CHECKING:
    from qtg.providers.registry import ProviderRegistry


def register(registry: ProviderRegistry, settings: Settings, db: Database) -> None:
    # Imported here, not at the top: the signer pulls in eth-account (~20 MB of
    # RSS), and the package is also imported by processes that only need its
    # JSON-RPC client (the ccip_stranded_reaper, on by default).
    from qtg.providers.evm.balances import EvmBalanceFetcher
    from qtg.providers.evm.executor import EvmExecutor
    from qtg.providers.evm.outcome import ChainJudge
    from qtg.providers.evm.signer import signer_from_settings

    urls = parse_rpc_urls(settings.evm_rpc_urls)
    if not urls:
        raise ConfigError("MG_EVM_RPC_URLS: the evm provider needs at least one chain_id=url")
    signer = signer_from_settings(settings)  # MG_EVM_SIGNER_BACKEND (docs/custody.md)
    if signer is None:
        raise ConfigError(
            "MG_EVM_SIGNER_BACKEND=private_key needs MG_EVM_SIGNER_PRIVATE_KEY or "
            "MG_EVM_SIGNER_KEY_FILE (or choose keystore or pkcs11)"
        )
    rpcs = {
        chain_id: EvmRpc(
            chain_id,
            chain_urls,
            timeout=settings.evm_rpc_timeout_seconds,
            concurrency=settings.evm_rpc_concurrency,
            read_retries=settings.evm_rpc_read_retries,
            batch_max=settings.evm_rpc_batch_max,
        )
        for chain_id, chain_urls in urls.items()
    }
    for rpc in rpcs.values():
        registry.add_closer(rpc.aclose)
    registry.evm_rpcs.update(rpcs)
    registry.capabilities.add("evm_rpc")
    registry.add_signer(signer)
    judge = ChainJudge(
        db,
        rpcs,
        signer,
        depths=parse_depths(settings.evm_confirmations_by_chain),
        default_depth=settings.evm_confirmations,
        fee_caps=parse_fee_caps(settings.evm_fee_caps),
        replace_after_seconds=settings.evm_replace_after_seconds,
        evidence_attention_seconds=settings.evm_evidence_attention_seconds,
    )
    registry.evm_judge = judge  # evm_nonce_reaper rebroadcasts and fills gaps through it
    registry.add_executor(
        EvmExecutor(db, rpcs, signer, judge, gas_margin_percent=settings.evm_gas_margin_percent)
    )
    addresses = [
        signer.address,
        *_addresses("MG_EVM_BALANCE_ADDRESSES_CSV", settings.evm_balance_addresses_csv),
    ]
    tokens = _addresses("MG_EVM_BALANCE_TOKENS_CSV", settings.evm_balance_tokens_csv)
    for rpc in rpcs.values():
        registry.add_balance_fetcher(EvmBalanceFetcher(rpc, addresses, tokens))


def _addresses(env: str, csv: str) -> list[str]:
    """A comma list of EVM addresses; a bad one stops start-up naming the variable."""
    out = [part.strip() for part in csv.split(",") if part.strip()]
    for address in out:
        if not is_address(address):
            raise ConfigError(f"{env}: {address!r} is not an EVM address (0x + 40 hex)")
    return out
