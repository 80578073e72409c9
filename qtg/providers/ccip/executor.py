"""The `ccip` executor (issue 12): `ccip_send` and the `ccip_delivery` observe.

Node config `ccip`: {"lane": name in MG_CCIP_LANES, "token": address, "decimals": int,
"fee_token": address | absent (native), "gas_limit": int (200000)}; the intent gives
`amount` (whole units) and `destination` (the receiver on the destination chain).

ccip_send: prepare asks `getFee`, signs the raise of the router's allowance by
the amount (skipped under a standing unlimited approval) and builds the `ccipSend`
transaction, the raise and the send on consecutive nonces (`evm_nonces.reserve_run`:
nothing of ours runs between them, so no other send spends this one's allowance);
submit writes the send intent ahead of the broadcast (qtg.providers.ccip.intents) and
broadcasts; the observation reads the message id from the receipt's logs.
ccip_delivery follows that message id to its execution state in the
destination's logs. `recover` decides from the chain:
intent → transaction → message id → execution, never a blind re-send.

Issue 24, the same rule as the evm executor (qtg.domain.chain_outcome): every
signed ccipSend and allowance raise is kept before its broadcast; a broadcast
with no answer (RpcUnavailable) is ambiguous, never a refusal; observe and
recover judge the send's nonce through the shared ChainJudge — rebroadcast the
same bytes while it is unconsumed, replace with a fee bump after
MG_EVM_REPLACE_AFTER_SECONDS, and make a new attempt only once the block that
consumed the nonce shows one of qtg's own other transactions did (issue 43;
submit, broadcast and those verdicts are qtg.providers.evm.outcome's, shared).
The router's fee is quoted in prepare, which runs right before signing in the
same dispatcher pass, with MG_CCIP_FEE_MARGIN_PERCENT of headroom: a native fee
pays quote + margin (the router keeps msg.value as the fee), a fee token's
allowance is raised by it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import msgspec

from qtg.db import Database
from qtg.domain.ccip import (
    Execution,
    IntentState,
    Lane,
    ccip_send_data,
    evm2any_message,
    execution_from_block,
    execution_from_logs,
    execution_topics,
    get_fee_data,
    message_id_from_logs,
)
from qtg.domain.chain_outcome import Verdict, not_landed_proof, with_margin
from qtg.domain.context import ExecutionContext
from qtg.domain.evm import intent_problem, is_address, nonce_lane_key, to_base_units
from qtg.providers.base import (
    HealthReport,
    HealthState,
    IntentRejected,
    ObserveResult,
    ObserveStatus,
    PreflightError,
    PreparedAction,
    RecoverOutcome,
    RecoverResult,
    RetryLater,
    SubmitRejected,
    SubmitResult,
)
from qtg.providers.ccip import intents
from qtg.providers.evm import ledger as evm_ledger
from qtg.providers.evm import nonces as evm_nonces
from qtg.providers.evm.outcome import (
    REBROADCAST_EVERY_SECONDS,
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
from qtg.providers.evm.rpc import EvmRpc, transient_rpc_faults
from qtg.providers.evm.signer import EvmSigner
from qtg.providers.evm.transactions import (
    ALLOWANCE_RAISE_HEADROOM_GAS,
    allowance_raise_call,
    contract_call_tx,
)

EXECUTOR_KEY = "ccip"
ACTION_TYPES = frozenset({"ccip_send", "ccip_delivery"})
DEFAULT_GAS_LIMIT = 200_000
#: The ccipSend's own gas (beyond the receiver's gas_limit) when it cannot be estimated
#: because its allowance raise is not mined yet; node config `send_gas` overrides the sum.
DEFAULT_SEND_GAS = 400_000

S = IntentState


class CcipExecutor:
    key = EXECUTOR_KEY
    action_types = ACTION_TYPES

    def __init__(
        self,
        db: Database,
        rpcs: dict[int, EvmRpc],
        signer: EvmSigner,
        lanes: dict[str, Lane],
        *,
        judge: ChainJudge,
        fee_margin_percent: int = 10,
    ) -> None:
        self._db = db
        self._rpcs = rpcs
        self._signer = signer
        self._lanes = lanes
        self._judge = judge
        self._fee_margin = fee_margin_percent

    # ---------------------------------------------------------------- helpers
    def _lane(self, name: Any) -> Lane:
        lane = self._lanes.get(name) if isinstance(name, str) else None
        if lane is None:
            raise PreflightError(
                f"ccip.lane {name!r} names no lane in MG_CCIP_LANES", code="CCIP_LANE_UNKNOWN"
            )
        for chain in (lane.chain_id, lane.dest_chain_id):
            if chain not in self._rpcs:
                raise PreflightError(
                    f"lane {lane.name}: chain {chain} has no client in MG_EVM_RPC_URLS",
                    code="CCIP_CHAIN_UNKNOWN",
                )
        return lane

    def _send(self, ctx: ExecutionContext) -> tuple[Lane, dict[str, Any]]:
        cfg = dict(ctx.node_config.get("ccip") or {})
        lane = self._lane(cfg.get("lane"))
        receiver = ctx.intent.get("destination", cfg.get("destination"))
        if not is_address(receiver):
            raise PreflightError(
                f"destination {receiver!r} is not an address", code="CCIP_BAD_DESTINATION"
            )
        token = cfg.get("token")
        if not is_address(token):
            raise PreflightError(f"ccip.token {token!r} is not an address", code="CCIP_BAD_TOKEN")
        if lane.tokens and token.lower() not in lane.tokens:
            raise PreflightError(
                f"token {token} is not configured on lane {lane.name}", code="CCIP_BAD_TOKEN"
            )
        fee_token = cfg.get("fee_token")
        if fee_token is not None and not is_address(fee_token):
            raise PreflightError(
                f"ccip.fee_token {fee_token!r} is not an address", code="CCIP_BAD_TOKEN"
            )
        gas_limit = cfg.get("gas_limit", DEFAULT_GAS_LIMIT)
        if not isinstance(gas_limit, int) or gas_limit < 0:
            raise PreflightError(
                f"ccip.gas_limit {gas_limit!r} is not a gas amount", code="CCIP_BAD_GAS_LIMIT"
            )
        send_gas = cfg.get("send_gas", DEFAULT_SEND_GAS + gas_limit)
        if not isinstance(send_gas, int) or send_gas <= 0:
            raise PreflightError(
                f"ccip.send_gas {send_gas!r} is not a gas amount", code="CCIP_BAD_GAS_LIMIT"
            )
        try:
            amount = to_base_units(
                str(ctx.intent.get("amount", cfg.get("amount"))), int(cfg.get("decimals", 18))
            )
        except ValueError as exc:
            raise PreflightError(str(exc), code="CCIP_BAD_AMOUNT") from None
        return lane, {
            "receiver": receiver.lower(),
            "token": token.lower(),
            "amount": amount,
            "fee_token": fee_token.lower() if fee_token else None,
            "message": evm2any_message(receiver, token, amount, fee_token, gas_limit),
            "send_gas": send_gas,
        }

    async def _sign(self, tx: dict[str, Any]) -> str:
        """Sign a side transaction (an allowance raise) for this send; the raw bytes."""
        from qtg.domain.context import SigningIntent, SignRequest

        payload = json.dumps(tx, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(payload.encode()).hexdigest()
        return await self._signer.sign(
            SignRequest(
                request_id="",
                request_node_id="",
                signing_intent=SigningIntent(
                    action="approve",
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

    def _approve_key(self, ctx: ExecutionContext, token: str) -> str:
        """The reservation key of this send's allowance raise of `token`."""
        return f"{ctx.request_node_id}:approve:{token}"

    async def _raises_and_send_nonces(
        self, ctx: ExecutionContext, rpc: EvmRpc, lane: Lane, pulls: dict[str, int]
    ) -> tuple[list[dict[str, Any]], int]:
        """Signed allowance raises for what the router will pull ({token: amount}), and the
        send's nonce, right above them (`evm_nonces.reserve_run`).

        Raised by the amount where the token can (`allowance_raise_call`); skipped under
        a standing approval. Signed here and broadcast by submit just before the
        ccipSend: waiting here for one to be mined would wait behind the batch's
        reserved, unbroadcast nonces.
        """
        owner = self._signer.address
        calls = {}
        for token, amount in sorted(pulls.items()):
            call = await allowance_raise_call(rpc, token, owner, lane.router, amount)
            if call is not None:
                calls[token] = call

        async def reserve(floor: int, counts: tuple[int, int]) -> list[int]:
            return await evm_nonces.reserve_run(
                self._db,
                chain_id=lane.chain_id,
                address=owner,
                request_node_ids=[
                    *(self._approve_key(ctx, t) for t in calls),
                    ctx.request_node_id,
                ],
                attempt_no=ctx.attempt_no,
                chain_floor=floor,
                chain_counts=counts,
            )

        # the ledger checks itself against the chain first (issue 43 item 2)
        *raise_nonces, send_nonce = await evm_ledger.reserve_in_step(self._db, rpc, owner, reserve)
        out = []
        for (token, call), nonce in zip(calls.items(), raise_nonces, strict=True):
            raise_tx = await self._tx(
                rpc, lane.chain_id, call, nonce, headroom=ALLOWANCE_RAISE_HEADROOM_GAS
            )
            raw = await self._sign(raise_tx)
            tx_hash = raw_tx_hash(raw)
            out.append(
                {"token": token, "nonce": nonce, "raw": raw, "tx_hash": tx_hash, "tx": raise_tx}
            )
        return out, send_nonce

    async def _tx(
        self,
        rpc: EvmRpc,
        chain_id: int,
        call: dict[str, Any],
        nonce: int,
        *,
        gas: int | None = None,
        headroom: int = 0,
    ) -> dict[str, Any]:
        return await contract_call_tx(
            rpc, self._judge, chain_id, call, nonce, gas=gas, headroom=headroom
        )

    # --------------------------------------------------------------- contract
    def check_intent(self, intent: Mapping[str, Any], node_config: Mapping[str, Any]) -> None:
        """At movement creation: a destination that is no address, or an amount
        the token cannot express, is refused before anyone approves it (preflight
        would only refuse it after approval, failing the movement)."""
        cfg = node_config.get("ccip")
        decimals = cfg.get("decimals", 18) if isinstance(cfg, Mapping) else 18
        problem = intent_problem(intent, decimals)
        if problem is not None:
            field, message, code = problem
            raise IntentRejected(field, message, code=code)

    async def preflight(self, ctx: ExecutionContext) -> None:
        with transient_rpc_faults("preflight"):  # a wait, not a failure (issue 24)
            await self._preflight(ctx)

    async def _preflight(self, ctx: ExecutionContext) -> None:
        if ctx.action_type == "ccip_delivery":
            return
        lane, send = self._send(ctx)
        rpc = self._rpcs[lane.chain_id]
        if await rpc.chain_id_on_chain() != lane.chain_id:
            raise PreflightError(
                f"chain at {rpc.url} is not chain {lane.chain_id}", code="CCIP_CHAIN_MISMATCH"
            )
        # Issue 24: a lane whose router, ramps or pools drifted from the configuration, or a
        # token whose code drifted, may move money anywhere: hold, do not fail, until the
        # finding clears. A sidecar that does not answer (`reachable`) is no such evidence.
        held = [
            f"{subject} {f['check_name']}"
            for subject in (f"ccip:{lane.name}", send["token"])
            for f in await evm_nonces.open_drift(self._db, chain_id=lane.chain_id, subject=subject)
            if f["check_name"] != "reachable"
        ]
        if held:
            raise RetryLater(
                f"open drift findings ({', '.join(held)}); held until cleared",
                code="CCIP_DRIFT_HOLD",
                retry_after_seconds=60.0,
            )

    async def prepare(self, ctx: ExecutionContext) -> PreparedAction:
        with transient_rpc_faults("prepare"):  # a wait, not a failure (issue 24)
            return await self._prepare(ctx)

    async def _prepare(self, ctx: ExecutionContext) -> PreparedAction:
        lane, s = self._send(ctx)
        rpc = self._rpcs[lane.chain_id]
        await self._judge.fees(lane.chain_id)  # above MG_EVM_FEE_CAPS: wait before any nonce
        sender = self._signer.address
        quoted = int(
            await rpc.eth_call(lane.router, get_fee_data(lane.dest_selector, s["message"])), 16
        )
        # headroom for a fee that rises between this quote (just before signing) and mining
        fee = with_margin(quoted, self._fee_margin)
        pulls = {s["token"]: s["amount"]}
        if s["fee_token"] is not None:
            pulls[s["fee_token"]] = pulls.get(s["fee_token"], 0) + fee
        approvals, nonce = await self._raises_and_send_nonces(ctx, rpc, lane, pulls)
        call = {
            "from": sender,
            "to": lane.router,
            "value": hex(fee if s["fee_token"] is None else 0),
            "data": ccip_send_data(lane.dest_selector, s["message"]),
        }
        # with a raise still to be mined the send cannot be estimated: the lane's gas
        gas = s["send_gas"] if approvals else None
        tx = await self._tx(rpc, lane.chain_id, call, nonce, gas=gas)
        tx["qtg"] = {
            "lane": lane.name,
            "receiver": s["receiver"],
            "token": s["token"],
            "amount": str(s["amount"]),
            "fee_token": s["fee_token"],
            "fee": str(fee),
            "fee_quoted": str(quoted),
            "approvals": approvals,
        }
        payload = json.dumps(tx, sort_keys=True, separators=(",", ":"))
        return PreparedAction(
            action_type=ctx.action_type,
            payload_format="evm_tx_json",
            payload=payload,
            payload_hash=hashlib.sha256(payload.encode()).hexdigest(),
            needs_signature=True,
            signer_key=self._signer.key,
        )

    async def release_unsubmitted(self, ctx: ExecutionContext) -> None:
        """Not submitted (the rest of a nonce lane after a refused or ambiguous submit):
        give back the attempt's reservations that kept no signed bytes (issue 24)."""
        await evm_nonces.release_unsigned(
            self._db, request_node_id=ctx.request_node_id, attempt_no=ctx.attempt_no
        )

    def lane_key(self, prepared: PreparedAction) -> str:
        """The sender's nonce lane, shared with the evm executor's transfers."""
        return nonce_lane_key(json.loads(prepared.payload))

    async def submit(
        self,
        ctx: ExecutionContext,
        prepared: PreparedAction,
        signature: str | None,
        idempotency_key: str,
    ) -> SubmitResult:
        if not signature:
            raise SubmitRejected("ccip_send needs the signed transaction", code="CCIP_UNSIGNED")
        tx = json.loads(prepared.payload)
        meta = tx["qtg"]
        lane = self._lane(meta["lane"])
        chain_id, nonce = int(tx["chainId"]), int(tx["nonce"])
        tx_hash = raw_tx_hash(signature)
        intent = await intents.write_intent(
            self._db,
            request_node_id=ctx.request_node_id,
            attempt_no=ctx.attempt_no,
            idempotency_key=idempotency_key,
            lane=lane.name,
            chain_id=chain_id,
            source_selector=lane.source_selector,
            dest_selector=lane.dest_selector,
            router=lane.router,
            sender=tx["from"].lower(),
            receiver=meta["receiver"],
            token=meta["token"],
            amount=int(meta["amount"]),
            fee_token=meta["fee_token"],
            fee=int(meta["fee"]),
            nonce=nonce,
            tx_hash=tx_hash,
        )
        approvals = meta.get("approvals") or []
        # Write-ahead of every byte that may leave (issue 24): the raises, then the send;
        # broadcast in nonce order; the answer classified as every executor does.
        run = [
            Signed(
                approval["nonce"],
                approval["tx_hash"],
                approval["raw"],
                # prepared before issue 24 (no "tx"): the send's fees stand in (a raise is
                # only ever re-sent, never replaced)
                approval.get("tx") or {**tx, "nonce": str(approval["nonce"])},
                self._approve_key(ctx, approval["token"]),
                ctx.attempt_no,
            )
            for approval in approvals
        ]
        run.append(Signed(nonce, tx_hash, signature, tx, ctx.request_node_id, ctx.attempt_no))
        refs = _refs(lane, chain_id, tx_hash, tx["from"], nonce, intent["id"])
        if approvals:
            refs["approval_nonces"] = [a["nonce"] for a in approvals]
        done = await submit_signed(
            self._db, self._rpcs[chain_id], chain_id=chain_id, address=tx["from"], run=run
        )
        if done.sent is Sent.RECLAIMED:  # nothing was broadcast
            await intents.move(
                self._db, intent["id"], S.RELEASED, (S.PENDING,), state_detail="nonce taken back"
            )
            # (found by the fault harness: a prepare slowed by RPC faults past
            # MG_EVM_NONCE_RESERVATION_STALE_SECONDS lost its nonce and FAILED)
            raise reclaimed("CCIP", nonce)
        if done.sent is Sent.REFUSED:  # every URL refused the first bytes: nothing left
            await intents.move(
                self._db,
                intent["id"],
                S.RELEASED,
                (S.PENDING,),
                state_detail=f"refused: {done.refusal}"[:500],
            )
            raise SubmitRejected(f"node refused the ccipSend: {done.refusal}", code="CCIP_REJECTED")
        if done.sent is Sent.ACCEPTED:
            await intents.move(self._db, intent["id"], S.BROADCAST, (S.PENDING,))
        # accepted, or maybe on its way: the chain decides, through observe
        return SubmitResult(provider_refs=refs)

    async def _look(self, ctx: ExecutionContext, refs: dict[str, Any]) -> Look:
        return await self._judge.look(
            int(refs["chain_id"]),
            refs["from"],
            int(refs["nonce"]),
            request_node_id=ctx.request_node_id,
            attempt_no=ctx.attempt_no,
            known_hashes=(refs.get("tx_hash"),),
        )

    async def _resend(
        self,
        ctx: ExecutionContext,
        refs: dict[str, Any],
        seen: Look,
        *,
        replace: bool,
        unless_within: float = 0.0,
    ) -> None:
        """The send's nonce is unconsumed: its allowance raises (still unconsumed) and the
        send go out again, the same bytes; or the send is replaced with a fee bump."""
        chain_id = int(refs["chain_id"])
        count = await self._rpcs[chain_id].nonce(refs["from"], "latest")
        for key in sorted(self._approval_keys(ctx)):
            row = await evm_nonces.for_attempt(
                self._db, request_node_id=key, attempt_no=ctx.attempt_no
            )
            if row is None or row["nonce"] < count:
                continue
            txs = await evm_nonces.signed_for(
                self._db,
                chain_id=chain_id,
                address=row["address"],
                nonce=row["nonce"],
                request_node_id=key,
                attempt_no=ctx.attempt_no,
            )
            await self._judge.rebroadcast(chain_id, txs, unless_within=unless_within)
        if replace:
            new_hash = await self._judge.replace(
                chain_id, seen.txs, request_node_id=ctx.request_node_id, attempt_no=ctx.attempt_no
            )
            if new_hash is not None:
                refs["tx_hash"] = new_hash
        else:
            await self._judge.rebroadcast(chain_id, seen.txs, unless_within=unless_within)

    def _approval_keys(self, ctx: ExecutionContext) -> set[str]:
        try:
            _, send = self._send(ctx)
        except PreflightError:
            return set()
        tokens = {send["token"], send["fee_token"]} - {None}
        return {self._approve_key(ctx, token) for token in tokens}

    async def observe(self, ctx: ExecutionContext) -> ObserveResult:
        if ctx.action_type == "ccip_delivery":
            return await self._observe_delivery(ctx)
        refs = dict(ctx.node_provider_refs)
        seen = await self._look(ctx, refs)
        verdict, judged = seen.judgement.verdict, seen.judgement.receipt
        # these verdicts always carry the mined receipt (judge); `judged` narrows it
        if (
            seen.receipt is not None
            and judged is not None
            and verdict in (Verdict.COMPLETED, Verdict.FAILED_REVERTED, Verdict.NEEDS_PERSON)
        ):
            refs["tx_hash"] = judged.tx_hash
            result = await self._mined(ctx, refs, seen.receipt)
            return msgspec.structs.replace(result, provider_refs={**refs, **result.provider_refs})
        if verdict is Verdict.NOT_LANDED:
            await self._settle_not_landed(ctx, refs)
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                provider_refs=refs,
                error_code="CCIP_NOT_LANDED",
                error_detail=not_landed_proof(seen.judgement, int(refs["nonce"]))
                + " (recovery makes a new attempt)",
            )
        pending = pending_observation(seen, refs, "CCIP", int(refs["nonce"]))
        if pending is not None:
            return pending
        if verdict in (Verdict.WAIT_REBROADCAST, Verdict.REPLACE_WITH_BUMP):
            await self._resend(
                ctx,
                refs,
                seen,
                replace=verdict is Verdict.REPLACE_WITH_BUMP,
                unless_within=REBROADCAST_EVERY_SECONDS,
            )
        return ObserveResult(
            status=ObserveStatus.PENDING,
            provider_refs=refs,
            retry_after_seconds=1.0,
            error_detail=f"chain: {verdict.value}",
        )

    async def _settle_not_landed(self, ctx: ExecutionContext, refs: dict[str, Any]) -> None:
        """Another transaction used the send's nonce (so every nonce below it, the raises'
        included): all consumed; the intent was never sent."""
        chain_id = int(refs["chain_id"])
        for nonce in (*refs.get("approval_nonces", ()), refs["nonce"]):
            await evm_nonces.mark(
                self._db,
                state="consumed",
                chain_id=chain_id,
                address=refs["from"],
                nonce=int(nonce),
                **evm_nonces.owner_of(ctx),
            )
        if "intent_id" in refs:
            await intents.move(
                self._db,
                int(refs["intent_id"]),
                S.RELEASED,
                (S.PENDING, S.BROADCAST, S.STRANDED),
                state_detail="the send's nonce went to another transaction: never sent",
            )

    async def _mined(
        self, ctx: ExecutionContext, refs: dict[str, Any], receipt: dict[str, Any]
    ) -> ObserveResult:
        """A mined ccipSend: settle the nonce and the intent; the message id, or why not."""
        block = int(receipt["blockNumber"], 16)
        for nonce in (*refs.get("approval_nonces", ()), refs["nonce"]):  # all used, in order
            await evm_nonces.mark(
                self._db,
                state="consumed",
                chain_id=int(refs["chain_id"]),
                address=refs["from"],
                nonce=int(nonce),
                **evm_nonces.owner_of(ctx),
            )
        intent_id = int(refs["intent_id"])
        if int(receipt["status"], 16) != 1:
            await intents.move(
                self._db,
                intent_id,
                S.REVERTED,
                (S.PENDING, S.BROADCAST, S.STRANDED),
                block_number=block,
                state_detail="ccipSend reverted",
            )
            return ObserveResult(
                status=ObserveStatus.FAILED,
                artifacts={"tx_hash": refs["tx_hash"], "block_number": block},
                error_code="CCIP_SEND_REVERTED",
                error_detail="the ccipSend transaction reverted: no message was sent",
            )
        message_id = message_id_from_logs(receipt.get("logs") or [])
        if message_id is None:
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                error_code="CCIP_NO_MESSAGE_ID",
                error_detail="the mined ccipSend has no CCIPMessageSent/CCIPSendRequested log",
            )
        await intents.move(
            self._db, intent_id, S.SENT, intents.SENDABLE, message_id=message_id, block_number=block
        )
        sent = {"message_id": message_id, "send_block": block}
        return ObserveResult(
            status=ObserveStatus.COMPLETED,
            provider_refs=sent,
            artifacts={"tx_hash": refs["tx_hash"], "block_number": block, **sent},
        )

    async def _observe_delivery(self, ctx: ExecutionContext) -> ObserveResult:
        refs = {**ctx.provider_context, **ctx.node_provider_refs}
        message_id, lane_name = refs.get("message_id"), refs.get("lane")
        if not message_id or not lane_name:
            return ObserveResult(
                status=ObserveStatus.FAILED,
                error_code="CCIP_NO_MESSAGE",
                error_detail="ccip_delivery needs a ccip_send before it (message_id, lane)",
            )
        lane = self._lane(lane_name)
        dest = self._rpcs[lane.dest_chain_id]
        known = refs.get("dest_from_block")
        height = None
        if known is None and lane.dest_chain_id != lane.chain_id:
            height = await dest.block_number()
        from_block = execution_from_block(
            lane, int(refs.get("send_block", 0)), height, None if known is None else int(known)
        )
        address, topics = execution_topics(lane, message_id)
        logs = await dest.call(
            "eth_getLogs", {"address": address, "topics": topics, "fromBlock": hex(from_block)}
        )
        found = execution_from_logs(logs or [], message_id)
        watched = {"message_id": message_id, "lane": lane.name, "dest_from_block": from_block}
        if found is None:
            return ObserveResult(status=ObserveStatus.PENDING, provider_refs=watched)
        execution, dest_tx_hash = found
        intent_id = int(refs["intent_id"]) if "intent_id" in refs else None
        await intents.record_execution(self._db, intent_id, message_id, execution, dest_tx_hash)
        done = {**watched, "dest_tx_hash": dest_tx_hash}
        if execution is Execution.SUCCESS:
            return ObserveResult(
                status=ObserveStatus.COMPLETED,
                provider_refs=done,
                artifacts={**done, "delivery_status": "SUCCESS"},
            )
        return ObserveResult(
            status=ObserveStatus.FAILED,
            provider_refs=done,
            artifacts={**done, "delivery_status": execution.value.upper()},
            error_code="CCIP_MANUAL_EXECUTION_NEEDED",
            error_detail="the message failed on the destination; CCIP allows manual execution",
        )

    async def recover(self, ctx: ExecutionContext) -> RecoverResult:
        """From the chain: intent → transaction → message id → execution state."""
        if ctx.action_type == "ccip_delivery":  # watching only: look again
            seen = await self._observe_delivery(ctx)
            if seen.status == ObserveStatus.COMPLETED:
                return RecoverResult(
                    outcome=RecoverOutcome.COMPLETED,
                    provider_refs=seen.provider_refs,
                    artifacts=seen.artifacts,
                )
            if seen.status == ObserveStatus.FAILED:
                return RecoverResult(
                    outcome=RecoverOutcome.FAILED,
                    provider_refs=seen.provider_refs,
                    artifacts=seen.artifacts,
                    error_code=seen.error_code,
                    error_detail=seen.error_detail,
                )
            return RecoverResult(outcome=RecoverOutcome.SUBMITTED, provider_refs=seen.provider_refs)
        intent = await intents.for_attempt(
            self._db, request_node_id=ctx.request_node_id, attempt_no=ctx.attempt_no
        )
        if intent is None:  # no write-ahead row: nothing was signed for broadcast
            row = await evm_nonces.for_attempt(
                self._db, request_node_id=ctx.request_node_id, attempt_no=ctx.attempt_no
            )
            await self._release_unsigned(ctx, [row])
            return _not_sent("no send intent was written for this attempt")
        lane = self._lane(intent["lane"])
        refs = _refs(
            lane,
            intent["chain_id"],
            intent["tx_hash"],
            intent["sender"],
            intent["nonce"],
            intent["id"],
        )
        approvals = await self._approval_rows(ctx, {intent["token"], intent["fee_token"]})
        if approvals:
            refs["approval_nonces"] = [a["nonce"] for a in approvals]
        look = await self._look(ctx, refs)
        verdict, judged = look.judgement.verdict, look.judgement.receipt
        if verdict is Verdict.NOTHING_SIGNED:
            # the intent was written but no bytes were kept (kept before any broadcast):
            # nothing of this attempt left; its nonces go back
            row = await evm_nonces.for_attempt(
                self._db, request_node_id=ctx.request_node_id, attempt_no=ctx.attempt_no
            )
            await self._release_unsigned(ctx, [row])
            await intents.move(
                self._db,
                intent["id"],
                S.RELEASED,
                (S.PENDING, S.BROADCAST, S.STRANDED),
                state_detail="recovery: nothing was signed for broadcast",
            )
            return _not_sent("nothing was signed for broadcast in this attempt")
        if verdict is Verdict.NOT_LANDED:
            await self._settle_not_landed(ctx, refs)
            return RecoverResult(
                outcome=RecoverOutcome.NOT_SUBMITTED,
                error_code="CCIP_NOT_LANDED",
                error_detail=not_landed_proof(look.judgement, int(refs["nonce"])),
            )
        pending = pending_recovery(look, refs, "CCIP", int(refs["nonce"]))
        if pending is not None:
            return pending
        # these verdicts always carry the mined receipt (judge); `judged` narrows it
        if (
            look.receipt is not None
            and judged is not None
            and verdict in (Verdict.COMPLETED, Verdict.FAILED_REVERTED)
        ):
            refs["tx_hash"] = judged.tx_hash
            mined = await self._mined(ctx, refs, look.receipt)
            if mined.status == ObserveStatus.COMPLETED:
                return RecoverResult(
                    outcome=RecoverOutcome.COMPLETED,
                    provider_refs={**refs, **mined.provider_refs},
                    artifacts=mined.artifacts,
                )
            if mined.status == ObserveStatus.FAILED:
                return RecoverResult(
                    outcome=RecoverOutcome.FAILED,
                    provider_refs=refs,
                    error_code=mined.error_code,
                    error_detail=mined.error_detail,
                )
            return RecoverResult(outcome=RecoverOutcome.UNKNOWN, error_detail=mined.error_detail)
        if verdict in (Verdict.WAIT_REBROADCAST, Verdict.REPLACE_WITH_BUMP):
            # e.g. a crash after the write-ahead, before the broadcast: the same bytes
            await self._resend(ctx, refs, look, replace=False)
        if look.txs and look.receipt is None:
            refs["tx_hash"] = look.txs[-1]["tx_hash"]
        # in flight (or mined above the trusted depth): observe decides from here
        return RecoverResult(outcome=RecoverOutcome.SUBMITTED, provider_refs=refs)

    async def _release_unsigned(
        self, ctx: ExecutionContext, rows: list[dict[str, Any] | None]
    ) -> None:
        """Release this attempt's reservations that have no signed bytes kept: provably
        never broadcast (bytes are kept first). One with bytes is left to the chain."""
        for key in self._approval_keys(ctx):
            rows.append(
                await evm_nonces.for_attempt(
                    self._db, request_node_id=key, attempt_no=ctx.attempt_no
                )
            )
        for held in rows:
            if held is None or held["tx_hash"] is not None:
                continue
            await evm_nonces.mark(
                self._db,
                state="released",
                chain_id=held["chain_id"],
                address=held["address"],
                nonce=held["nonce"],
                **evm_nonces.owner_of(ctx),
            )

    async def _approval_rows(
        self, ctx: ExecutionContext, tokens: set[str | None]
    ) -> list[dict[str, Any]]:
        """The allowance-raise reservations of this attempt (see `_raises_and_send_nonces`)."""
        rows = []
        for token in tokens:
            if token is None:  # no fee token: the fee is paid in native
                continue
            row = await evm_nonces.for_attempt(
                self._db,
                request_node_id=self._approve_key(ctx, token),
                attempt_no=ctx.attempt_no,
            )
            if row is not None:
                rows.append(row)
        return sorted(rows, key=lambda r: r["nonce"])

    async def health(self) -> HealthReport:
        detail: dict[str, Any] = {}
        state = HealthState.HEALTHY
        for name, lane in self._lanes.items():
            try:
                code = await self._rpcs[lane.chain_id].call("eth_getCode", lane.router, "latest")
                detail[name] = {"router_has_code": code not in ("0x", "0x0", None)}
            except Exception as exc:  # a chain that does not answer degrades, never crashes
                detail[name] = {"error": type(exc).__name__}
                state = HealthState.DEGRADED
        return HealthReport(state=state, detail=detail, signer_address=self._signer.address)


def _refs(
    lane: Lane, chain_id: int, tx_hash: str, sender: str, nonce: int, intent_id: int
) -> dict[str, Any]:
    return {
        "chain_id": chain_id,
        "tx_hash": tx_hash,
        "from": sender,
        "nonce": nonce,
        "lane": lane.name,
        "intent_id": intent_id,
    }


def _not_sent(detail: str) -> RecoverResult:
    """Provably nothing sent under this attempt: qtg may attempt again (a new key)."""
    return RecoverResult(
        outcome=RecoverOutcome.NOT_SUBMITTED, error_code="CCIP_NOT_SENT", error_detail=detail
    )
