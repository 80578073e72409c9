"""The provider registry: which executor serves an action_type, which signer a key names.

Providers are found, not hard-wired (DESIGN §5): each is a Python entry point
in the group `qtg.providers` whose value is `register(registry, settings, db)`,
and `MG_PROVIDERS` says which of them this process loads. An operator adds a
real exchange or chain integration by installing a package, without touching
qtg. An item of `MG_PROVIDERS` written `module:callable` is imported directly,
for an integration that is not packaged.

The registry refuses ambiguity when it is filled, not when money is moving:
two executors under one key, or two executors both claiming an action_type
that a plan node may name without an executor_key, would otherwise leave the
choice of who moves the funds to registration order. Two executors may serve
the same action_type only under distinct keys, and then a lookup without a key
is refused (`AmbiguousExecutorError`) so the plan must say which one.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, cast

from qtg.config import ConfigError, Settings
from qtg.providers.balances import BalanceFetcher, BalanceFetcherError, BalanceFetcherRegistry
from qtg.providers.base import Executor, Signer
from qtg.providers.cex import CexClient, CexClientRegistry

if TYPE_CHECKING:
    from qtg.db import Database

ENTRY_POINT_GROUP = "qtg.providers"

Register = Callable[["ProviderRegistry", Settings, "Database"], None]


class RegistrationError(ValueError):
    """A provider tried to register something the registry cannot accept."""


class UnknownExecutorError(LookupError):
    """No executor serves this action_type (under this executor_key)."""

    def __init__(self, message: str, *, action_type: str, executor_key: str | None) -> None:
        super().__init__(message)
        self.action_type = action_type
        self.executor_key = executor_key


class AmbiguousExecutorError(UnknownExecutorError):
    """Several executors serve this action_type and no executor_key chose one."""


class UnknownSignerError(LookupError):
    def __init__(self, message: str, *, signer_key: str) -> None:
        super().__init__(message)
        self.signer_key = signer_key


class ProviderRegistry:
    """Executors by key and by action_type, signers by key. Filled at start-up, then read-only."""

    def __init__(self) -> None:
        self._executors: dict[str, Executor] = {}
        self._by_action_type: dict[str, list[str]] = {}
        self._signers: dict[str, Signer] = {}
        self._closers: list[Callable[[], Awaitable[None]]] = []
        # treasury view (issue 13): balance fetchers and CEX transfer clients
        self.balance_fetcher_registry = BalanceFetcherRegistry()
        self.cex_client_registry = CexClientRegistry()
        # What this process can do beyond executing (reference "Always-on vs
        # conditional"): a provider adds e.g. "evm_rpc"; runtime/assembly.py passes it to
        # resolve_workers so the workers that need it are registered.
        self.capabilities: set[str] = set()
        # The evm provider's JSON-RPC clients by chain id, for evm_nonce_reaper.
        self.evm_rpcs: dict[int, Any] = {}
        #: the evm provider's ChainJudge (issue 24): evm_nonce_reaper acts through it
        self.evm_judge: Any = None
        # The ccip provider's lanes (by name) and CCIP sidecar client, for ccip_drift.
        self.ccip_lanes: dict[str, Any] = {}
        self.ccip_sidecar: Any = None

    # ------------------------------------------------------------ lifecycle

    def add_closer(self, closer: Callable[[], Awaitable[None]]) -> None:
        """Something a provider holds (its own connection pool, an HTTP client)
        that must be released when the runtime stops."""
        self._closers.append(closer)

    async def aclose(self) -> None:
        """Release what providers hold, last registered first."""
        while self._closers:
            await self._closers.pop()()

    # ------------------------------------------------------------ registration

    def add_executor(self, executor: Executor) -> None:
        if not isinstance(executor, Executor):
            raise RegistrationError(
                f"{executor!r} is not an Executor: it needs key, action_types, preflight, "
                "prepare, submit, observe and recover"
            )
        key = _key(executor.key, "executor", executor)
        action_types = executor.action_types
        if not isinstance(action_types, frozenset) or not action_types:
            raise RegistrationError(
                f"executor {key!r}: action_types must be a non-empty frozenset of strings"
            )
        bad = [t for t in action_types if not isinstance(t, str) or not t.strip()]
        if bad:
            raise RegistrationError(f"executor {key!r}: invalid action_type(s) {bad!r}")
        if key in self._executors:
            raise RegistrationError(
                f"executor key {key!r} is already registered "
                f"(by {type(self._executors[key]).__name__}); executor keys must be unique"
            )
        self._executors[key] = executor
        for action_type in sorted(action_types):
            self._by_action_type.setdefault(action_type, []).append(key)

    def add_signer(self, signer: Signer) -> None:
        if not isinstance(signer, Signer):
            raise RegistrationError(f"{signer!r} is not a Signer: it needs key and sign()")
        key = _key(signer.key, "signer", signer)
        if key in self._signers:
            raise RegistrationError(
                f"signer key {key!r} is already registered "
                f"(by {type(self._signers[key]).__name__}); signer keys must be unique"
            )
        self._signers[key] = signer

    def add_balance_fetcher(self, fetcher: BalanceFetcher) -> None:
        try:
            self.balance_fetcher_registry.add(fetcher)
        except BalanceFetcherError as exc:
            raise RegistrationError(str(exc)) from None

    def add_cex_client(self, client: CexClient) -> None:
        try:
            self.cex_client_registry.add(client)
        except ValueError as exc:
            raise RegistrationError(str(exc)) from None

    # ------------------------------------------------------------------ lookup

    def executor_for(self, action_type: str, executor_key: str | None = None) -> Executor:
        """The executor for a plan node: by its executor_key if it names one, else the
        only executor serving its action_type."""
        if executor_key is not None:
            executor = self._executors.get(executor_key)
            if executor is None:
                raise UnknownExecutorError(
                    f"no executor registered under key {executor_key!r} "
                    f"(for action_type {action_type!r}); registered: "
                    f"{', '.join(sorted(self._executors)) or 'none'}",
                    action_type=action_type,
                    executor_key=executor_key,
                )
            if action_type not in executor.action_types:
                raise UnknownExecutorError(
                    f"executor {executor_key!r} does not serve action_type {action_type!r}",
                    action_type=action_type,
                    executor_key=executor_key,
                )
            return executor
        keys = self._by_action_type.get(action_type, [])
        if not keys:
            raise UnknownExecutorError(
                f"no executor serves action_type {action_type!r}",
                action_type=action_type,
                executor_key=None,
            )
        if len(keys) > 1:
            raise AmbiguousExecutorError(
                f"action_type {action_type!r} is served by executors {', '.join(keys)}; "
                "the plan node must name one with executor_key",
                action_type=action_type,
                executor_key=None,
            )
        return self._executors[keys[0]]

    def signer(self, key: str) -> Signer:
        signer = self._signers.get(key)
        if signer is None:
            raise UnknownSignerError(
                f"no signer registered under key {key!r}; registered: "
                f"{', '.join(sorted(self._signers)) or 'none'}",
                signer_key=key,
            )
        return signer

    def executors(self) -> list[Executor]:
        return [self._executors[k] for k in sorted(self._executors)]

    def signers(self) -> list[Signer]:
        return [self._signers[k] for k in sorted(self._signers)]

    def action_types(self) -> frozenset[str]:
        return frozenset(self._by_action_type)


def _key(value: Any, what: str, obj: object) -> str:
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise RegistrationError(
            f"{what} {type(obj).__name__}: key must be a non-empty string without "
            f"surrounding spaces, got {value!r}"
        )
    return value


# ------------------------------------------------------------------ discovery


def provider_names(settings: Settings) -> list[str]:
    """MG_PROVIDERS as a list: comma separated, blanks ignored, order kept, no repeats."""
    names: list[str] = []
    for item in settings.providers.split(","):
        name = item.strip()
        if name and name not in names:
            names.append(name)
    return names


def build_registry(
    settings: Settings,
    db: Database,
    *,
    available: Iterable[EntryPoint] | None = None,
) -> ProviderRegistry:
    """Load every provider MG_PROVIDERS names and let each register itself.

    `available` replaces the installed entry points (tests). An unknown name is
    a ConfigError at start-up: a runtime that silently ran without the provider
    an operator asked for would leave its nodes READY forever.
    """
    installed: dict[str, EntryPoint] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP) if available is None else available:
        if ep.name in installed and installed[ep.name].value != ep.value:
            raise ConfigError(
                f"MG_PROVIDERS: provider {ep.name!r} is installed twice "
                f"({installed[ep.name].value} and {ep.value})"
            )
        installed[ep.name] = ep
    registry = ProviderRegistry()
    for name in provider_names(settings):
        register = _load(name, installed)
        try:
            register(registry, settings, db)
        except RegistrationError as exc:
            raise ConfigError(f"MG_PROVIDERS: provider {name!r} failed to register: {exc}") from exc
    return registry


def _load(name: str, installed: dict[str, EntryPoint]) -> Register:
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"MG_PROVIDERS: cannot load provider {name!r}: {exc}") from exc
    else:
        ep = installed.get(name)
        if ep is None:
            raise ConfigError(
                f"MG_PROVIDERS: unknown provider {name!r}; installed providers "
                f"(entry-point group {ENTRY_POINT_GROUP}): {', '.join(sorted(installed)) or 'none'}"
            )
        try:
            target = ep.load()
        except (ImportError, AttributeError) as exc:
            raise ConfigError(
                f"MG_PROVIDERS: provider {name!r} ({ep.value}) cannot be loaded: {exc}"
            ) from exc
    if not callable(target):
        raise ConfigError(f"MG_PROVIDERS: provider {name!r} is not callable: {target!r}")
    # an entry point's object: checked callable; its signature is the provider's contract
    return cast("Callable[[ProviderRegistry, Settings, Database], None]", target)
