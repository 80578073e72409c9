"""One contract call of a chain executor, with the allowance raise it may need just below it,
through qtg.providers.evm.outcome (issue 46: the cctp burn and the stargate send were the same
code twice).

`ContractActionExecutor` is what such executors share: the raise and the call reserved as one
nonce run (nothing of ours between them), the raise signed in prepare, the run's signed bytes
kept before any broadcast and sent in nonce order (submit), the chain's verdict on the
attempt's nonce (observe: `_settle`; recovery: `_recover_tx`) under the chain rule of
qtg.domain.chain_outcome — a new attempt only when provably none of this attempt's bytes can
land. An executor gives its error-code prefix, what a mined call must show (`_effect`), and
what a mined receipt means (`_mined`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from qtg.db import Database
from qtg.domain.chain_outcome import Verdict, not_landed_proof
from qtg.domain.context import ExecutionContext
from qtg.domain.evm import nonce_lane_key
from qtg.providers.base import (
    ObserveResult,
    ObserveStatus,
    PreparedAction,
    RecoverOutcome,
    RecoverResult,
    SubmitRejected,
    SubmitResult,
)
from qtg.providers.evm import ledger as evm_ledger
from qtg.providers.evm import nonces as evm_nonces
from qtg.providers.evm.outcome import (
    ChainJudge,
    Look,
    Sent,
    Signed,
    pending_observation,
    pending_recovery,
    raw_tx_hash,
    reclaimed,
    submit_signed,
)
from qtg.providers.evm.rpc import EvmRpc
from qtg.providers.evm.signer import EvmSigner
from qtg.providers.evm.transactions import ALLOWANCE_RAISE_HEADROOM_GAS, contract_call_tx


class ContractActionExecutor:
    """The shared half of an executor whose actions are one contract call each."""

    #: the error codes' prefix: CCTP, STARGATE
    prefix: str
    #: what a call mined with status 1 but without its effect shows (a person decides)
    no_effect_code: str
    no_effect_detail: str
    _db: Database
    _rpcs: dict[int, EvmRpc]
    _signer: EvmSigner
    _judge: ChainJudge

    # ------------------------------------------------------------- the hooks
    def _effect(
        self, ctx: ExecutionContext, refs: Mapping[str, Any]
    ) -> Callable[[dict[str, Any]], bool] | None:
        """What the receipt of this action's call must show to count as done (None: status)."""
        return None

    async def _mined(
        self, ctx: ExecutionContext, refs: dict[str, Any], receipt: dict[str, Any]
    ) -> ObserveResult:
        """The observation of the call's mined receipt (status 1 or 0)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- prepare
    async def _sign(self, tx: dict[str, Any], action: str) -> str:
        """Sign a side transaction (an allowance raise) of this node; the raw bytes."""
        from qtg.domain.context import SigningIntent, SignRequest

        payload = json.dumps(tx, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(payload.encode()).hexdigest()
        return await self._signer.sign(
            SignRequest(
                request_id="",
                request_node_id="",
                signing_intent=SigningIntent(
                    action=action,
                    asset="",
                    amount="",
                    destination=tx["to"],
                    allowed_payload_hash=digest,
                ),
                payload_format="evm_tx_json",
                payload=payload,
                payload_hash=digest,
                metadata={},
            )
        )

    def _prepared(self, ctx: ExecutionContext, tx: dict[str, Any]) -> PreparedAction:
        payload = json.dumps(tx, sort_keys=True, separators=(",", ":"))
        return PreparedAction(
            action_type=ctx.action_type,
            payload_format="evm_tx_json",
            payload=payload,
            payload_hash=hashlib.sha256(payload.encode()).hexdigest(),
            needs_signature=True,
            signer_key=self._signer.key,
        )

    async def _reserve(self, rpc: EvmRpc, chain_id: int, node_key: str, attempt: int) -> int:
        """One nonce for a call with no raise."""
        owner = self._signer.address

        async def reserve(floor: int, counts: tuple[int, int]) -> int:
            return await evm_nonces.reserve(
                self._db,
                chain_id=chain_id,
                address=owner,
                request_node_id=node_key,
                attempt_no=attempt,
                chain_floor=floor,
                chain_counts=counts,
            )

        # the ledger checks itself against the chain first (issue 43 item 2)
        return await evm_ledger.reserve_in_step(self._db, rpc, owner, reserve)

    async def _reserve_with_raise(
        self,
        ctx: ExecutionContext,
        rpc: EvmRpc,
        chain_id: int,
        raise_call: dict[str, Any] | None,
    ) -> tuple[int, list[dict[str, Any]]]:
        """The call's nonce, and the signed allowance raise (when `raise_call`) on the nonce
        right below it (evm_nonces.reserve_run): nothing of ours runs between them, so
        calls prepared side by side never spend each other's allowance."""
        owner = self._signer.address
        keys = (
            [ctx.request_node_id] if raise_call is None else [approve_key(ctx), ctx.request_node_id]
        )

        async def reserve(floor: int, counts: tuple[int, int]) -> list[int]:
            return await evm_nonces.reserve_run(
                self._db,
                chain_id=chain_id,
                address=owner,
                request_node_ids=keys,
                attempt_no=ctx.attempt_no,
                chain_floor=floor,
                chain_counts=counts,
            )

        # the ledger checks itself against the chain first (issue 43 item 2)
        *raise_nonces, nonce = await evm_ledger.reserve_in_step(self._db, rpc, owner, reserve)
        approvals = []
        if raise_call is not None:
            raise_tx = await contract_call_tx(
                rpc,
                self._judge,
                chain_id,
                raise_call,
                raise_nonces[0],
                headroom=ALLOWANCE_RAISE_HEADROOM_GAS,
            )
            raw = await self._sign(raise_tx, "approve")
            approvals.append(
                {"nonce": raise_nonces[0], "raw": raw, "tx_hash": raw_tx_hash(raw), "tx": raise_tx}
            )
        return nonce, approvals

    async def release_unsubmitted(self, ctx: ExecutionContext) -> None:
        """Not submitted (the rest of a nonce lane after a refused or ambiguous submit):
        give back the attempt's reservations that kept no signed bytes (issue 24)."""
        await evm_nonces.release_unsigned(
            self._db, request_node_id=ctx.request_node_id, attempt_no=ctx.attempt_no
        )

    def lane_key(self, prepared: PreparedAction) -> str:
        """The sender's nonce lane, shared with every executor signing with the evm signer."""
        return nonce_lane_key(json.loads(prepared.payload))

    # ----------------------------------------------------------------- submit
    async def submit(
        self,
        ctx: ExecutionContext,
        prepared: PreparedAction,
        signature: str | None,
        idempotency_key: str,
    ) -> SubmitResult:
        if not signature:
            raise SubmitRejected(
                f"{ctx.action_type} needs the signed transaction", code=f"{self.prefix}_UNSIGNED"
            )
        tx = json.loads(prepared.payload)
        meta = tx.get("qtg") or {}
        chain_id, nonce = int(tx["chainId"]), int(tx["nonce"])
        tx_hash = raw_tx_hash(signature)
        approvals = meta.get("approvals") or []
        # the signed bytes kept before anything is broadcast, then sent in nonce order
        run = [
            Signed(a["nonce"], a["tx_hash"], a["raw"], a["tx"], approve_key(ctx), ctx.attempt_no)
            for a in approvals
        ]
        bare = {k: v for k, v in tx.items() if k != "qtg"}
        run.append(Signed(nonce, tx_hash, signature, bare, ctx.request_node_id, ctx.attempt_no))
        refs: dict[str, Any] = {
            "chain_id": chain_id,
            "tx_hash": tx_hash,
            "from": tx["from"],
            "nonce": nonce,
        }
        if approvals:
            refs["approval_nonces"] = [a["nonce"] for a in approvals]
        done = await submit_signed(
            self._db,
            self._rpcs[chain_id],
            chain_id=chain_id,
            address=tx["from"],
            run=run,
            crash_prefix=f"{ctx.action_type}.",
        )
        if done.sent is Sent.RECLAIMED:  # nothing was broadcast: a new attempt, not FAILED
            raise reclaimed(self.prefix, nonce)
        if done.sent is Sent.REFUSED:  # every URL refused the first bytes: nothing left
            raise SubmitRejected(
                f"node refused the {ctx.action_type}: {done.refusal}",
                code=f"{self.prefix}_REJECTED",
            )
        # accepted, or maybe on its way: the chain decides, through observe
        return SubmitResult(provider_refs=refs)

    # ---------------------------------------------------------------- observe
    async def _look(self, ctx: ExecutionContext, refs: Mapping[str, Any]) -> Look:
        """The chain's verdict on this attempt's transaction (qtg.domain.chain_outcome)."""
        return await self._judge.look(
            int(refs["chain_id"]),
            refs["from"],
            int(refs["nonce"]),
            request_node_id=ctx.request_node_id,
            attempt_no=ctx.attempt_no,
            known_hashes=(refs.get("tx_hash"),),
            effect=self._effect(ctx, refs),
        )

    async def _keep_raise_moving(self, ctx: ExecutionContext, refs: Mapping[str, Any]) -> None:
        """The allowance raise sits just below the call's nonce: while the call waits, the
        raise's kept bytes go out again too (a lost raise would hold the call forever)."""
        for nonce in refs.get("approval_nonces", ()):
            seen = await self._judge.look(
                int(refs["chain_id"]),
                refs["from"],
                int(nonce),
                request_node_id=approve_key(ctx),
                attempt_no=ctx.attempt_no,
            )
            if seen.judgement.verdict in (Verdict.WAIT_REBROADCAST, Verdict.REPLACE_WITH_BUMP):
                await self._judge.rebroadcast(int(refs["chain_id"]), seen.txs)

    async def _consume(self, ctx: ExecutionContext, refs: Mapping[str, Any]) -> None:
        for nonce in (*refs.get("approval_nonces", ()), refs["nonce"]):
            await evm_nonces.mark(
                self._db,
                state="consumed",
                chain_id=int(refs["chain_id"]),
                address=refs["from"],
                nonce=int(nonce),
                **evm_nonces.owner_of(ctx),
            )

    async def _settle(
        self,
        ctx: ExecutionContext,
        refs: dict[str, Any],
        seen: Look,
        *,
        rebroadcast_within: float,
    ) -> ObserveResult:
        """An observation of the call's transaction from the verdict."""
        verdict, mined = seen.judgement.verdict, seen.judgement.receipt
        if mined is not None:
            refs["tx_hash"] = mined.tx_hash  # the one of ours that was mined
        if verdict in (Verdict.COMPLETED, Verdict.FAILED_REVERTED) and seen.receipt is not None:
            return await self._mined(ctx, refs, seen.receipt)
        if verdict is Verdict.NEEDS_PERSON:
            await self._consume(ctx, refs)
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                provider_refs=refs,
                error_code=self.no_effect_code,
                error_detail=self.no_effect_detail,
            )
        if verdict is Verdict.NOT_LANDED:
            await self._consume(ctx, refs)
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                provider_refs=refs,
                error_code=f"{self.prefix}_NOT_LANDED",
                error_detail=not_landed_proof(seen.judgement, int(refs["nonce"]))
                + " (recovery makes a new attempt)",
            )
        pending = pending_observation(seen, refs, self.prefix, int(refs["nonce"]))
        if pending is not None:
            return pending
        chain_id = int(refs["chain_id"])
        if verdict is Verdict.REPLACE_WITH_BUMP:
            new_hash = await self._judge.replace(
                chain_id, seen.txs, request_node_id=ctx.request_node_id, attempt_no=ctx.attempt_no
            )
            if new_hash is not None:
                refs["tx_hash"] = new_hash
            await self._keep_raise_moving(ctx, refs)
        elif verdict is Verdict.WAIT_REBROADCAST:
            await self._keep_raise_moving(ctx, refs)
            await self._judge.rebroadcast(chain_id, seen.txs, unless_within=rebroadcast_within)
        return ObserveResult(
            status=ObserveStatus.PENDING,
            provider_refs=refs,
            retry_after_seconds=1.0,
            error_detail=f"chain: {verdict.value}",
        )

    # ---------------------------------------------------------------- recover
    async def _recover_tx(self, ctx: ExecutionContext) -> RecoverResult:
        """The action's transaction, under the chain rule of qtg.domain.chain_outcome: a
        transaction that may have been broadcast is followed (its kept bytes sent again)
        until the chain consumes its nonce; a new attempt only when provably none of
        this attempt's bytes can land."""
        refs = dict(ctx.node_provider_refs)
        approval = await evm_nonces.for_attempt(
            self._db, request_node_id=approve_key(ctx), attempt_no=ctx.attempt_no
        )
        if "tx_hash" not in refs:
            row = await evm_nonces.for_attempt(
                self._db, request_node_id=ctx.request_node_id, attempt_no=ctx.attempt_no
            )
            if row is None:
                if approval is not None and approval["tx_hash"] is None:
                    await release(self._db, ctx, approval)
                return self._not_sent("no nonce was reserved for this attempt")
            refs = {
                "chain_id": row["chain_id"],
                "tx_hash": row["tx_hash"],
                "from": row["address"],
                "nonce": row["nonce"],
            }
            if approval is not None:
                refs["approval_nonces"] = [approval["nonce"]]
        where = {
            "chain_id": int(refs["chain_id"]),
            "address": refs["from"],
            "nonce": int(refs["nonce"]),
        }
        seen = await self._look(ctx, refs)
        verdict = seen.judgement.verdict
        if verdict is Verdict.NOTHING_SIGNED:
            # bytes are kept before any broadcast and none were: nothing of this attempt
            # left qtg. A raise signed and kept just before is harmless (no value moves):
            # it goes out, so its nonce leaves no gap; the action's nonce goes back.
            await evm_nonces.mark(self._db, state="released", **where, **evm_nonces.owner_of(ctx))
            if approval is not None:
                if approval["tx_hash"] is None:
                    await release(self._db, ctx, approval)
                else:
                    await self._keep_raise_moving(ctx, refs)
            return self._not_sent("the attempt's transaction was never broadcast")
        if verdict is Verdict.NOT_LANDED:
            await self._consume(ctx, refs)
            return RecoverResult(
                outcome=RecoverOutcome.NOT_SUBMITTED,
                error_code=f"{self.prefix}_NOT_LANDED",
                error_detail=not_landed_proof(seen.judgement, where["nonce"]),
            )
        pending = pending_recovery(seen, refs, self.prefix, where["nonce"])
        if pending is not None:
            return pending
        if verdict is Verdict.NEEDS_PERSON:
            return RecoverResult(outcome=RecoverOutcome.UNKNOWN, error_detail=self.no_effect_detail)
        if verdict is Verdict.WAIT_REBROADCAST or verdict is Verdict.REPLACE_WITH_BUMP:
            # e.g. a crash after the write-ahead, before the broadcast: the same bytes
            await self._keep_raise_moving(ctx, refs)
            await self._judge.rebroadcast(where["chain_id"], seen.txs)
        if seen.judgement.receipt is not None:
            refs["tx_hash"] = seen.judgement.receipt.tx_hash
        elif seen.txs:
            refs["tx_hash"] = seen.txs[-1]["tx_hash"]
        # mined or in flight: observe decides (depth, receipt, effect) from here
        return RecoverResult(outcome=RecoverOutcome.SUBMITTED, provider_refs=refs)

    def _not_sent(self, detail: str) -> RecoverResult:
        """Provably nothing landed under this attempt, and its nonce is either used by
        another transaction or free for the next one: qtg may attempt again (a new key)."""
        return RecoverResult(
            outcome=RecoverOutcome.NOT_SUBMITTED,
            error_code=f"{self.prefix}_NOT_SENT",
            error_detail=detail,
        )


def approve_key(ctx: ExecutionContext) -> str:
    """The reservation key of a call's allowance raise."""
    return f"{ctx.request_node_id}:approve"


async def release(db: Database, ctx: ExecutionContext, row: Mapping[str, Any]) -> None:
    """Give back one reservation of this attempt (`row` of evm_nonces.for_attempt)."""
    await evm_nonces.mark(
        db,
        state="released",
        chain_id=row["chain_id"],
        address=row["address"],
        nonce=row["nonce"],
        **evm_nonces.owner_of(ctx),
    )


def from_observation(seen: ObserveResult) -> RecoverResult:
    """recover() of a watching node: what observing it says now."""
    outcome = {
        ObserveStatus.COMPLETED: RecoverOutcome.COMPLETED,
        ObserveStatus.FAILED: RecoverOutcome.FAILED,
        ObserveStatus.PENDING: RecoverOutcome.SUBMITTED,
        ObserveStatus.UNKNOWN: RecoverOutcome.UNKNOWN,
    }[seen.status]
    return RecoverResult(
        outcome=outcome,
        provider_refs=seen.provider_refs,
        artifacts=seen.artifacts,
        error_code=seen.error_code,
        error_detail=seen.error_detail,
    )
