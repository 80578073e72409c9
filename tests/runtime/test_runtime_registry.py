"""The worker registry decides, from settings alone, exactly the reference's worker set."""

from __future__ import annotations

import pytest

from qtg.config import Settings
from qtg.runtime.registry import (
    WORKERS,
    RegistryError,
    WorkerLoadError,
    WorkerSpec,
    flag,
    import_path,
    load,
    resolve_workers,
    running,
    skipped_with_warning,
    validate,
)

ALWAYS_ON_CORE = ["node_dispatcher", "node_observer", "node_recovery"]
ALWAYS_ON_SIDECAR = [
    "callback_dispatcher",
    "expiration_checker",
    "template_proposal_expiration",
    "executor_health",
    "audit_outbox_promoter",
]
# The reference's table of 9 conditional workers: (worker, group, env that gates it)
CONDITIONAL = [
    ("evm_nonce_reaper", "core", "MG_EVM_NONCE_REAPER_ENABLED"),
    ("ccip_stranded_reaper", "core", "MG_CCIP_STRANDED_REAPER_ENABLED"),
    ("capital_transfer_followup", "sidecar", "MG_CAPITAL_TRANSFER_FOLLOWUP_ENABLED"),
    ("notification_dispatcher", "sidecar", "MG_NOTIFY_ENABLED"),
    ("balance_history_rollup", "sidecar", "MG_BALANCE_HISTORY_ENABLED"),
    ("cex_transfer_ingest", "sidecar", "MG_CEX_TRANSFER_INGEST_VENUES_CSV"),
    ("balance_snapshot", "sidecar", "MG_BALANCE_SNAPSHOT_ENABLED"),
    ("ccip_drift", "sidecar", "MG_CCIP_ENABLED"),
    ("verify_drift", "sidecar", "MG_VERIFY_DRIFT_ENABLED"),
]


def by_name(settings: Settings, capabilities: tuple[str, ...] = ()) -> dict:
    return {w.name: w for w in resolve_workers(settings, capabilities)}


def test_declares_the_reference_tables_exactly() -> None:
    validate()
    groups = {s.name: s.group for s in WORKERS}
    assert len(WORKERS) == 8 + 9
    assert [n for n, g in groups.items() if g == "core"][:3] == ALWAYS_ON_CORE
    for name in ALWAYS_ON_SIDECAR:
        assert groups[name] == "sidecar"
    for name, group, _env in CONDITIONAL:
        assert groups[name] == group


def test_defaults_run_the_implemented_always_on_workers() -> None:
    workers = by_name(Settings())
    for name in ALWAYS_ON_CORE:
        assert workers[name].enabled and workers[name].reason == "always-on"
    assert workers["audit_outbox_promoter"].enabled
    assert workers["node_dispatcher"].interval == 2.0
    assert workers["node_observer"].interval == 5.0
    assert workers["node_recovery"].interval == 60.0
    assert workers["audit_outbox_promoter"].interval == 1.0


def test_workers_disabled_runs_nothing() -> None:
    resolved = resolve_workers(Settings(workers_enabled=False), ("evm_rpc", "ccip_sidecar"))
    assert running(resolved) == []
    assert {w.reason for w in resolved} == {"MG_WORKERS_ENABLED=false"}


@pytest.mark.parametrize(
    ("changes", "capabilities", "worker", "enabled", "reason"),
    [
        # the reapers default on, but need an EVM client qtg does not have: skipped, said why
        (
            {},
            (),
            "evm_nonce_reaper",
            False,
            "MG_EVM_NONCE_REAPER_ENABLED=true, but it needs an EVM RPC client and EVM "
            "endpoints (not available)",
        ),
        (
            {"evm_nonce_reaper_enabled": False},
            ("evm_rpc",),
            "evm_nonce_reaper",
            False,
            "MG_EVM_NONCE_REAPER_ENABLED=false",
        ),
        (
            {"ccip_stranded_reaper_enabled": False},
            (),
            "ccip_stranded_reaper",
            False,
            "MG_CCIP_STRANDED_REAPER_ENABLED=false",
        ),
        # the reference gives ccip_stranded_reaper no EVM precondition: on by default, anywhere
        ({}, (), "ccip_stranded_reaper", True, "MG_CCIP_STRANDED_REAPER_ENABLED=true"),
        ({"ccip_enabled": True}, ("ccip_sidecar",), "ccip_drift", True, "MG_CCIP_ENABLED=true"),
        ({}, (), "capital_transfer_followup", False, "MG_CAPITAL_TRANSFER_FOLLOWUP_ENABLED=false"),
        ({}, (), "notification_dispatcher", False, "MG_NOTIFY_ENABLED=false"),
        (
            {"balance_history_enabled": False},
            (),
            "balance_history_rollup",
            False,
            "MG_BALANCE_HISTORY_ENABLED=false",
        ),
        ({}, (), "cex_transfer_ingest", False, "MG_CEX_TRANSFER_INGEST_VENUES_CSV is empty"),
        (
            {"cex_transfer_ingest_venues_csv": " , "},
            (),
            "cex_transfer_ingest",
            False,
            "MG_CEX_TRANSFER_INGEST_VENUES_CSV is empty",
        ),
        ({}, (), "balance_snapshot", False, "MG_BALANCE_SNAPSHOT_ENABLED=false"),
        ({}, (), "ccip_drift", False, "MG_CCIP_ENABLED=false"),
        (
            {"ccip_enabled": True},
            (),
            "ccip_drift",
            False,
            "MG_CCIP_ENABLED=true, but it needs a CCIP sidecar client (not available)",
        ),
        (
            {"verify_drift_enabled": False},
            (),
            "verify_drift",
            False,
            "MG_VERIFY_DRIFT_ENABLED=false",
        ),
        # on by default since issue 43 item 4: without an RPC client it cannot run
        (
            {},
            (),
            "verify_drift",
            False,
            "MG_VERIFY_DRIFT_ENABLED=true, but it needs an EVM RPC client and EVM "
            "endpoints (not available)",
        ),
        # verify_drift re-reads chains: it needs the evm provider's RPC clients (issue 11)
        (
            {"verify_drift_enabled": True},
            (),
            "verify_drift",
            False,
            "MG_VERIFY_DRIFT_ENABLED=true, but it needs an EVM RPC client and EVM "
            "endpoints (not available)",
        ),
        (
            {"verify_drift_enabled": True},
            ("evm_rpc",),
            "verify_drift",
            True,
            "MG_VERIFY_DRIFT_ENABLED=true",
        ),
        (
            {"cex_transfer_ingest_venues_csv": "binance, okx"},
            (),
            "cex_transfer_ingest",
            True,
            "MG_CEX_TRANSFER_INGEST_VENUES_CSV=binance,okx",
        ),
        (
            {"balance_snapshot_enabled": True},
            (),
            "balance_snapshot",
            True,
            "MG_BALANCE_SNAPSHOT_ENABLED=true",
        ),
        ({}, (), "balance_history_rollup", True, "MG_BALANCE_HISTORY_ENABLED=true"),
    ],
)
def test_conditional_rules(changes, capabilities, worker, enabled, reason) -> None:
    resolved = by_name(Settings(**changes), capabilities)[worker]
    assert (resolved.enabled, resolved.reason) == (enabled, reason)


def test_skips_worth_a_warning_are_the_ones_whose_flag_said_yes() -> None:
    workers = by_name(Settings())
    assert skipped_with_warning(workers["evm_nonce_reaper"])
    assert skipped_with_warning(workers["verify_drift"])  # on by default, no RPC client here
    off = by_name(Settings(verify_drift_enabled=False))
    assert not skipped_with_warning(off["verify_drift"])  # flag off: nothing to warn about
    assert not skipped_with_warning(workers["node_dispatcher"])


def test_reapers_join_core_when_they_can_run() -> None:
    spec = WorkerSpec(
        "evm_nonce_reaper",
        "core",
        "qtg.services.audit.promote_audit_outbox",
        "evm_nonce_reaper_interval_seconds",
        rule=flag("evm_nonce_reaper_enabled"),
        requires=("evm_rpc",),
    )
    [with_client] = resolve_workers(Settings(), ("evm_rpc",), [spec])
    [without] = resolve_workers(Settings(), (), [spec])
    assert with_client.enabled and with_client.group == "core"
    assert with_client.describe() == (
        "evm_nonce_reaper (core, every 60 s, MG_EVM_NONCE_REAPER_ENABLED=true)"
    )
    assert not without.enabled


def test_interval_and_jitter_come_from_settings() -> None:
    workers = by_name(Settings(node_dispatch_interval_seconds=0.25, worker_jitter_seconds=0.05))
    assert workers["node_dispatcher"].interval == 0.25
    assert workers["node_dispatcher"].jitter == 0.05


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (WorkerSpec("x", "core", None, "nope_seconds"), "Settings has no field 'nope_seconds'"),
        (WorkerSpec("x", "core", "a.b", None), "needs an interval setting"),
        (WorkerSpec("x", "core", None, None, "qtg_nowhere"), "unknown channel 'qtg_nowhere'"),
        (WorkerSpec("x", "middle", None, None), "group must be core or sidecar"),  # type: ignore[arg-type]
        (WorkerSpec("x", "core", None, None, requires=("gpu",)), "unknown capability 'gpu'"),
    ],
)
def test_validate_names_the_worker_and_the_problem(spec, message) -> None:
    with pytest.raises(RegistryError, match="worker x") as info:
        validate([spec])
    assert message in str(info.value)
    with pytest.raises(RegistryError, match="declared twice"):
        validate([WORKERS[0], WORKERS[0]])


def test_load_imports_at_start_up_and_names_a_typo() -> None:
    good = WorkerSpec(
        "a",
        "sidecar",
        "qtg.services.audit.promote_audit_outbox",
        "audit_outbox_promoter_interval_seconds",
    )
    [loaded] = load(resolve_workers(Settings(), (), [good]))
    assert loaded.service.__name__ == "promote_audit_outbox" and loaded.next_due is None

    typo_module = WorkerSpec(
        "b", "core", "qtg.services.dispatchh.dispatch_ready_nodes", "node_dispatch_interval_seconds"
    )
    with pytest.raises(WorkerLoadError, match=r"worker b: cannot import qtg\.services\.dispatchh"):
        load(resolve_workers(Settings(), (), [typo_module]))
    typo_attr = WorkerSpec(
        "c", "core", "qtg.services.audit.promote_audit_outbx", "node_dispatch_interval_seconds"
    )
    with pytest.raises(WorkerLoadError, match=r"worker c: module qtg\.services\.audit has no"):
        load(resolve_workers(Settings(), (), [typo_attr]))
    with pytest.raises(WorkerLoadError, match="not a dotted path"):
        import_path("nodots", worker="d")
    # a disabled worker is not imported at all
    assert load(resolve_workers(Settings(workers_enabled=False), (), [typo_module])) == []


def test_a_default_start_says_once_at_info_what_it_skipped(caplog) -> None:
    """Workers on only by default that cannot run here: one info line, no warnings."""
    import logging

    from qtg.runtime import assembly

    caplog.set_level(logging.INFO, logger="qtg.runtime")
    workers = resolve_workers(Settings.from_env({}))
    assembly.log_worker_set(workers, env={})
    records = [r for r in caplog.records if r.name == "qtg.runtime"]
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []
    [summary] = [r for r in records if hasattr(r, "skipped")]
    assert summary.levelno == logging.INFO
    assert summary.skipped == ["evm_nonce_reaper", "verify_drift"]
    assert "MG_PROVIDERS" in summary.getMessage()
    assert "MG_EVM_NONCE_REAPER_ENABLED=false" in summary.getMessage()
    assert "MG_VERIFY_DRIFT_ENABLED=false" in summary.getMessage()


def test_a_worker_the_operator_turned_on_but_cannot_run_is_a_warning(caplog) -> None:
    import logging

    from qtg.runtime import assembly

    env = {"MG_EVM_NONCE_REAPER_ENABLED": "true"}
    caplog.set_level(logging.INFO, logger="qtg.runtime")
    assembly.log_worker_set(resolve_workers(Settings.from_env(env)), env=env)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.worker for r in warnings] == ["evm_nonce_reaper"]
    # what else is on only by default and cannot run here (verify_drift, since issue 43
    # item 4) is the info summary, not a warning
    [summary] = [r for r in caplog.records if hasattr(r, "skipped")]
    assert summary.levelno == logging.INFO and summary.skipped == ["verify_drift"]
