"""The sandbox signer signs for real and refuses payloads it was not allowed to sign."""

from __future__ import annotations

import hashlib
import re

import msgspec
import pytest

from qtg.config import Settings
from qtg.db import Database
from qtg.domain.context import SignRequest
from qtg.providers import HealthState, build_registry
from qtg.providers.base import SigningRefused
from qtg.providers.sandbox import SandboxExecutor, SandboxSigner

from .helpers import make_context, sign_request


async def signed_request(sandbox: SandboxExecutor) -> SignRequest:
    ctx = make_context("cctp_burn")
    return sign_request(ctx, await sandbox.prepare(ctx))


async def test_signature_verifies_only_for_its_payload_and_key(
    sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    request = await signed_request(sandbox)
    signature = await signer.sign(request)
    assert re.fullmatch(r"[0-9a-f]{64}", signature)
    assert signer.verify(request.payload, signature)
    assert signer.verify(request.payload, signature.upper())
    assert not signer.verify(request.payload + " ", signature)
    assert not SandboxSigner("other").verify(request.payload, signature)
    assert not signer.verify(request.payload, None)
    # deterministic: the same payload, the same signature
    assert await signer.sign(request) == signature


async def test_refuses_a_payload_that_does_not_match_its_hash(
    sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    request = await signed_request(sandbox)
    swapped = msgspec.structs.replace(request, payload=request.payload.replace("cctp", "ccip"))
    with pytest.raises(SigningRefused) as err:
        await signer.sign(swapped)
    assert err.value.code == "PAYLOAD_HASH_MISMATCH"


async def test_refuses_a_payload_that_is_not_the_allowed_one(
    sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    """A consistent payload and hash are still refused unless the hash is the approved one."""
    request = await signed_request(sandbox)
    other_payload = '{"to":"0xattacker"}'
    forged = msgspec.structs.replace(
        request,
        payload=other_payload,
        payload_hash=hashlib.sha256(other_payload.encode()).hexdigest(),
    )
    with pytest.raises(SigningRefused, match="not the allowed payload hash") as err:
        await signer.sign(forged)
    assert err.value.code == "PAYLOAD_NOT_ALLOWED"


async def test_signer_address_is_a_nonzero_evm_shaped_identity_of_the_key() -> None:
    a, a_again, b = SandboxSigner("key-a"), SandboxSigner(b"key-a"), SandboxSigner("key-b")
    report = await a.health()
    assert report.state is HealthState.HEALTHY
    assert report.signer_address == a.signer_address == a_again.signer_address
    assert re.fullmatch(r"0x[0-9a-f]{40}", report.signer_address or "")
    assert int(a.signer_address, 16) != 0
    assert b.signer_address != a.signer_address
    assert "key-a" not in repr(a)
    with pytest.raises(ValueError, match="must not be empty"):
        SandboxSigner("")


async def test_health_follows_settings_and_the_database(db: Database, dsn: str) -> None:
    settings = Settings.from_env(
        {"MG_SANDBOX_HEALTH": "degraded", "MG_SANDBOX_SIGNER_KEY": "from-settings"}
    )
    registry = build_registry(settings, db)
    (executor,) = registry.executors()
    report = await executor.health()  # type: ignore[attr-defined]
    assert report.state is HealthState.DEGRADED
    assert report.detail["provider"] == "sandbox"
    (signer,) = registry.signers()
    assert signer.signer_address == SandboxSigner("from-settings").signer_address  # type: ignore[attr-defined]
    await registry.aclose()
    # a remote system that cannot be reached (nothing listens on port 1) is reported, not raised
    nowhere = Database(
        "postgresql://postgres@127.0.0.1:1/none", min_size=1, max_size=1, connect_timeout=0.5
    )
    unreachable = SandboxExecutor(nowhere, SandboxSigner("k"))
    report = await unreachable.health()
    assert report.state is HealthState.UNHEALTHY
    assert "error" in report.detail
