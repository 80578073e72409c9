"""Sandbox submit: a side effect at most once per idempotency key, in its own transaction,
and failures that say truthfully whether the side effect happened."""

from __future__ import annotations

import pytest
import trio

from qtg.db import Database
from qtg.providers.base import (
    PreflightError,
    ProviderError,
    RecoverOutcome,
    SubmitRejected,
)
from qtg.providers.sandbox import (
    SandboxCrash,
    SandboxExecutor,
    SandboxSigner,
    parse_behaviour,
    submissions,
)

from .helpers import dispatch, make_context, sign_request


async def test_submit_records_one_side_effect_with_realistic_refs(
    db: Database, sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    ctx = make_context("cctp_burn")
    result = await dispatch(sandbox, signer, ctx)
    refs = result.provider_refs
    assert set(refs) == {"tx_hash", "txid", "message_hash", "nonce"}
    assert refs["txid"] == refs["tx_hash"]
    assert refs["tx_hash"].startswith("0x") and len(refs["tx_hash"]) == 66
    rows = await submissions(db)
    assert len(rows) == 1
    row = rows[0]
    assert row["idempotency_key"] == ctx.idempotency_key
    assert row["request_node_id"] == ctx.request_node_id
    assert row["action_type"] == "cctp_burn"
    assert row["provider_refs"] == refs
    assert row["duplicate_submits"] == 0
    # the stored signature is the signer's signature of the submitted payload
    prepared = await sandbox.prepare(ctx)
    assert row["payload_hash"] == prepared.payload_hash
    assert signer.verify(prepared.payload, row["signature"])


async def test_second_submit_with_the_same_key_makes_no_second_side_effect(
    db: Database, sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    ctx = make_context("cex_withdrawal")
    first = await dispatch(sandbox, signer, ctx)
    second = await dispatch(sandbox, signer, ctx)
    assert second.provider_refs == first.provider_refs
    assert first.provider_refs["withdrawal_id"].startswith("wd_")
    rows = await submissions(db)
    assert len(rows) == 1
    assert rows[0]["duplicate_submits"] == 1
    # another attempt of the same node is another key, hence another side effect
    retry = make_context("cex_withdrawal", request_node_id=ctx.request_node_id, attempt_no=2)
    await dispatch(sandbox, signer, retry)
    assert len(await submissions(db)) == 2


async def test_concurrent_submits_with_one_key_from_many_connections(
    dsn: str, db: Database, sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    """Tasks on two pools (so on distinct connections) race the same key: one row."""
    ctx = make_context("evm_transfer")
    prepared = await sandbox.prepare(ctx)
    signature = await signer.sign(sign_request(ctx, prepared))
    assert ctx.idempotency_key is not None
    results = []
    async with Database(dsn, min_size=4, max_size=4) as other_db:
        other = SandboxExecutor(other_db, signer)

        async def one(executor: SandboxExecutor) -> None:
            results.append(await executor.submit(ctx, prepared, signature, ctx.idempotency_key))

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for i in range(12):
                    nursery.start_soon(one, sandbox if i % 2 else other)
    rows = await submissions(db)
    assert len(rows) == 1
    assert rows[0]["duplicate_submits"] == 11
    assert len(results) == 12
    assert all(r.provider_refs == rows[0]["provider_refs"] for r in results)


async def test_submit_commits_in_its_own_transaction(
    db: Database, sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    """The caller's rollback does not undo the remote side effect."""
    ctx = make_context("debridge_send")

    class Abort(Exception):
        pass

    with pytest.raises(Abort):
        async with db.transaction():
            await dispatch(sandbox, signer, ctx)
            raise Abort
    assert [r["idempotency_key"] for r in await submissions(db)] == [ctx.idempotency_key]


async def test_reused_key_with_another_payload_is_not_a_clean_refusal(
    db: Database, sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    """SubmitRejected would mean "nothing happened": wrong here, the first one did."""
    ctx = make_context("stargate_send")
    await dispatch(sandbox, signer, ctx)
    changed = make_context(
        "stargate_send",
        request_node_id=ctx.request_node_id,
        intent={"asset": "USDC", "amount": "999"},
    )
    with pytest.raises(ProviderError) as err:
        await dispatch(sandbox, signer, changed)
    assert not isinstance(err.value, SubmitRejected)
    assert err.value.code == "IDEMPOTENCY_KEY_REUSED"
    rows = await submissions(db)
    assert len(rows) == 1 and rows[0]["duplicate_submits"] == 1


async def test_signature_lanes_refuse_bad_signatures_before_any_side_effect(
    db: Database, sandbox: SandboxExecutor
) -> None:
    ctx = make_context("ccip_send")
    prepared = await sandbox.prepare(ctx)
    assert prepared.needs_signature and prepared.signer_key == "sandbox"
    assert prepared.payload_format == "evm_tx_json"
    impostor = SandboxSigner("another key")
    forged = await impostor.sign(sign_request(ctx, prepared))
    for signature in (None, "", forged):
        with pytest.raises(SubmitRejected) as err:
            await sandbox.submit(ctx, prepared, signature, ctx.idempotency_key or "")
        assert err.value.code == "SIGNATURE_INVALID"
    tampered = prepared.__class__(
        **{**{f: getattr(prepared, f) for f in prepared.__struct_fields__}, "payload": "{}"}
    )
    with pytest.raises(SubmitRejected, match="does not hash") as err:
        await sandbox.submit(ctx, tampered, forged, ctx.idempotency_key or "")
    assert err.value.code == "PAYLOAD_HASH_MISMATCH"
    assert await submissions(db) == []


async def test_prepare_is_deterministic_and_hash_is_sha256_of_payload(
    sandbox: SandboxExecutor,
) -> None:
    import hashlib
    import json

    ctx = make_context("cex_withdrawal", node_config={"venue": "binance"})
    a, b = await sandbox.prepare(ctx), await sandbox.prepare(ctx)
    assert a == b
    assert a.payload_hash == hashlib.sha256(a.payload.encode()).hexdigest()
    assert not a.needs_signature and a.signer_key is None
    body = json.loads(a.payload)
    assert body["action_type"] == "cex_withdrawal"
    assert body["node_config"] == {"venue": "binance"}
    assert body["qtg"]["request_node_id"] == ctx.request_node_id
    assert body["qtg"]["attempt_no"] == 1
    retry = make_context("cex_withdrawal", request_node_id=ctx.request_node_id, attempt_no=2,
                         node_config={"venue": "binance"})  # fmt: skip
    assert (await sandbox.prepare(retry)).payload_hash != a.payload_hash


async def test_submit_rejected_leaves_no_row_and_recover_says_not_submitted(
    db: Database, sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    ctx = make_context("cctp_mint", sandbox={"fail": "submit_rejected"})
    with pytest.raises(SubmitRejected) as err:
        await dispatch(sandbox, signer, ctx)
    assert err.value.code == "SANDBOX_SUBMIT_REJECTED"
    assert await submissions(db) == []
    recovered = await sandbox.recover(ctx)
    assert recovered.outcome is RecoverOutcome.NOT_SUBMITTED
    assert recovered.error_code == "NOT_SUBMITTED"


async def test_crash_before_the_side_effect_recovers_as_failed(
    db: Database, sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    ctx = make_context("cctp_burn", sandbox={"fail": "submit_crash_before"})
    with pytest.raises(RuntimeError) as err:
        await dispatch(sandbox, signer, ctx)
    # a plain exception, not a ProviderError: the caller must treat it as unknown
    assert isinstance(err.value, SandboxCrash)
    assert not isinstance(err.value, ProviderError)
    assert await submissions(db) == []
    recovered = await sandbox.recover(ctx)
    assert (recovered.outcome, recovered.error_code) == (
        RecoverOutcome.NOT_SUBMITTED,
        "NOT_SUBMITTED",
    )


async def test_crash_after_the_side_effect_recovers_as_submitted(
    db: Database, sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    ctx = make_context("cex_withdrawal", sandbox={"fail": "submit_crash_after"})
    with pytest.raises(SandboxCrash):
        await dispatch(sandbox, signer, ctx)
    rows = await submissions(db)
    assert len(rows) == 1
    recovered = await sandbox.recover(ctx)
    assert recovered.outcome is RecoverOutcome.SUBMITTED
    assert recovered.provider_refs == rows[0]["provider_refs"]
    assert "withdrawal_id" in recovered.provider_refs
    # recovery looked, it did not submit again
    assert (await submissions(db))[0]["duplicate_submits"] == 0


async def test_recover_without_an_idempotency_key_cannot_tell(
    sandbox: SandboxExecutor,
) -> None:
    ctx = make_context("cex_withdrawal", idempotency_key=None)
    recovered = await sandbox.recover(ctx)
    assert recovered.outcome is RecoverOutcome.UNKNOWN
    assert recovered.error_code == "IDEMPOTENCY_KEY_MISSING"


async def test_latency_is_simulated_on_remote_calls(db: Database, signer: SandboxSigner) -> None:
    slow = SandboxExecutor(db, signer, default_latency_ms=60)
    ctx = make_context("debridge_send")
    start = trio.current_time()
    await dispatch(slow, signer, ctx)
    assert trio.current_time() - start >= 0.06
    # a node's own latency_ms overrides MG_SANDBOX_LATENCY_MS
    assert parse_behaviour({"sandbox": {"latency_ms": 0}}, 60).latency_ms == 0
    assert parse_behaviour({}, 60).latency_ms == 60


async def test_prepare_failure_is_a_provider_error(sandbox: SandboxExecutor) -> None:
    ctx = make_context("evm_transfer", sandbox={"fail": "prepare", "error_code": "NO_GAS"})
    await sandbox.preflight(ctx)
    with pytest.raises(ProviderError) as err:
        await sandbox.prepare(ctx)
    assert err.value.code == "NO_GAS"
    assert not isinstance(err.value, PreflightError | SubmitRejected)
