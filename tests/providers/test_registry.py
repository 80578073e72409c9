"""The provider registry: lookups, refusals at registration, entry-point discovery."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

import pytest

from qtg.config import ConfigError, Settings
from qtg.db import Database
from qtg.providers import (
    AmbiguousExecutorError,
    Executor,
    ProviderRegistry,
    RegistrationError,
    UnknownExecutorError,
    UnknownSignerError,
    build_registry,
)
from qtg.providers.sandbox import ACTION_TYPES, SandboxExecutor, SandboxSigner


class FakeExecutor:
    """Just enough to satisfy the Executor protocol; its methods are never called."""

    def __init__(self, key: str, *action_types: str) -> None:
        self.key = key
        self.action_types = frozenset(action_types)

    async def preflight(self, ctx): ...
    async def prepare(self, ctx): ...
    async def submit(self, ctx, prepared, signature, idempotency_key): ...
    async def observe(self, ctx): ...
    async def recover(self, ctx): ...


class FakeSigner:
    def __init__(self, key: str) -> None:
        self.key = key

    async def sign(self, request): ...


def test_executor_lookup_by_action_type_and_by_key() -> None:
    registry = ProviderRegistry()
    cex, chain = (
        FakeExecutor("cex", "cex_withdrawal", "cex_deposit_status"),
        FakeExecutor("chain", "evm_transfer"),
    )
    registry.add_executor(cex)
    registry.add_executor(chain)
    assert registry.executor_for("cex_withdrawal") is cex
    assert registry.executor_for("evm_transfer") is chain
    assert registry.executor_for("evm_transfer", "chain") is chain
    assert registry.executors() == [cex, chain]
    assert registry.action_types() == {"cex_withdrawal", "cex_deposit_status", "evm_transfer"}


def test_unknown_executor_errors_name_what_was_asked() -> None:
    registry = ProviderRegistry()
    registry.add_executor(FakeExecutor("cex", "cex_withdrawal"))
    with pytest.raises(UnknownExecutorError, match=r"'ccip_send'") as no_type:
        registry.executor_for("ccip_send")
    assert no_type.value.action_type == "ccip_send"
    with pytest.raises(UnknownExecutorError, match=r"'nope'.*'cex_withdrawal'.*registered: cex"):
        registry.executor_for("cex_withdrawal", "nope")
    with pytest.raises(UnknownExecutorError, match=r"'cex' does not serve action_type 'ccip_send'"):
        registry.executor_for("ccip_send", "cex")


def test_same_key_twice_is_refused_at_registration() -> None:
    registry = ProviderRegistry()
    registry.add_executor(FakeExecutor("chain", "evm_transfer"))
    with pytest.raises(RegistrationError, match=r"'chain' is already registered"):
        registry.add_executor(FakeExecutor("chain", "evm_transfer"))
    # the refused one left nothing behind
    assert registry.executor_for("evm_transfer").action_types == {"evm_transfer"}
    assert len(registry.executors()) == 1


def test_shared_action_type_needs_an_executor_key() -> None:
    registry = ProviderRegistry()
    a, b = FakeExecutor("chain_a", "evm_transfer"), FakeExecutor("chain_b", "evm_transfer")
    registry.add_executor(a)
    registry.add_executor(b)
    with pytest.raises(AmbiguousExecutorError, match=r"chain_a, chain_b.*executor_key"):
        registry.executor_for("evm_transfer")
    assert registry.executor_for("evm_transfer", "chain_b") is b
    # ambiguity is a kind of "no executor": a dispatcher handling one handles both
    assert issubclass(AmbiguousExecutorError, UnknownExecutorError)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (object(), "is not an Executor"),
        (FakeExecutor("", "evm_transfer"), "key must be a non-empty string"),
        (FakeExecutor(" x", "evm_transfer"), "key must be a non-empty string"),
        (FakeExecutor("x"), "action_types must be a non-empty frozenset"),
        (FakeExecutor("x", ""), "invalid action_type"),
    ],
)
def test_malformed_executors_are_refused(bad: object, message: str) -> None:
    registry = ProviderRegistry()
    with pytest.raises(RegistrationError, match=message):
        registry.add_executor(bad)  # type: ignore[arg-type]
    assert registry.executors() == []


def test_signer_lookup_and_errors() -> None:
    registry = ProviderRegistry()
    hsm = FakeSigner("hsm")
    registry.add_signer(hsm)
    assert registry.signer("hsm") is hsm
    assert registry.signers() == [hsm]
    with pytest.raises(UnknownSignerError, match=r"'kms'.*registered: hsm") as err:
        registry.signer("kms")
    assert err.value.signer_key == "kms"
    with pytest.raises(RegistrationError, match=r"'hsm' is already registered"):
        registry.add_signer(FakeSigner("hsm"))
    with pytest.raises(RegistrationError, match=r"is not a Signer"):
        registry.add_signer(object())  # type: ignore[arg-type]


def test_sandbox_entry_point_is_installed() -> None:
    found = {ep.name: ep.value for ep in entry_points(group="qtg.providers")}
    assert found.get("sandbox") == "qtg.providers.sandbox:register"


async def test_build_registry_loads_the_sandbox_by_default(db: Database) -> None:
    settings = Settings.from_env({})
    assert settings.providers == "sandbox"
    registry = build_registry(settings, db)
    executor = registry.executor_for("cctp_burn")
    assert isinstance(executor, SandboxExecutor)
    assert isinstance(executor, Executor)
    assert registry.action_types() == ACTION_TYPES
    assert isinstance(registry.signer("sandbox"), SandboxSigner)
    # the executor's health reaches the sandbox's own table
    assert (await executor.health()).state == "healthy"


async def test_unknown_provider_name_stops_start_up(db: Database) -> None:
    settings = Settings.from_env({"MG_PROVIDERS": "sandbox, binance_live"})
    with pytest.raises(
        ConfigError, match=r"MG_PROVIDERS: unknown provider 'binance_live'.*sandbox"
    ):
        build_registry(settings, db)


async def test_empty_provider_list_gives_an_empty_registry(db: Database) -> None:
    registry = build_registry(Settings.from_env({"MG_PROVIDERS": " , "}), db)
    assert registry.executors() == [] and registry.signers() == []


async def test_module_callable_form_and_conflicting_providers(db: Database) -> None:
    """`module:callable` loads an unpackaged provider; a second registration of the same
    keys is a ConfigError naming the provider, not a silent override."""
    direct = build_registry(
        Settings.from_env({"MG_PROVIDERS": "qtg.providers.sandbox:register"}), db
    )
    assert isinstance(direct.executor_for("evm_transfer"), SandboxExecutor)
    both = Settings.from_env({"MG_PROVIDERS": "sandbox,qtg.providers.sandbox:register"})
    with pytest.raises(ConfigError, match=r"'qtg.providers.sandbox:register' failed to register"):
        build_registry(both, db)
    missing = Settings.from_env({"MG_PROVIDERS": "qtg.providers.sandbox:nothing_here"})
    with pytest.raises(ConfigError, match=r"cannot load provider 'qtg.providers.sandbox:nothing"):
        build_registry(missing, db)


async def test_duplicate_installed_names_and_unloadable_entry_points(db: Database) -> None:
    twice = [
        EntryPoint("dup", "qtg.providers.sandbox:register", "qtg.providers"),
        EntryPoint("dup", "elsewhere:register", "qtg.providers"),
    ]
    with pytest.raises(ConfigError, match=r"'dup' is installed twice"):
        build_registry(Settings.from_env({"MG_PROVIDERS": "dup"}), db, available=twice)
    broken = [EntryPoint("broken", "qtg_no_such_module:register", "qtg.providers")]
    with pytest.raises(ConfigError, match=r"'broken'.*cannot be loaded"):
        build_registry(Settings.from_env({"MG_PROVIDERS": "broken"}), db, available=broken)


async def test_empty_sandbox_signer_key_is_a_config_error(db: Database) -> None:
    settings = Settings.from_env({}).replace(sandbox_signer_key="")
    with pytest.raises(ConfigError, match=r"MG_SANDBOX_SIGNER_KEY"):
        build_registry(settings, db)
