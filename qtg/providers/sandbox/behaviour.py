"""How a sandbox node behaves: the `"sandbox"` object of a plan node's config.

Pure parsing, no I/O. Everything a test or a demo wants to inject is chosen
per node, so one template can exercise the happy path on one branch and a
crash inside submit on another:

    {"sandbox": {"latency_ms": 50, "observations_to_complete": 3,
                 "fail": "submit_crash_after", "retry_after_seconds": 1,
                 "recover": "undecided"}}

An unknown field or a wrong type is refused with a message naming it: a typo
such as `"fial"` must not silently run the happy path.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

import msgspec

from qtg.providers.base import ProviderError

CONFIG_KEY = "sandbox"


class Fail(StrEnum):
    PREFLIGHT = "preflight"  # PreflightError
    PREPARE = "prepare"  # prepare() raises: nothing was sent
    SUBMIT_REJECTED = "submit_rejected"  # SubmitRejected, no side effect
    SUBMIT_CRASH_BEFORE = "submit_crash_before"  # RuntimeError before the side effect
    SUBMIT_CRASH_AFTER = "submit_crash_after"  # RuntimeError after the side effect
    OBSERVE_FAILED = "observe_failed"  # the completing observation reports FAILED
    OBSERVE_UNKNOWN = "observe_unknown"  # the completing observation reports UNKNOWN


class Recover(StrEnum):
    UNDECIDED = "undecided"  # recover() answers "cannot tell yet", every time


#: error_code reported for each injected failure, unless the config names another.
DEFAULT_ERROR_CODES: dict[Fail, str] = {
    Fail.PREFLIGHT: "SANDBOX_PREFLIGHT_REJECTED",
    Fail.PREPARE: "SANDBOX_PREPARE_FAILED",
    Fail.SUBMIT_REJECTED: "SANDBOX_SUBMIT_REJECTED",
    Fail.SUBMIT_CRASH_BEFORE: "SANDBOX_SUBMIT_CRASHED",
    Fail.SUBMIT_CRASH_AFTER: "SANDBOX_SUBMIT_CRASHED",
    Fail.OBSERVE_FAILED: "SANDBOX_OBSERVE_FAILED",
    Fail.OBSERVE_UNKNOWN: "SANDBOX_OBSERVE_UNKNOWN",
}


class SandboxConfigError(ProviderError):
    code = "SANDBOX_CONFIG_INVALID"


class Behaviour(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # Simulated round trip of every remote call (submit, observe, recover).
    latency_ms: Annotated[int, msgspec.Meta(ge=0, le=600_000)] | None = None
    # The n-th observation completes (1: the first one does).
    observations_to_complete: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 1
    fail: Fail | None = None
    # Returned with every PENDING observation (the observer prefers it to its own interval).
    retry_after_seconds: Annotated[float, msgspec.Meta(ge=0, le=86_400)] | None = None
    # How recover() answers (None: from the remote system's records, the truth).
    recover: Recover | None = None
    # Overrides the error_code of the injected failure.
    error_code: Annotated[str, msgspec.Meta(min_length=1, max_length=100)] | None = None

    def failure_code(self) -> str:
        assert self.fail is not None
        return self.error_code or DEFAULT_ERROR_CODES[self.fail]


def parse_behaviour(node_config: Mapping[str, Any], default_latency_ms: int) -> Behaviour:
    """The node's behaviour, with the global latency default filled in."""
    raw = node_config.get(CONFIG_KEY, {})
    if not isinstance(raw, Mapping):
        raise SandboxConfigError(
            f"node config {CONFIG_KEY!r} must be an object, got {type(raw).__name__}"
        )
    try:
        behaviour = msgspec.convert(dict(raw), Behaviour)
    except msgspec.ValidationError as exc:
        message = str(exc).replace("`$.", f"`{CONFIG_KEY}.").replace("`$`", f"`{CONFIG_KEY}`")
        raise SandboxConfigError(f"node config {CONFIG_KEY!r}: {message}") from None
    if behaviour.latency_ms is None:
        behaviour = msgspec.structs.replace(behaviour, latency_ms=default_latency_ms)
    return behaviour
