"""The worker registry: which workers run is decided here, and only here.

One `WorkerSpec` per worker of the reference's tables ("Always-on vs
conditional", "Worker summary table"): its name, its service pass (a dotted
path, imported at start-up so a typo fails at start-up, not at 3 a.m.), the
Settings field of its interval, its jitter, the LISTEN channel that wakes it,
its supervision group, its enabling rule and, for deadline-driven workers, the
dotted path of its `next_due(ctx)`.

`resolve_workers(settings)` is pure: from `MG_WORKERS_ENABLED`, each worker's
flag and the capabilities the process has, it returns every declared worker
with `(enabled, reason)`. The launcher prints that list, so an operator sees
at start-up what runs and why the rest does not.

Adding a worker (the other issues do this):
1. write the service pass `async def fn(ctx: ServiceContext) -> int` (and,
   if its work becomes due at a time, `async def next_due(ctx) -> datetime | None`);
2. set `service=` (and `next_due=`) on its spec below — the conditional
   workers qtg does not implement yet are declared with `service=None`, which
   the start-up reports as "this build has no … service yet" and skips;
3. if its interval has no setting yet, add one to qtg/config.py.
Nothing else changes: the loop, wake-ups, heartbeats and supervision come
from the spec.

Capabilities: a worker with `requires=("evm_rpc",)` is registered only when
the process has that capability — today only when a provider registry
exposes it as `capabilities`: the evm provider adds `evm_rpc` (evm_nonce_reaper,
verify_drift), the ccip provider `ccip_sidecar` when MG_CCIP_SIDECAR names a
client (ccip_drift).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from qtg.config import Settings
from qtg.db.hub import CHANNELS

log = logging.getLogger("qtg.runtime.registry")

Group = Literal["core", "sidecar"]
Rule = Callable[[Settings], "Decision"]

#: What each capability a spec may require means, for the skip reason.
CAPABILITIES: dict[str, str] = {
    "evm_rpc": "an EVM RPC client and EVM endpoints",
    "ccip_sidecar": "a CCIP sidecar client",
}

_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}


@dataclass(frozen=True, slots=True)
class Decision:
    enabled: bool
    reason: str


def env_name(field_name: str) -> str:
    """The MG_* variable of a Settings field."""
    env: str = _FIELDS[field_name].metadata["env"]  # each field's metadata names its MG_* str
    return env


def always_on() -> Rule:
    return lambda settings: Decision(True, "always-on")


def flag(field_name: str) -> Rule:
    """Enabled when the boolean setting `field_name` is true."""
    env = env_name(field_name)

    def rule(settings: Settings) -> Decision:
        on = bool(getattr(settings, field_name))
        return Decision(on, f"{env}={'true' if on else 'false'}")

    return rule


def non_empty_csv(field_name: str) -> Rule:
    """Enabled when the comma-list setting `field_name` names at least one item."""
    env = env_name(field_name)

    def rule(settings: Settings) -> Decision:
        items = [i.strip() for i in str(getattr(settings, field_name)).split(",") if i.strip()]
        if items:
            return Decision(True, f"{env}={','.join(items)}")
        return Decision(False, f"{env} is empty")

    return rule


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    name: str
    group: Group
    service: str | None  # dotted path of the pass; None: not implemented in this build
    interval_setting: str | None  # Settings field of the fallback interval
    channel: str | None = None  # LISTEN channel that wakes it (None: polling only)
    rule: Rule = dataclasses.field(default_factory=always_on)
    next_due: str | None = None  # dotted path of `async def next_due(ctx)`
    requires: tuple[str, ...] = ()  # capabilities, see CAPABILITIES
    jitter_setting: str = "worker_jitter_seconds"
    drain: bool = True  # False: a periodic probe, never re-run at once (see run_loop)
    #: After a wake-up, wait this long before the pass (see run_loop): for a
    #: worker off the money path whose channel fires on the same commits as
    #: the dispatcher's.
    coalesce_seconds: float = 0.0


# fmt: off
WORKERS: tuple[WorkerSpec, ...] = (
    # ---- always-on, core group (fail-fast)
    WorkerSpec("node_dispatcher", "core", "qtg.services.dispatch.dispatch_ready_nodes",
               "node_dispatch_interval_seconds", "qtg_dispatch",
               next_due="qtg.services.dispatch.next_dispatch_due"),
    WorkerSpec("node_observer", "core", "qtg.services.observe.observe_active_nodes",
               "node_observe_interval_seconds", "qtg_observe",
               next_due="qtg.services.observe.next_observe_due"),
    WorkerSpec("node_recovery", "core", "qtg.services.recover.recover_unknown_nodes",
               "node_recovery_interval_seconds", "qtg_recover",
               next_due="qtg.services.recover.next_recovery_due"),
    # ---- always-on, sidecar group (a crash is logged; the rest runs on)
    WorkerSpec("callback_dispatcher", "sidecar",
               "qtg.services.callbacks.dispatch_pending_callbacks",
               "callback_dispatch_interval_seconds", "qtg_callback",
               next_due="qtg.services.callbacks.next_due"),
    WorkerSpec("expiration_checker", "sidecar",
               "qtg.services.expiration.expire_pending_requests",
               "expiration_check_interval_seconds", "qtg_expire",
               next_due="qtg.services.expiration.next_due"),
    WorkerSpec("template_proposal_expiration", "sidecar",
               "qtg.services.proposals.expire_template_proposals",
               "template_proposal_expiration_interval_seconds", "qtg_expire",
               next_due="qtg.services.proposals.next_due"),
    WorkerSpec("executor_health", "sidecar",
               "qtg.services.health.refresh_executor_health",
               "executor_health_interval_seconds", drain=False),
    # An approval wakes the dispatcher and this promoter with one commit: 50 ms
    # later (still 20x the reference's 1 s tick) it does not take the trio
    # thread from the first claim, and a burst of mutations is one pass.
    WorkerSpec("audit_outbox_promoter", "sidecar", "qtg.services.audit.promote_audit_outbox",
               "audit_outbox_promoter_interval_seconds", "qtg_audit", coalesce_seconds=0.05),
    # ---- conditional: the two reapers join the core fail-fast group when enabled
    # Woken by an operator's FAILED resolution (qtg_evm_reaper); between its full passes
    # its reorg watch runs every MG_EVM_REORG_WATCH_SECONDS (next_due).
    WorkerSpec("evm_nonce_reaper", "core", "qtg.services.evm_nonces.nonce_reaper_pass",
               "evm_nonce_reaper_interval_seconds", "qtg_evm_reaper",
               rule=flag("evm_nonce_reaper_enabled"), requires=("evm_rpc",),
               next_due="qtg.services.evm_nonces.next_reaper_due"),
    # ccip_stranded_reaper has no EVM precondition (reference §11): an intent whose
    # chain this process cannot ask is stranded and paged, never left alone.
    WorkerSpec("ccip_stranded_reaper", "core", "qtg.services.ccip.reap_stranded_intents",
               "ccip_stranded_reaper_interval_seconds",
               rule=flag("ccip_stranded_reaper_enabled")),
    # ---- conditional sidecars
    WorkerSpec("capital_transfer_followup", "sidecar",
               "qtg.services.capital_transfers.follow_up_pending_capital_transfers",
               "capital_transfer_followup_interval_seconds",
               rule=flag("capital_transfer_followup_enabled")),
    WorkerSpec("notification_dispatcher", "sidecar",
               "qtg.services.notifications.dispatch_notifications",
               "notify_interval_seconds", "qtg_notification",
               rule=flag("notify_enabled"),
               next_due="qtg.services.notifications.next_due"),
    WorkerSpec("balance_history_rollup", "sidecar",
               "qtg.services.balance_history_rollup.roll_up_balance_history",
               "balance_history_rollup_interval_seconds",
               rule=flag("balance_history_enabled")),
    WorkerSpec("cex_transfer_ingest", "sidecar",
               "qtg.services.cex_transfer_ingest.ingest_cex_transfers",
               "cex_transfer_ingest_interval_seconds",
               rule=non_empty_csv("cex_transfer_ingest_venues_csv"), drain=False),
    WorkerSpec("balance_snapshot", "sidecar",
               "qtg.services.balance_snapshot.take_balance_snapshots",
               "balance_snapshot_interval_seconds",
               rule=flag("balance_snapshot_enabled")),
    WorkerSpec("ccip_drift", "sidecar", "qtg.services.drift.ccip_drift",
               "ccip_drift_poll_interval_seconds",
               rule=flag("ccip_enabled"), requires=("ccip_sidecar",), drain=False),
    WorkerSpec("verify_drift", "sidecar", "qtg.services.drift.verify_drift",
               "verify_drift_interval_seconds",
               rule=flag("verify_drift_enabled"), requires=("evm_rpc",)),
)
# fmt: on


@dataclass(frozen=True, slots=True)
class ResolvedWorker:
    spec: WorkerSpec
    enabled: bool
    reason: str
    interval: float | None
    jitter: float

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def group(self) -> Group:
        return self.spec.group

    def describe(self) -> str:
        if self.enabled:
            return f"{self.name} ({self.group}, every {self.interval:g} s, {self.reason})"
        return f"{self.name} skipped: {self.reason}"


def decide(spec: WorkerSpec, settings: Settings, capabilities: Iterable[str] = ()) -> Decision:
    """Whether one worker runs, and why (the reference's tables, in one function)."""
    if not settings.workers_enabled:
        return Decision(False, "MG_WORKERS_ENABLED=false")
    decision = spec.rule(settings)
    if not decision.enabled:
        return decision
    have = set(capabilities)
    missing = [c for c in spec.requires if c not in have]
    if missing:
        needs = " and ".join(CAPABILITIES.get(c, c) for c in missing)
        return Decision(False, f"{decision.reason}, but it needs {needs} (not available)")
    if spec.service is None:
        return Decision(False, f"{decision.reason}, but this build has no {spec.name} service yet")
    return decision


def resolve_workers(
    settings: Settings,
    capabilities: Iterable[str] = (),
    specs: Sequence[WorkerSpec] = WORKERS,
) -> list[ResolvedWorker]:
    """Every declared worker, in declaration order, with whether it runs and why."""
    caps = frozenset(capabilities)
    resolved = []
    for spec in specs:
        decision = decide(spec, settings, caps)
        interval = (
            float(getattr(settings, spec.interval_setting)) if spec.interval_setting else None
        )
        resolved.append(
            ResolvedWorker(
                spec=spec,
                enabled=decision.enabled,
                reason=decision.reason,
                interval=interval,
                jitter=float(getattr(settings, spec.jitter_setting)),
            )
        )
    return resolved


def running(resolved: Iterable[ResolvedWorker]) -> list[ResolvedWorker]:
    return [w for w in resolved if w.enabled]


def skipped_with_warning(worker: ResolvedWorker) -> bool:
    """A worker whose own rule said yes but which cannot run: worth a warning."""
    return not worker.enabled and ", but " in worker.reason


def enabling_variable(worker: ResolvedWorker) -> str | None:
    """`MG_EVM_NONCE_REAPER_ENABLED` from "MG_EVM_NONCE_REAPER_ENABLED=true, but …"."""
    name = worker.reason.split(", but ", 1)[0].partition("=")[0]
    return name if name.startswith("MG_") else None


def skipped_by_default(worker: ResolvedWorker, env: Mapping[str, str]) -> bool:
    """A skip the operator did not ask for: the worker is on only by default.

    Nobody set its variable, so a warning would tell a user on a default
    start about something they never chose; the launcher says it once, at
    info, with what to configure. Set explicitly, the same skip is a warning.
    """
    variable = enabling_variable(worker)
    return skipped_with_warning(worker) and variable is not None and variable not in env


# ---------------------------------------------------------------- validation


class RegistryError(ValueError):
    """A worker declaration is wrong; the message names the worker."""


def validate(specs: Sequence[WorkerSpec] = WORKERS) -> None:
    """Refuse a registry that could not run: duplicate names, unknown settings or channels."""
    seen: set[str] = set()
    for spec in specs:
        where = f"worker {spec.name}"
        if spec.name in seen:
            raise RegistryError(f"{where} is declared twice")
        seen.add(spec.name)
        if spec.group not in ("core", "sidecar"):
            raise RegistryError(f"{where}: group must be core or sidecar, not {spec.group!r}")
        if spec.channel is not None and spec.channel not in CHANNELS:
            raise RegistryError(f"{where}: unknown channel {spec.channel!r}")
        for setting in (spec.interval_setting, spec.jitter_setting):
            if setting is not None and setting not in _FIELDS:
                raise RegistryError(f"{where}: Settings has no field {setting!r}")
        if spec.service is not None and spec.interval_setting is None:
            raise RegistryError(f"{where}: a worker with a service needs an interval setting")
        for cap in spec.requires:
            if cap not in CAPABILITIES:
                raise RegistryError(f"{where}: unknown capability {cap!r}")


# ---------------------------------------------------------------- loading


class WorkerLoadError(ImportError):
    """A worker's service (or next_due) cannot be imported; the message names both."""


def import_path(dotted: str, *, worker: str) -> Callable[..., Any]:
    """Import `package.module.attr` and return the attribute."""
    module_name, _, attr = dotted.rpartition(".")
    if not module_name:
        raise WorkerLoadError(f"worker {worker}: {dotted!r} is not a dotted path module.function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise WorkerLoadError(f"worker {worker}: cannot import {dotted}: {exc}") from exc
    try:
        target = getattr(module, attr)
    except AttributeError:
        raise WorkerLoadError(
            f"worker {worker}: module {module_name} has no {attr!r} (from {dotted})"
        ) from None
    if not callable(target):
        raise WorkerLoadError(f"worker {worker}: {dotted} is not callable")
    return cast(Callable[..., Any], target)  # an imported name: checked callable, no more


@dataclass(frozen=True, slots=True)
class LoadedWorker:
    resolved: ResolvedWorker
    service: Callable[..., Any]
    next_due: Callable[..., Any] | None


def load(workers: Iterable[ResolvedWorker]) -> list[LoadedWorker]:
    """Import the service (and next_due) of every enabled worker; fail on the first bad one."""
    loaded = []
    for worker in running(workers):
        spec = worker.spec
        assert spec.service is not None  # decide() never enables a worker without one
        loaded.append(
            LoadedWorker(
                resolved=worker,
                service=import_path(spec.service, worker=spec.name),
                next_due=import_path(spec.next_due, worker=spec.name) if spec.next_due else None,
            )
        )
    return loaded
