"""Settings: the reference's defaults, and a clear refusal of every bad value."""

from __future__ import annotations

import dataclasses

import pytest

from qtg.config import ConfigError, Settings

DEFAULTS = Settings.from_env({})

# The Runtime Workers Reference's defaults, by environment variable.
REFERENCE_DEFAULTS = {
    "MG_WORKERS_ENABLED": True,
    "MG_NODE_DISPATCH_INTERVAL_SECONDS": 2.0,
    "MG_NODE_OBSERVE_INTERVAL_SECONDS": 5.0,
    "MG_OBSERVE_TIMEOUT_ENFORCEMENT_ENABLED": False,
    "MG_NODE_RECOVERY_INTERVAL_SECONDS": 60.0,
    "MG_NODE_RECOVERY_BATCH_SIZE": 10,
    "MG_CALLBACK_DISPATCH_INTERVAL_SECONDS": 3.0,
    "MG_CALLBACK_BATCH_SIZE": 5,
    "MG_CALLBACK_MAX_ATTEMPTS": 5,
    "MG_EXPIRATION_CHECK_INTERVAL_SECONDS": 30.0,
    "MG_EXPIRATION_BATCH_SIZE": 20,
    "MG_APPROVAL_TTL_SECONDS": 300.0,
    "MG_TEMPLATE_PROPOSAL_EXPIRATION_INTERVAL_SECONDS": 30.0,
    "MG_EXECUTOR_HEALTH_INTERVAL_SECONDS": 60.0,
    "MG_AUDIT_OUTBOX_PROMOTER_INTERVAL_SECONDS": 1.0,
    # conditional workers: flags and intervals
    "MG_EVM_NONCE_REAPER_ENABLED": True,
    "MG_EVM_NONCE_REAPER_INTERVAL_SECONDS": 60.0,
    "MG_CCIP_STRANDED_REAPER_ENABLED": True,
    "MG_CCIP_STRANDED_REAPER_INTERVAL_SECONDS": 60.0,
    "MG_CAPITAL_TRANSFER_FOLLOWUP_ENABLED": False,
    "MG_CAPITAL_TRANSFER_FOLLOWUP_INTERVAL_SECONDS": 60.0,
    "MG_NOTIFY_ENABLED": False,
    "MG_BALANCE_HISTORY_ENABLED": True,
    "MG_CEX_TRANSFER_INGEST_VENUES_CSV": "",
    "MG_BALANCE_SNAPSHOT_ENABLED": False,
    "MG_BALANCE_SNAPSHOT_INTERVAL_SECONDS": 30.0,
    "MG_CCIP_ENABLED": False,
    "MG_VERIFY_DRIFT_INTERVAL_SECONDS": 21_600.0,
    # qtg's own
    "MG_DATABASE_URL": None,
    "MG_LISTEN_DATABASE_URL": None,
    "MG_REACTIVE": True,
}


@pytest.mark.parametrize(("env", "expected"), sorted(REFERENCE_DEFAULTS.items()))
def test_reference_defaults(env: str, expected: object) -> None:
    value = DEFAULTS.redacted()[env]
    assert value == expected
    assert type(value) is type(expected)


# Where qtg's default departs from the reference's, on purpose: variable →
# (the reference's value, qtg's). Each is explained where the setting is defined.
DEPARTURES = {
    # 10,000 nodes waiting through a burst of approvals (docs/operations/deployment.md)
    "MG_NODE_OBSERVE_BATCH_SIZE": (10, 32),
    # a token whose code changed is held before it pays anyone (issue 43 item 4)
    "MG_VERIFY_DRIFT_ENABLED": (False, True),
}


@pytest.mark.parametrize(("env", "values"), sorted(DEPARTURES.items()))
def test_departures_from_the_reference(env: str, values: tuple[object, object]) -> None:
    reference, ours = values
    assert env not in REFERENCE_DEFAULTS
    assert DEFAULTS.redacted()[env] == ours
    # the reference's value is one setting away
    assert Settings.from_env({env: str(reference)}).redacted()[env] == reference


def test_every_field_reads_its_own_variable() -> None:
    envs = [f.metadata["env"] for f in dataclasses.fields(Settings)]
    assert len(envs) == len(set(envs))
    assert all(env.startswith("MG_") for env in envs)


def test_values_are_parsed_by_type() -> None:
    settings = Settings.from_env(
        {
            "MG_NODE_DISPATCH_INTERVAL_SECONDS": " 0.25 ",
            "MG_CALLBACK_MAX_ATTEMPTS": "7",
            "MG_REACTIVE": "off",
            "MG_NOTIFY_ENABLED": "YES",
            "MG_NOTIFY_EMAIL_TO": "oncall@example.com",  # an enabled dispatcher needs a route
            "MG_LOG_LEVEL": "debug",
            "MG_DATABASE_URL": "postgresql://u@db/qtg",
            "MG_LISTEN_DATABASE_URL": "",
        }
    )
    assert settings.node_dispatch_interval_seconds == 0.25
    assert settings.callback_max_attempts == 7
    assert settings.reactive is False
    assert settings.notify_enabled is True
    assert settings.log_level == "DEBUG"
    assert settings.database_url == "postgresql://u@db/qtg"
    assert settings.listen_database_url is None  # empty means unset


@pytest.mark.parametrize(
    ("env", "raw", "says"),
    [
        ("MG_NODE_DISPATCH_INTERVAL_SECONDS", "2s", "expected a number"),
        ("MG_NODE_DISPATCH_INTERVAL_SECONDS", "nan", "expected a number"),
        ("MG_NODE_OBSERVE_INTERVAL_SECONDS", "0", "greater than 0"),
        ("MG_NODE_RECOVERY_INTERVAL_SECONDS", "-5", "greater than 0"),
        ("MG_CALLBACK_MAX_ATTEMPTS", "2.5", "expected an integer"),
        ("MG_CALLBACK_MAX_ATTEMPTS", "0", "at least 1"),
        ("MG_NODE_OBSERVE_BATCH_SIZE", "ten", "expected an integer"),
        ("MG_WORKER_JITTER_SECONDS", "-0.1", "at least 0"),
        ("MG_WORKERS_ENABLED", "maybe", "expected true or false"),
        ("MG_REACTIVE", "", "expected true or false"),
        ("MG_LOG_LEVEL", "LOUD", "expected one of"),
        ("MG_LOG_FORMAT", "xml", "expected one of"),
        # Ports (issue 26): 99999 became port 34463 (modulo 65,536), 65536 acted like 0.
        ("MG_API_PORT", "99999", "at most 65535"),
        ("MG_API_PORT", "65536", "at most 65535"),
        ("MG_API_PORT", "-1", "at least 0"),
        ("MG_METRICS_PORT", "70000", "at most 65535"),
        ("MG_NOTIFY_SMTP_PORT", "0", "at least 1"),
        ("MG_NOTIFY_SMTP_PORT", "65536", "at most 65535"),
        # Issue 27: a level that can lose an acknowledged commit in a failover is refused.
        ("MG_DATABASE_SYNCHRONOUS_COMMIT", "local", "expected one of on, remote_apply"),
        ("MG_DATABASE_SYNCHRONOUS_COMMIT", "remote_write", "expected one of"),
        ("MG_REQUIRE_SYNCHRONOUS_REPLICATION", "sure", "expected one of auto, true, false"),
        ("MG_DURABILITY_CHECK_INTERVAL_SECONDS", "0", "greater than 0"),
    ],
)
def test_bad_values_name_the_variable(env: str, raw: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({env: raw})
    message = str(caught.value)
    assert message.startswith(f"{env}:")
    assert says in message
    assert repr(raw) in message
    assert "\n" not in message


def test_pool_sizes_must_agree() -> None:
    with pytest.raises(ConfigError, match=r"^MG_DB_POOL_MIN_SIZE:"):
        Settings.from_env({"MG_DB_POOL_MIN_SIZE": "5", "MG_DB_POOL_MAX_SIZE": "2"})


def test_secrets_are_redacted() -> None:
    settings = Settings.from_env(
        {
            "MG_DATABASE_URL": "postgresql://qtg:hunter2@db/qtg",
            "MG_LISTEN_DATABASE_URL": "postgresql://qtg:hunter2@db:6432/qtg",
            "MG_CALLBACK_SIGNING_SECRET": "s3cret-callback-key",
        }
    )
    shown = settings.redacted()
    assert shown["MG_DATABASE_URL"] == "***"
    assert shown["MG_LISTEN_DATABASE_URL"] == "***"
    assert shown["MG_CALLBACK_SIGNING_SECRET"] == "***"
    assert "hunter2" not in repr(shown) and "s3cret" not in repr(shown)
    assert shown["MG_NODE_DISPATCH_INTERVAL_SECONDS"] == 2.0  # not a secret: shown as is
    assert DEFAULTS.redacted()["MG_CALLBACK_SIGNING_SECRET"] is None  # unset stays visible as unset


def test_from_env_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MG_NODE_OBSERVE_INTERVAL_SECONDS", "1.5")
    assert Settings.from_env().node_observe_interval_seconds == 1.5
    monkeypatch.setenv("MG_NODE_OBSERVE_INTERVAL_SECONDS", "soon")
    with pytest.raises(ConfigError, match="MG_NODE_OBSERVE_INTERVAL_SECONDS"):
        Settings.from_env()


def test_port_edges_that_mean_something_are_kept() -> None:
    # 0 is "any free port" where the runtime listens (the tests rely on it);
    # an SMTP server has no port 0 to connect to.
    edges = Settings.from_env(
        {"MG_API_PORT": "0", "MG_METRICS_PORT": "65535", "MG_NOTIFY_SMTP_PORT": "1"}
    )
    assert (edges.api_port, edges.metrics_port, edges.notify_smtp_port) == (0, 65535, 1)
    assert Settings.from_env({"MG_API_PORT": "65535"}).api_port == 65535
