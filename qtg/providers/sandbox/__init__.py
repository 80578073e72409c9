"""The sandbox provider (DESIGN §5): real behaviour, no network.

Executors for every action_type the reference names, whose "remote system" is
the `sandbox_submissions` table, and a signer that really signs (HMAC-SHA256).
Registered through the `qtg.providers` entry point `sandbox` (pyproject.toml).
Per-node behaviour lives under the node config key `"sandbox"` (behaviour.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qtg.config import ConfigError, Settings
from qtg.db import Database
from qtg.providers.base import HealthState
from qtg.providers.sandbox.balances import SandboxBalanceFetcher
from qtg.providers.sandbox.behaviour import Behaviour, Fail, SandboxConfigError, parse_behaviour
from qtg.providers.sandbox.cex import SandboxCexClient
from qtg.providers.sandbox.executor import (
    EXECUTOR_KEY,
    SandboxCrash,
    SandboxExecutor,
    check_amount_limit,
    submissions,
)
from qtg.providers.sandbox.lanes import (
    ACTION_TYPES,
    LANES,
    OBSERVE_ACTION_TYPES,
    SIDE_EFFECT_ACTION_TYPES,
    SIGNER_KEY,
)
from qtg.providers.sandbox.signer import SandboxSigner

if TYPE_CHECKING:
    from qtg.providers.registry import ProviderRegistry


def register(registry: ProviderRegistry, settings: Settings, db: Database) -> None:
    """Entry point `qtg.providers:sandbox`: one signer, one executor for every lane,
    and the sandbox venue's balance fetcher and CEX client (the treasury view)."""
    if not settings.sandbox_signer_key:
        raise ConfigError("MG_SANDBOX_SIGNER_KEY: must not be empty")
    signer = SandboxSigner(settings.sandbox_signer_key)
    registry.add_signer(signer)
    # The "remote system" gets a pool of its own, as a real provider's service
    # would have its own capacity: sharing the engine's pool let passes that hold
    # a connection wait forever for a second one to reach the provider.
    remote = Database(
        db.dsn,
        min_size=1,
        max_size=settings.db_pool_max_size,
        statement_timeout_ms=settings.statement_timeout_ms,
        application_name="qtg-sandbox",
        pgbouncer=settings.database_pgbouncer,
    )
    registry.add_closer(remote.close)
    registry.add_executor(
        SandboxExecutor(
            remote,
            signer,
            default_latency_ms=settings.sandbox_latency_ms,
            health_state=HealthState(settings.sandbox_health),
        )
    )
    registry.add_balance_fetcher(SandboxBalanceFetcher(remote))
    registry.add_cex_client(SandboxCexClient(remote))


__all__ = [
    "ACTION_TYPES",
    "EXECUTOR_KEY",
    "LANES",
    "OBSERVE_ACTION_TYPES",
    "SIDE_EFFECT_ACTION_TYPES",
    "SIGNER_KEY",
    "Behaviour",
    "Fail",
    "SandboxBalanceFetcher",
    "SandboxCexClient",
    "SandboxConfigError",
    "SandboxCrash",
    "SandboxExecutor",
    "SandboxSigner",
    "check_amount_limit",
    "parse_behaviour",
    "register",
    "submissions",
]
