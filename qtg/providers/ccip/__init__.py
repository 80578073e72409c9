"""The `ccip` provider (issue 12): the ccip_send / ccip_delivery executor and a CCIP
sidecar client.

Registered through the `qtg.providers` entry point `ccip`, after `evm` in
MG_PROVIDERS (it sends with the evm provider's JSON-RPC clients and signer).
MG_CCIP_LANES names the lanes; MG_CCIP_SIDECAR=rpc|http gives the registry the
`ccip_sidecar` capability, so ccip_drift runs when MG_CCIP_ENABLED is on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qtg.config import ConfigError, Settings
from qtg.db import Database
from qtg.domain.ccip import parse_lanes
from qtg.providers.ccip.executor import CcipExecutor
from qtg.providers.ccip.sidecar import HttpSidecarClient, RpcSidecarClient, SidecarClient

if TYPE_CHECKING:
    from qtg.providers.evm.rpc import EvmRpc
    from qtg.providers.registry import ProviderRegistry


def register(registry: ProviderRegistry, settings: Settings, db: Database) -> None:
    if not registry.evm_rpcs:
        raise ConfigError(
            "MG_PROVIDERS: the ccip provider needs the evm provider listed before it "
            "(e.g. MG_PROVIDERS=evm,ccip)"
        )
    lanes = parse_lanes(settings.ccip_lanes)
    if not lanes:
        raise ConfigError("MG_CCIP_LANES: the ccip provider needs at least one lane")
    for lane in lanes.values():
        for chain in (lane.chain_id, lane.dest_chain_id):
            if chain not in registry.evm_rpcs:
                raise ConfigError(
                    f"MG_CCIP_LANES: lane {lane.name}: chain {chain} is not in MG_EVM_RPC_URLS"
                )
    signer = registry.signer("evm_local")
    registry.add_executor(
        CcipExecutor(
            db,
            dict(registry.evm_rpcs),
            signer,  # type: ignore[arg-type]
            lanes,
            judge=registry.evm_judge,
            fee_margin_percent=settings.ccip_fee_margin_percent,
        )
    )
    registry.ccip_lanes.update(lanes)
    client = sidecar_client(settings, registry.evm_rpcs)
    if client is not None:
        if isinstance(client, HttpSidecarClient):
            registry.add_closer(client.aclose)
        registry.ccip_sidecar = client
        registry.capabilities.add("ccip_sidecar")


def sidecar_client(settings: Settings, rpcs: dict[int, EvmRpc]) -> SidecarClient | None:
    """The CCIP sidecar client MG_CCIP_SIDECAR names (None: none configured)."""
    if settings.ccip_sidecar == "rpc":
        return RpcSidecarClient(rpcs)
    if settings.ccip_sidecar == "http":
        assert settings.ccip_sidecar_url is not None  # Settings.from_env refuses it unset
        return HttpSidecarClient(
            settings.ccip_sidecar_url, timeout=settings.ccip_sidecar_timeout_seconds
        )
    return None
