"""executor_health (reference §6): provider health, observed signer identity, roster posture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from sidecar_fixtures import context, make_settings

from qtg.db import Database, Query
from qtg.providers.base import HealthReport, HealthState
from qtg.providers.registry import ProviderRegistry
from qtg.services.context import ServiceContext
from qtg.services.errors import InvalidInput, NotFound
from qtg.services.health import (
    executor_roster,
    identity_posture,
    normalize_evm_address,
    refresh_executor_health,
    set_expected_signer_identity,
    signer_roster,
)

ADDR_A = "0x" + "ab" * 20
ADDR_A_MIXED = "0x" + "aB" * 20
ADDR_B = "0x" + "cd" * 20
ZERO = "0x" + "0" * 40

AUDIT = Query(
    "test/health_audit",
    "SELECT actor, action, object_type, object_id, detail FROM audit_outbox ORDER BY id",
)


# ----------------------------------------------------------- test providers


class PlainExecutor:
    """An executor without health()."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.action_types = frozenset({f"{key}_action"})

    async def preflight(self, ctx: Any) -> None:
        raise NotImplementedError

    async def prepare(self, ctx: Any) -> Any:
        raise NotImplementedError

    async def submit(self, ctx: Any, prepared: Any, signature: Any, idempotency_key: str) -> Any:
        raise NotImplementedError

    async def observe(self, ctx: Any) -> Any:
        raise NotImplementedError

    async def recover(self, ctx: Any) -> Any:
        raise NotImplementedError


class ProbedExecutor(PlainExecutor):
    """health() answers with `answer`: a HealthReport, an exception to raise, HANG, or junk."""

    def __init__(self, key: str, answer: Any) -> None:
        super().__init__(key)
        self.answer = answer

    async def health(self) -> Any:
        return await _answer(self.answer)


class PlainSigner:
    def __init__(self, key: str) -> None:
        self.key = key

    async def sign(self, request: Any) -> str:
        raise NotImplementedError


class ProbedSigner(PlainSigner):
    def __init__(self, key: str, answer: Any) -> None:
        super().__init__(key)
        self.answer = answer

    async def health(self) -> Any:
        return await _answer(self.answer)


HANG = object()


async def _answer(answer: Any) -> Any:
    if answer is HANG:
        await trio.sleep_forever()
    if isinstance(answer, BaseException):
        raise answer
    return answer


def healthy(address: str | None = None, **detail: Any) -> HealthReport:
    return HealthReport(state=HealthState.HEALTHY, detail=detail, signer_address=address)


def registry(*providers: Any) -> ProviderRegistry:
    reg = ProviderRegistry()
    for provider in providers:
        if isinstance(provider, PlainExecutor):
            reg.add_executor(provider)
        else:
            reg.add_signer(provider)
    return reg


@pytest.fixture
def make_ctx(db: Database, tmp_path: Path) -> Any:
    settings = make_settings(tmp_path, executor_health_timeout_seconds=0.5)

    def make(*providers: Any) -> ServiceContext:
        return context(db, settings, registry(*providers))

    return make


async def executors(db: Database) -> dict[str, dict[str, Any]]:
    return {r["executor_key"]: r for r in await executor_roster(db)}


async def signers(db: Database) -> dict[str, dict[str, Any]]:
    return {r["signer_key"]: r for r in await signer_roster(db)}


# ---------------------------------------------------------------- executors


async def test_every_executor_health_is_persisted(make_ctx: Any, db: Database) -> None:
    ctx = make_ctx(
        ProbedExecutor("fine", healthy(latency_ms=3)),
        ProbedExecutor("slowish", HealthReport(state=HealthState.DEGRADED)),
        PlainExecutor("silent"),
        ProbedExecutor("broken", RuntimeError("venue down\nstack noise")),
        ProbedExecutor("stuck", HANG),
        ProbedExecutor("junk", "ok"),
    )
    start = trio.current_time()
    with trio.fail_after(5):
        assert await refresh_executor_health(ctx) == 6  # every executor probed
    assert trio.current_time() - start < 2, "a hung health() stalled the pass"

    rows = await executors(db)
    assert rows["fine"]["health_state"] == "healthy"
    assert rows["fine"]["health_detail"] == {"latency_ms": 3}
    assert rows["fine"]["last_health_at"] is not None
    assert rows["fine"]["action_types"] == ["fine_action"]
    assert rows["slowish"]["health_state"] == "degraded"
    assert rows["silent"]["health_state"] == "unknown"
    assert rows["silent"]["last_health_at"] is None
    assert rows["broken"]["health_state"] == "unhealthy"
    assert rows["broken"]["health_detail"] == {"error": "RuntimeError: venue down"}
    assert rows["stuck"]["health_state"] == "unhealthy"
    assert rows["stuck"]["health_detail"] == {"error": "health() timed out after 0.5s"}
    assert rows["junk"]["health_state"] == "unhealthy"
    assert "not a HealthReport" in rows["junk"]["health_detail"]["error"]
    assert all(r["registered"] for r in rows.values())


async def test_health_state_follows_the_latest_answer(make_ctx: Any, db: Database) -> None:
    flaky = ProbedExecutor("flaky", healthy())
    ctx = make_ctx(flaky)
    await refresh_executor_health(ctx)
    first = (await executors(db))["flaky"]
    flaky.answer = RuntimeError("gone")
    await refresh_executor_health(ctx)
    second = (await executors(db))["flaky"]
    assert (first["health_state"], second["health_state"]) == ("healthy", "unhealthy")
    assert second["last_health_at"] >= first["last_health_at"]


async def test_executor_no_longer_registered_becomes_orphan(make_ctx: Any, db: Database) -> None:
    a, b = PlainExecutor("a"), PlainExecutor("b")
    await refresh_executor_health(make_ctx(a, b))
    await refresh_executor_health(make_ctx(a))
    rows = await executors(db)
    assert (rows["a"]["registered"], rows["b"]["registered"]) == (True, False)
    await refresh_executor_health(make_ctx(a, b))
    assert (await executors(db))["b"]["registered"] is True


# ------------------------------------------------------------------ signers


async def test_observed_address_rules(make_ctx: Any, db: Database) -> None:
    good = ProbedSigner("good", healthy(ADDR_A_MIXED))
    ctx = make_ctx(
        good,
        ProbedSigner("zero", healthy(ZERO)),
        ProbedSigner("short", healthy("0x1234")),
        ProbedSigner("nameless", healthy(None)),
        PlainSigner("plain"),
    )
    await refresh_executor_health(ctx)
    rows = await signers(db)
    assert rows["good"]["observed_signer_address"] == ADDR_A  # lowercase
    assert rows["good"]["observed_at"] is not None
    for key in ("zero", "short"):
        assert rows[key]["observed_signer_address"] is None
        assert rows[key]["observed_at"] is None
        assert "signer_address" in rows[key]["health_detail"]["signer_address_error"]
    assert "zero address" in rows["zero"]["health_detail"]["signer_address_error"]
    assert rows["nameless"]["observed_signer_address"] is None
    assert rows["plain"]["health_state"] == "unknown"
    assert rows["plain"]["observed_signer_address"] is None

    # health() fails: no new evidence, the last observation stays
    observed_at = rows["good"]["observed_at"]
    good.answer = RuntimeError("hsm unreachable")
    await refresh_executor_health(ctx)
    row = (await signers(db))["good"]
    assert row["health_state"] == "unhealthy"
    assert (row["observed_signer_address"], row["observed_at"]) == (ADDR_A, observed_at)

    # a new valid address replaces it; a bad one clears it
    good.answer = healthy(ADDR_B)
    await refresh_executor_health(ctx)
    assert (await signers(db))["good"]["observed_signer_address"] == ADDR_B
    good.answer = healthy(ZERO)
    await refresh_executor_health(ctx)
    assert (await signers(db))["good"]["observed_signer_address"] is None


async def test_vanished_signer_is_orphaned_and_its_observation_cleared(
    make_ctx: Any, db: Database
) -> None:
    signer = ProbedSigner("hsm", healthy(ADDR_A))
    await refresh_executor_health(make_ctx(signer))
    await set_expected_signer_identity(db, "hsm", ADDR_A, actor="admin:root")
    assert (await signers(db))["hsm"]["identity_posture"] == "match"

    await refresh_executor_health(make_ctx())
    row = (await signers(db))["hsm"]
    assert row["registered"] is False
    assert (row["observed_signer_address"], row["observed_at"]) == (None, None)
    assert row["expected_signer_address"] == ADDR_A  # enrollment survives
    assert row["identity_posture"] == "orphan"

    await refresh_executor_health(make_ctx(signer))
    row = (await signers(db))["hsm"]
    assert (row["registered"], row["identity_posture"]) == (True, "match")


async def test_worker_never_writes_the_expected_identity(make_ctx: Any, db: Database) -> None:
    signer = ProbedSigner("hsm", healthy(ADDR_B))
    ctx = make_ctx(signer)
    await refresh_executor_health(ctx)
    await set_expected_signer_identity(db, "hsm", ADDR_A, actor="admin:root")
    await refresh_executor_health(ctx)
    row = (await signers(db))["hsm"]
    assert row["expected_signer_address"] == ADDR_A
    assert row["expected_set_by"] == "admin:root"
    assert row["identity_posture"] == "mismatch"


async def test_roster_derives_every_posture(make_ctx: Any, db: Database) -> None:
    gone = ProbedSigner("gone", healthy(ADDR_A))
    present = [
        ProbedSigner("match", healthy(ADDR_A)),
        ProbedSigner("mismatch", healthy(ADDR_B)),
        ProbedSigner("unenrolled", healthy(ADDR_A)),
        PlainSigner("unobserved"),
    ]
    await refresh_executor_health(make_ctx(gone, *present))
    for key in ("match", "mismatch", "unobserved", "gone"):
        await set_expected_signer_identity(db, key, ADDR_A, actor="admin:root")
    await refresh_executor_health(make_ctx(*present))
    postures = {k: r["identity_posture"] for k, r in (await signers(db)).items()}
    assert postures == {
        "match": "match",
        "mismatch": "mismatch",
        "unenrolled": "unenrolled",
        "unobserved": "unobserved",
        "gone": "orphan",
    }


async def test_set_expected_identity_validates_and_audits(make_ctx: Any, db: Database) -> None:
    await refresh_executor_health(make_ctx(PlainSigner("hsm")))
    for bad in (ZERO, "0x1234", ADDR_A + "\n", "ab" * 20, None, 42):
        with pytest.raises(InvalidInput) as caught:
            await set_expected_signer_identity(db, "hsm", bad, actor="admin:root")
        assert caught.value.detail["field"] == "expected_signer_address"
    with pytest.raises(NotFound):
        await set_expected_signer_identity(db, "nope", ADDR_A, actor="admin:root")
    assert await db.fetch(AUDIT) == []

    entry = await set_expected_signer_identity(db, "hsm", ADDR_A_MIXED, actor="admin:root")
    assert entry["expected_signer_address"] == ADDR_A
    assert entry["identity_posture"] == "unobserved"
    await set_expected_signer_identity(db, "hsm", ADDR_B, actor="admin:other")
    audit = await db.fetch(AUDIT)
    assert {a["action"] for a in audit} == {"signer.expected_identity_set"}
    assert [(a["actor"], a["object_id"], a["detail"]) for a in audit] == [
        ("admin:root", "hsm", {"previous": None, "expected": ADDR_A}),
        ("admin:other", "hsm", {"previous": ADDR_A, "expected": ADDR_B}),
    ]


# -------------------------------------------------------------------- rules


def test_normalize_evm_address() -> None:
    assert normalize_evm_address(ADDR_A_MIXED) == ADDR_A
    for bad in (ZERO, "0X" + "ab" * 20, "0x" + "ab" * 19, "0x" + "ab" * 21, "0x" + "zz" * 20):
        with pytest.raises(ValueError):
            normalize_evm_address(bad)


@pytest.mark.parametrize(
    ("registered", "expected", "observed", "posture"),
    [
        (True, ADDR_A, ADDR_A, "match"),
        (True, ADDR_A, ADDR_B, "mismatch"),
        (True, None, ADDR_A, "unenrolled"),
        (True, None, None, "unenrolled"),
        (True, ADDR_A, None, "unobserved"),
        (False, ADDR_A, ADDR_A, "orphan"),
        (False, None, None, "orphan"),
    ],
)
def test_identity_posture(
    registered: bool, expected: str | None, observed: str | None, posture: str
) -> None:
    assert identity_posture(registered=registered, expected=expected, observed=observed) == posture
