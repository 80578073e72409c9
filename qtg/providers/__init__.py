"""Providers (DESIGN §5): the Executor/Signer contract, the registry, the sandbox.

Concrete providers (qtg.providers.sandbox, or a package of your own) are
loaded by `build_registry` from the `qtg.providers` entry-point group.
"""

from qtg.providers.base import (
    Executor,
    HealthReport,
    HealthState,
    ObserveResult,
    ObserveStatus,
    PreflightError,
    PreparedAction,
    ProviderError,
    RecoverOutcome,
    RecoverResult,
    Signer,
    SigningRefused,
    SubmitRejected,
    SubmitResult,
)
from qtg.providers.registry import (
    ENTRY_POINT_GROUP,
    AmbiguousExecutorError,
    ProviderRegistry,
    RegistrationError,
    UnknownExecutorError,
    UnknownSignerError,
    build_registry,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "AmbiguousExecutorError",
    "Executor",
    "HealthReport",
    "HealthState",
    "ObserveResult",
    "ObserveStatus",
    "PreflightError",
    "PreparedAction",
    "ProviderError",
    "ProviderRegistry",
    "RecoverOutcome",
    "RecoverResult",
    "RegistrationError",
    "Signer",
    "SigningRefused",
    "SubmitRejected",
    "SubmitResult",
    "UnknownExecutorError",
    "UnknownSignerError",
    "build_registry",
]
