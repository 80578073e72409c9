"""Settings: every MG_* variable of the Runtime Workers Reference, typed, with its defaults.

Settings are read once, from the environment, into a frozen `Settings`. A bad
value stops start-up with one line that names the variable and what was wrong
(`ConfigError`), because a runtime that moves money must not guess what an
operator meant by `MG_NODE_DISPATCH_INTERVAL_SECONDS=2s`.

Each field declares its environment variable next to its default, so that a
reader can go from a paragraph of the reference to the field in one step.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """A setting has a value that cannot be used; the message names the variable."""


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def setting(
    env: str,
    default: Any,
    *,
    minimum: float | None = None,
    exclusive_minimum: float | None = None,
    secret: bool = False,
    choices: tuple[str, ...] | None = None,
) -> Any:
    """Declare a field read from environment variable `env`."""
    return field(
        default=default,
        metadata={
            "env": env,
            "minimum": minimum,
            "exclusive_minimum": exclusive_minimum,
            "secret": secret,
            "choices": choices,
        },
    )


def interval(env: str, default: float) -> Any:
    """An interval in seconds: a number strictly greater than zero."""
    return setting(env, default, exclusive_minimum=0)


def count(env: str, default: int) -> Any:
    """A batch size or attempt count: an integer of at least one."""
    return setting(env, default, minimum=1)


@dataclass(frozen=True, slots=True)
class Settings:
    # ---- database
    database_url: str | None = setting("MG_DATABASE_URL", None, secret=True)
    listen_database_url: str | None = setting("MG_LISTEN_DATABASE_URL", None, secret=True)
    network_class: str = setting("MG_NETWORK_CLASS", "default")
    db_pool_min_size: int = setting("MG_DB_POOL_MIN_SIZE", 2, minimum=1)
    db_pool_max_size: int = setting("MG_DB_POOL_MAX_SIZE", 10, minimum=1)
    statement_timeout_ms: int = setting("MG_STATEMENT_TIMEOUT_MS", 30_000, minimum=1)
    embedded_data_dir: str = setting("MG_EMBEDDED_DATA_DIR", ".qtg")
    migrate_on_start: bool = setting("MG_MIGRATE_ON_START", False)

    # ---- runtime
    workers_enabled: bool = setting("MG_WORKERS_ENABLED", True)
    reactive: bool = setting("MG_REACTIVE", True)
    worker_jitter_seconds: float = setting("MG_WORKER_JITTER_SECONDS", 0.0, minimum=0)
    heartbeat_min_interval_seconds: float = interval("MG_HEARTBEAT_MIN_INTERVAL_SECONDS", 1.0)
    log_level: str = setting("MG_LOG_LEVEL", "INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    log_format: str = setting("MG_LOG_FORMAT", "json", choices=("json", "text"))

    # ---- core workers (reference §1-3)
    node_dispatch_interval_seconds: float = interval("MG_NODE_DISPATCH_INTERVAL_SECONDS", 2.0)
    # Single-node dispatches one pass runs side by side (1: the reference's serial
    # dispatcher). Each commit waits for its WAL flush, so one serial dispatcher
    # is bound by commit latency; n in parallel share flushes, as n processes would.
    node_dispatch_concurrency: int = setting("MG_NODE_DISPATCH_CONCURRENCY", 1, minimum=1)
    node_observe_interval_seconds: float = interval("MG_NODE_OBSERVE_INTERVAL_SECONDS", 5.0)
    node_observe_batch_size: int = count("MG_NODE_OBSERVE_BATCH_SIZE", 10)
    observe_timeout_enforcement_enabled: bool = setting(
        "MG_OBSERVE_TIMEOUT_ENFORCEMENT_ENABLED", False
    )
    node_recovery_interval_seconds: float = interval("MG_NODE_RECOVERY_INTERVAL_SECONDS", 60.0)
    node_recovery_batch_size: int = count("MG_NODE_RECOVERY_BATCH_SIZE", 10)
    # A SUBMITTING node older than this is presumed stranded by a crash between
    # the write-ahead commit and submit's return, and handed to recover().
    node_recovery_submitting_grace_seconds: float = interval(
        "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS", 120.0
    )

    # ---- sidecars (reference §4-9)
    callback_dispatch_interval_seconds: float = interval(
        "MG_CALLBACK_DISPATCH_INTERVAL_SECONDS", 3.0
    )
    callback_batch_size: int = count("MG_CALLBACK_BATCH_SIZE", 5)
    callback_max_attempts: int = count("MG_CALLBACK_MAX_ATTEMPTS", 5)
    callback_timeout_seconds: float = interval("MG_CALLBACK_TIMEOUT_SECONDS", 10.0)
    callback_signing_secret: str | None = setting("MG_CALLBACK_SIGNING_SECRET", None, secret=True)
    expiration_check_interval_seconds: float = interval(
        "MG_EXPIRATION_CHECK_INTERVAL_SECONDS", 30.0
    )
    expiration_batch_size: int = count("MG_EXPIRATION_BATCH_SIZE", 20)
    approval_ttl_seconds: float = interval("MG_APPROVAL_TTL_SECONDS", 300.0)
    template_proposal_expiration_interval_seconds: float = interval(
        "MG_TEMPLATE_PROPOSAL_EXPIRATION_INTERVAL_SECONDS", 30.0
    )
    template_proposal_ttl_seconds: float = interval("MG_TEMPLATE_PROPOSAL_TTL_SECONDS", 86_400.0)
    executor_health_interval_seconds: float = interval("MG_EXECUTOR_HEALTH_INTERVAL_SECONDS", 60.0)
    audit_outbox_promoter_interval_seconds: float = interval(
        "MG_AUDIT_OUTBOX_PROMOTER_INTERVAL_SECONDS", 1.0
    )
    # A provider's health() that hangs must not stall the executor_health pass.
    executor_health_timeout_seconds: float = interval("MG_EXECUTOR_HEALTH_TIMEOUT_SECONDS", 10.0)

    # ---- conditional workers (reference "Always-on vs conditional")
    evm_nonce_reaper_enabled: bool = setting("MG_EVM_NONCE_REAPER_ENABLED", True)
    evm_nonce_reaper_interval_seconds: float = interval(
        "MG_EVM_NONCE_REAPER_INTERVAL_SECONDS", 60.0
    )
    ccip_stranded_reaper_enabled: bool = setting("MG_CCIP_STRANDED_REAPER_ENABLED", True)
    ccip_stranded_reaper_interval_seconds: float = interval(
        "MG_CCIP_STRANDED_REAPER_INTERVAL_SECONDS", 60.0
    )
    capital_transfer_followup_enabled: bool = setting("MG_CAPITAL_TRANSFER_FOLLOWUP_ENABLED", False)
    capital_transfer_followup_interval_seconds: float = interval(
        "MG_CAPITAL_TRANSFER_FOLLOWUP_INTERVAL_SECONDS", 60.0
    )
    notify_enabled: bool = setting("MG_NOTIFY_ENABLED", False)
    balance_history_enabled: bool = setting("MG_BALANCE_HISTORY_ENABLED", True)
    cex_transfer_ingest_venues_csv: str = setting("MG_CEX_TRANSFER_INGEST_VENUES_CSV", "")
    balance_snapshot_enabled: bool = setting("MG_BALANCE_SNAPSHOT_ENABLED", False)
    balance_snapshot_interval_seconds: float = interval(
        "MG_BALANCE_SNAPSHOT_INTERVAL_SECONDS", 30.0
    )
    balance_stale_threshold_seconds: float = interval("MG_BALANCE_STALE_THRESHOLD_SECONDS", 120.0)
    ccip_enabled: bool = setting("MG_CCIP_ENABLED", False)
    ccip_drift_poll_interval_seconds: float = interval("MG_CCIP_DRIFT_POLL_INTERVAL_SECONDS", 300.0)
    verify_drift_enabled: bool = setting("MG_VERIFY_DRIFT_ENABLED", False)
    verify_drift_interval_seconds: float = interval("MG_VERIFY_DRIFT_INTERVAL_SECONDS", 21_600.0)

    # ---- providers (DESIGN §5)
    # Comma list of `qtg.providers` entry-point names to load (or `module:callable`).
    providers: str = setting("MG_PROVIDERS", "sandbox")
    # Sandbox provider: simulated latency of every remote call, unless a node's config says.
    sandbox_latency_ms: int = setting("MG_SANDBOX_LATENCY_MS", 0, minimum=0)
    # What the sandbox executor's health() reports (to exercise the health worker).
    sandbox_health: str = setting(
        "MG_SANDBOX_HEALTH", "healthy", choices=("healthy", "degraded", "unhealthy")
    )
    # HMAC key of the sandbox signer. The default is a fixed, public DEVELOPMENT key:
    # signatures made with it prove nothing outside a sandbox.
    sandbox_signer_key: str = setting(
        "MG_SANDBOX_SIGNER_KEY", "qtg-sandbox-dev-key-not-a-secret", secret=True
    )

    # ---- API
    api_host: str = setting("MG_API_HOST", "127.0.0.1")
    api_port: int = setting("MG_API_PORT", 8000, minimum=0)
    # WS /v3/stream: events a client may fall behind by before it is closed
    # (4008, resumable); references to shared events, so cheap per client.
    stream_client_buffer: int = count("MG_STREAM_CLIENT_BUFFER", 10_000)
    stream_ping_interval_seconds: float = interval("MG_STREAM_PING_INTERVAL_SECONDS", 15.0)
    # Fallback poll of the event feed when no qtg_events notify arrives.
    stream_poll_interval_seconds: float = interval("MG_STREAM_POLL_INTERVAL_SECONDS", 1.0)

    # ---- money path under faults (issue 10; beyond the reference)
    # Attempts one action node gets in all. When recover() proves that an
    # attempt never happened (a crash or a dead connection between the
    # write-ahead commit and submit), the node goes back to READY for a new
    # attempt while attempt_no < this; after that it ends FAILED (NOT_SUBMITTED).
    node_max_attempts: int = count("MG_NODE_MAX_ATTEMPTS", 3)
    # node_recovery's pace for a node whose recover() cannot tell yet: the n-th
    # undecided answer waits base * 2**(n-1) s, at most the cap, before the
    # node is asked again (by any process).
    node_recovery_retry_base_seconds: float = interval("MG_NODE_RECOVERY_RETRY_BASE_SECONDS", 5.0)
    node_recovery_retry_max_seconds: float = interval("MG_NODE_RECOVERY_RETRY_MAX_SECONDS", 600.0)
    # Per-lane grace cutoff of a SUBMITTING node (reference §3, "past their
    # lane's grace cutoff"); unset: MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS.
    node_recovery_submitting_grace_seconds_ccip: float | None = setting(
        "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS_CCIP", None, exclusive_minimum=0
    )
    node_recovery_submitting_grace_seconds_stargate: float | None = setting(
        "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS_STARGATE", None, exclusive_minimum=0
    )
    node_recovery_submitting_grace_seconds_cex: float | None = setting(
        "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS_CEX", None, exclusive_minimum=0
    )
    node_recovery_submitting_grace_seconds_other: float | None = setting(
        "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS_OTHER", None, exclusive_minimum=0
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read every setting from `env` (default: the process environment)."""
        source = os.environ if env is None else env
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = source.get(f.metadata["env"])
            if raw is not None:
                values[f.name] = _parse(f, hints[f.name], raw)
        settings = cls(**values)
        if settings.db_pool_min_size > settings.db_pool_max_size:
            raise ConfigError(
                f"MG_DB_POOL_MIN_SIZE: {settings.db_pool_min_size} is larger than "
                f"MG_DB_POOL_MAX_SIZE ({settings.db_pool_max_size})"
            )
        return settings

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    def redacted(self) -> dict[str, Any]:
        """Every setting by variable name, with secrets masked: safe to log."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata["secret"] and value is not None:
                value = "***"
            out[f.metadata["env"]] = value
        return out


def _parse(f: dataclasses.Field[Any], hint: Any, raw: str) -> Any:
    env = f.metadata["env"]
    base = _non_optional(hint)
    text = raw.strip()
    if base is bool:
        lowered = text.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ConfigError(f"{env}: expected true or false, got {raw!r}")
    if base is int or base is float:
        try:
            value: float = int(text) if base is int else float(text)
        except ValueError:
            kind = "an integer" if base is int else "a number"
            raise ConfigError(f"{env}: expected {kind}, got {raw!r}") from None
        if base is float and value != value:  # NaN
            raise ConfigError(f"{env}: expected a number, got {raw!r}")
        minimum = f.metadata["minimum"]
        exclusive = f.metadata["exclusive_minimum"]
        if minimum is not None and value < minimum:
            raise ConfigError(f"{env}: must be at least {minimum}, got {raw!r}")
        if exclusive is not None and value <= exclusive:
            raise ConfigError(f"{env}: must be greater than {exclusive}, got {raw!r}")
        return value
    choices = f.metadata["choices"]
    if choices is not None:
        upper = text.upper() if all(c.isupper() for c in choices) else text.lower()
        if upper not in choices:
            raise ConfigError(f"{env}: expected one of {', '.join(choices)}, got {raw!r}")
        return upper
    if text == "" and hint is not base:  # optional string: empty means unset
        return None
    return text


def _non_optional(hint: Any) -> Any:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0]
    return hint
