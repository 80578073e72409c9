"""The `debridge` executor (issue 46): a DLN order on the source, its fulfilment on the destination.

Node config `debridge` (on the send): {"source_chain_id": int, "destination_chain_id":
int, "decimals": int (6), "taker_margin_bps": int (10)}; the intent gives `asset`
(a key of the chains' `tokens`), `amount` (whole units the receiver gets: the
order's takeAmount) and `destination` (receiverDst). The source gives takeAmount
plus the taker's margin, and DlnSource's globalFixedNativeFee in the native coin.

- debridge_send (action): an allowance raise for DlnSource when the standing
  allowance is short (signed in prepare, broadcast just below the order's nonce),
  then `createOrder(OrderCreation, "", 0, "")` with qtg's signer as the order's
  authority on both sides and its only cancel beneficiary. The transaction goes
  through qtg.providers.evm.outcome (write-ahead, kept signed bytes, the consuming
  transaction decides); the order and its id come from the receipt's CreatedOrder.
- debridge_fulfillment (observe): the order-status API's state (a hint, recorded),
  and the destination chain, which decides: COMPLETED only when DlnDestination's
  takeOrders shows the order taken AND a FulfilledOrder of this id sits in a receipt
  that paid takeAmount of the take token to receiverDst. FAILED only when the order
  was cancelled on the destination and the source chain holds the
  ClaimedOrderCancel that refunded the give amount. Anything else is pending; an
  order unfulfilled MG_DEBRIDGE_UNFULFILLED_AFTER_SECONDS after its creation is UNKNOWN
  (DEBRIDGE_UNFULFILLED): it pages like any undecided node, and recovery keeps asking.
- The cancel lever (`prove_failure`): operators resolving that node FAILED (four eyes,
  qtg.services.node_attention) do not make it so: qtg sends `sendEvmOrderCancel` on the
  destination (write-ahead, kept bytes, like any transaction of qtg's), and the node is
  FAILED only when the source shows the refund; if a taker fulfilled first, it is paid.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

import httpx
import trio

from qtg.db import Database
from qtg.domain import bounded_json
from qtg.domain.chain_outcome import Verdict, not_landed_proof
from qtg.domain.context import ExecutionContext
from qtg.domain.debridge import (
    API_FULFILLED,
    CLAIMED_ORDER_CANCEL,
    FULFILLED_ORDER,
    GIVE_CLAIMED_CANCEL,
    GLOBAL_FIXED_NATIVE_FEE,
    TAKE_FULFILLED,
    TAKE_SENT_ORDER_CANCEL,
    TAKE_SENT_UNLOCK,
    Chain,
    Order,
    create_order_data,
    created_from_logs,
    decode_order,
    first_word,
    fulfilled_in_logs,
    give_orders_data,
    refund_from_logs,
    send_evm_order_cancel_data,
    state_from_body,
    take_orders_data,
)
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
    SubmitRejected,
    SubmitResult,
)
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

EXECUTOR_KEY = "debridge"
ACTION_TYPES = frozenset({"debridge_send", "debridge_fulfillment"})
DEFAULT_DECIMALS = 6
#: the taker's margin over takeAmount when the template names none (0.1 %)
DEFAULT_MARGIN_BPS = 10
#: createOrder's gas when it cannot be estimated (its allowance raise is not mined yet)
CREATE_GAS = 500_000
#: blocks back from the head searched for a FulfilledOrder / ClaimedOrderCancel
LOG_WINDOW = 50_000
#: what the send hands its fulfilment observe (and recovery) in provider_refs
ORDER_REFS = (
    "source_chain_id",
    "destination_chain_id",
    "order_id",
    "order",
    "create_tx_hash",
    "created_at",
    "give_amount",
    "take_amount",
    "receiver",
    "take_token",
)


class DebridgeExecutor:
    key = EXECUTOR_KEY
    action_types = ACTION_TYPES

    def __init__(
        self,
        db: Database,
        rpcs: dict[int, EvmRpc],
        signer: EvmSigner,
        judge: ChainJudge,
        chains: dict[int, Chain],
        *,
        status_url: str,
        status_timeout: float,
        fulfillment_poll: float,
        unfulfilled_after: float,
    ) -> None:
        self._db = db
        self._rpcs = rpcs
        self._signer = signer
        self._judge = judge
        self._chains = chains
        self._api = status_url.rstrip("/")
        self._api_timeout = status_timeout
        self._poll = fulfillment_poll
        self._unfulfilled_after = unfulfilled_after
        self._http = httpx.AsyncClient(timeout=status_timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    # ---------------------------------------------------------------- helpers
    def _chain(self, chain_id: Any, what: str) -> Chain:
        chain = self._chains.get(chain_id) if isinstance(chain_id, int) else None
        if chain is None or chain_id not in self._rpcs:
            raise PreflightError(
                f"debridge.{what} {chain_id!r} names no chain in MG_DEBRIDGE_CHAINS "
                "and MG_EVM_RPC_URLS",
                code="DEBRIDGE_CHAIN_UNKNOWN",
            )
        return chain

    def _order_input(self, ctx: ExecutionContext) -> tuple[Chain, Chain, dict[str, Any]]:
        cfg = dict(ctx.node_config.get("debridge") or {})
        source = self._chain(cfg.get("source_chain_id"), "source_chain_id")
        dest = self._chain(cfg.get("destination_chain_id"), "destination_chain_id")
        if source.chain_id == dest.chain_id:
            raise PreflightError(
                "debridge: source and destination chains are the same",
                code="DEBRIDGE_SAME_CHAIN",
            )
        asset = str(ctx.intent.get("asset", cfg.get("asset", ""))).upper()
        if asset not in source.tokens or asset not in dest.tokens:
            raise PreflightError(
                f"asset {asset!r} has no token on both chains in MG_DEBRIDGE_CHAINS",
                code="DEBRIDGE_ASSET_UNKNOWN",
            )
        receiver = ctx.intent.get("destination", cfg.get("destination"))
        if not is_address(receiver):
            raise PreflightError(
                f"destination {receiver!r} is not an address", code="DEBRIDGE_BAD_DESTINATION"
            )
        try:
            take = to_base_units(
                str(ctx.intent.get("amount", cfg.get("amount"))),
                int(cfg.get("decimals", DEFAULT_DECIMALS)),
            )
        except ValueError as exc:
            raise PreflightError(str(exc), code="DEBRIDGE_BAD_AMOUNT") from None
        margin = int(cfg.get("taker_margin_bps", DEFAULT_MARGIN_BPS))
        if not 0 <= margin <= 10_000:
            raise PreflightError(
                f"debridge.taker_margin_bps {margin} is not within 0..10000",
                code="DEBRIDGE_BAD_MARGIN",
            )
        give = take + -(-take * margin // 10_000)  # rounded up: the taker is never short
        return (
            source,
            dest,
            {
                "receiver": receiver.lower(),
                "take": take,
                "give": give,
                "give_token": source.tokens[asset],
                "take_token": dest.tokens[asset],
            },
        )

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

    # --------------------------------------------------------------- contract
    def check_intent(self, intent: Mapping[str, Any], node_config: Mapping[str, Any]) -> None:
        """At movement creation: a receiver that is no address, or an amount the token
        cannot express, is refused before anyone approves it."""
        cfg = node_config.get("debridge")
        decimals = (
            cfg.get("decimals", DEFAULT_DECIMALS) if isinstance(cfg, Mapping) else DEFAULT_DECIMALS
        )
        problem = intent_problem(intent, decimals)
        if problem is not None:
            field, message, code = problem
            raise IntentRejected(field, message, code=code.replace("EVM_", "DEBRIDGE_"))

    async def preflight(self, ctx: ExecutionContext) -> None:
        with transient_rpc_faults("preflight"):  # a wait, not a failure (issue 24)
            if ctx.action_type == "debridge_send":
                source, _, _ = self._order_input(ctx)
                rpc = self._rpcs[source.chain_id]
                if await rpc.chain_id_on_chain() != source.chain_id:
                    raise PreflightError(
                        f"chain at {rpc.url} is not chain {source.chain_id}",
                        code="DEBRIDGE_CHAIN_MISMATCH",
                    )

    async def prepare(self, ctx: ExecutionContext) -> PreparedAction:
        with transient_rpc_faults("prepare"):  # a wait, not a failure (issue 24)
            return await self._prepare(ctx)

    async def _prepare(self, ctx: ExecutionContext) -> PreparedAction:
        if ctx.action_type != "debridge_send":
            raise PreflightError(
                f"{ctx.action_type} is an observation, not an action",
                code="DEBRIDGE_NOT_AN_ACTION",
            )
        source, dest, o = self._order_input(ctx)
        rpc = self._rpcs[source.chain_id]
        owner = self._signer.address
        # raised by the amount where the token can, else approve(current + amount) on the
        # nonce right below the order (evm_nonces.reserve_run): nothing of ours runs
        # between them, so orders prepared side by side never spend each other's
        raise_call = await allowance_raise_call(
            rpc, o["give_token"], owner, source.dln_source, o["give"]
        )
        keys = (
            [ctx.request_node_id]
            if raise_call is None
            else [_approve_key(ctx), ctx.request_node_id]
        )

        async def reserve(floor: int, counts: tuple[int, int]) -> list[int]:
            return await evm_nonces.reserve_run(
                self._db,
                chain_id=source.chain_id,
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
                source.chain_id,
                raise_call,
                raise_nonces[0],
                headroom=ALLOWANCE_RAISE_HEADROOM_GAS,
            )
            raw = await self._sign(raise_tx, "approve")
            approvals.append(
                {"nonce": raise_nonces[0], "raw": raw, "tx_hash": raw_tx_hash(raw), "tx": raise_tx}
            )
        fee = first_word(await rpc.eth_call(source.dln_source, "0x" + GLOBAL_FIXED_NATIVE_FEE))
        call = {
            "from": owner,
            "to": source.dln_source,
            "value": hex(fee),
            "data": create_order_data(
                give_token=o["give_token"],
                give_amount=o["give"],
                take_token=o["take_token"],
                take_amount=o["take"],
                take_chain_id=dest.chain_id,
                receiver=o["receiver"],
                authority=owner,
            ),
        }
        tx = await contract_call_tx(
            rpc, self._judge, source.chain_id, call, nonce, gas=CREATE_GAS if approvals else None
        )
        tx["qtg"] = {
            "destination_chain_id": dest.chain_id,
            "receiver": o["receiver"],
            "give_amount": str(o["give"]),
            "take_amount": str(o["take"]),
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
        """The sender's nonce lane, shared with the evm, ccip and cctp executors."""
        return nonce_lane_key(json.loads(prepared.payload))

    async def submit(
        self,
        ctx: ExecutionContext,
        prepared: PreparedAction,
        signature: str | None,
        idempotency_key: str,
    ) -> SubmitResult:
        if not signature:
            raise SubmitRejected(
                f"{ctx.action_type} needs the signed transaction", code="DEBRIDGE_UNSIGNED"
            )
        tx = json.loads(prepared.payload)
        meta = tx.get("qtg") or {}
        chain_id, nonce = int(tx["chainId"]), int(tx["nonce"])
        tx_hash = raw_tx_hash(signature)
        approvals = meta.get("approvals") or []
        # the signed bytes kept before anything is broadcast, then sent in nonce order
        run = [
            Signed(a["nonce"], a["tx_hash"], a["raw"], a["tx"], _approve_key(ctx), ctx.attempt_no)
            for a in approvals
        ]
        run.append(
            Signed(
                nonce,
                tx_hash,
                signature,
                {k: v for k, v in tx.items() if k != "qtg"},
                ctx.request_node_id,
                ctx.attempt_no,
            )
        )
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
            raise reclaimed("DEBRIDGE", nonce)
        if done.sent is Sent.REFUSED:  # every URL refused the first bytes: nothing left
            raise SubmitRejected(
                f"node refused the {ctx.action_type}: {done.refusal}", code="DEBRIDGE_REJECTED"
            )
        # accepted, or maybe on its way: the chain decides, through observe
        return SubmitResult(provider_refs=refs)

    # ---------------------------------------------------------------- observe
    async def observe(self, ctx: ExecutionContext) -> ObserveResult:
        if ctx.action_type == "debridge_fulfillment":
            return await self._observe_fulfillment(ctx)
        refs = dict(ctx.node_provider_refs)
        seen = await self._look(ctx, refs)
        return await self._settle(ctx, refs, seen)

    async def _look(self, ctx: ExecutionContext, refs: Mapping[str, Any]) -> Look:
        """The chain's verdict on this attempt's createOrder (qtg.domain.chain_outcome)."""
        source = self._chains[int(refs["chain_id"])].dln_source

        def effect(receipt: dict[str, Any]) -> bool:  # the order's CreatedOrder is there
            return created_from_logs(receipt.get("logs") or [], source) is not None

        return await self._judge.look(
            int(refs["chain_id"]),
            refs["from"],
            int(refs["nonce"]),
            request_node_id=ctx.request_node_id,
            attempt_no=ctx.attempt_no,
            known_hashes=(refs.get("tx_hash"),),
            effect=effect,
        )

    async def _keep_raise_moving(self, ctx: ExecutionContext, refs: Mapping[str, Any]) -> None:
        """The allowance raise sits just below the order's nonce: while the order waits,
        the raise's kept bytes go out again too (a lost raise would hold it forever)."""
        for nonce in refs.get("approval_nonces", ()):
            seen = await self._judge.look(
                int(refs["chain_id"]),
                refs["from"],
                int(nonce),
                request_node_id=_approve_key(ctx),
                attempt_no=ctx.attempt_no,
            )
            if seen.judgement.verdict in (Verdict.WAIT_REBROADCAST, Verdict.REPLACE_WITH_BUMP):
                await self._judge.rebroadcast(int(refs["chain_id"]), seen.txs)

    async def _settle(
        self, ctx: ExecutionContext, refs: dict[str, Any], seen: Look
    ) -> ObserveResult:
        verdict, mined = seen.judgement.verdict, seen.judgement.receipt
        if mined is not None:
            refs["tx_hash"] = mined.tx_hash  # the one of ours that was mined
        if verdict in (Verdict.COMPLETED, Verdict.FAILED_REVERTED) and seen.receipt is not None:
            return await self._created(ctx, refs, seen.receipt)
        if verdict is Verdict.NEEDS_PERSON:
            await self._consume(ctx, refs)
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                provider_refs=refs,
                error_code="DEBRIDGE_NO_ORDER",
                error_detail="createOrder was mined with status 1 but has no CreatedOrder log "
                "of the configured DlnSource: a person decides",
            )
        if verdict is Verdict.NOT_LANDED:
            await self._consume(ctx, refs)
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                provider_refs=refs,
                error_code="DEBRIDGE_NOT_LANDED",
                error_detail=not_landed_proof(seen.judgement, int(refs["nonce"]))
                + " (recovery makes a new attempt)",
            )
        pending = pending_observation(seen, refs, "DEBRIDGE", int(refs["nonce"]))
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
            await self._judge.rebroadcast(
                chain_id, seen.txs, unless_within=REBROADCAST_EVERY_SECONDS
            )
        return ObserveResult(
            status=ObserveStatus.PENDING,
            provider_refs=refs,
            retry_after_seconds=1.0,
            error_detail=f"chain: {verdict.value}",
        )

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

    async def _created(
        self, ctx: ExecutionContext, refs: dict[str, Any], receipt: dict[str, Any]
    ) -> ObserveResult:
        await self._consume(ctx, refs)
        block = int(receipt["blockNumber"], 16)
        artifacts = {"create_tx_hash": refs["tx_hash"], "block_number": block}
        if int(receipt["status"], 16) != 1:
            # a reverted createOrder reverts its transferFrom too: nothing left the maker
            return ObserveResult(
                status=ObserveStatus.FAILED,
                artifacts=artifacts,
                error_code="DEBRIDGE_CREATE_REVERTED",
                error_detail="createOrder reverted (receipt status 0): nothing was given",
            )
        source = self._chains[int(refs["chain_id"])]
        found = created_from_logs(receipt.get("logs") or [], source.dln_source)
        if found is None:
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                error_code="DEBRIDGE_NO_ORDER",
                error_detail="the mined createOrder has no CreatedOrder log of the configured "
                "DlnSource",
            )
        order, order_id = found
        rpc = self._rpcs[source.chain_id]
        header = await rpc.call("eth_getBlockByNumber", hex(block), False)
        created = {
            "source_chain_id": source.chain_id,
            "destination_chain_id": order.take_chain_id,
            "order_id": order_id,
            "order": order.encoded(),
            "create_tx_hash": refs["tx_hash"],
            "created_at": int(header["timestamp"], 16),
            "give_amount": str(order.give_amount),
            "take_amount": str(order.take_amount),
            "receiver": order.receiver_dst,
            "take_token": order.take_token,
        }
        return ObserveResult(
            status=ObserveStatus.COMPLETED,
            provider_refs=created,
            artifacts={**artifacts, **{k: v for k, v in created.items() if k != "order"}},
        )

    async def _api_state(self, order_id: str) -> str | None:
        """What the order-status API says (None: down, slow, or no answer): a hint only."""
        try:
            with trio.fail_after(self._api_timeout):
                reply = await self._http.get(f"{self._api}/api/Orders/{order_id}")
        except (httpx.HTTPError, trio.TooSlowError):
            return None
        if reply.status_code != 200:
            return None
        try:
            return state_from_body(bounded_json.loads(reply.content))
        except ValueError:
            return None

    async def _logs(self, chain_id: int, address: str, topic: str) -> list[dict[str, Any]]:
        """`address`'s logs of `topic` in the last LOG_WINDOW blocks (the events carry no
        indexed order id: the caller matches the id in their data)."""
        rpc = self._rpcs[chain_id]
        height = await rpc.block_number()
        logs = await rpc.call(
            "eth_getLogs",
            {"address": address, "topics": [topic], "fromBlock": hex(max(0, height - LOG_WINDOW))},
        )
        return list(logs or [])

    async def _observe_fulfillment(self, ctx: ExecutionContext) -> ObserveResult:
        refs = {**ctx.provider_context, **ctx.node_provider_refs}
        carried = {k: refs[k] for k in ORDER_REFS if k in refs}
        if "order" not in carried or "order_id" not in carried:
            return ObserveResult(
                status=ObserveStatus.FAILED,
                error_code="DEBRIDGE_NO_ORDER",
                error_detail="debridge_fulfillment needs a debridge_send before it",
            )
        order, order_id = decode_order(carried["order"]), str(carried["order_id"])
        source = self._chains[int(carried["source_chain_id"])]
        dest = self._chains[int(carried["destination_chain_id"])]
        api_state = await self._api_state(order_id)
        raw = await self._rpcs[dest.chain_id].eth_call(
            dest.dln_destination, take_orders_data(order_id)
        )
        taken = first_word(raw)
        if taken in (TAKE_FULFILLED, TAKE_SENT_UNLOCK):
            done = await self._fulfilled(dest, order, order_id)
            if done is not None:
                found = {**carried, **done}
                return ObserveResult(
                    status=ObserveStatus.COMPLETED,
                    provider_refs=found,
                    artifacts={**done, "order_id": order_id, "api_state": api_state},
                )
        elif taken == TAKE_SENT_ORDER_CANCEL:
            refund = await self._refunded(source, order_id)
            if refund is not None:
                return ObserveResult(
                    status=ObserveStatus.FAILED,
                    provider_refs={**carried, **refund},
                    artifacts={**refund, "api_state": api_state},
                    error_code="DEBRIDGE_ORDER_CANCELLED",
                    error_detail=(
                        f"order {order_id} was cancelled on chain {dest.chain_id} and chain "
                        f"{source.chain_id} refunded {refund['refunded_amount']} to "
                        f"{refund['refund_beneficiary']} in {refund['refund_tx_hash']} "
                        "(ClaimedOrderCancel): no money moved"
                    ),
                )
        detail = f"destination takeOrders status {taken}; status API: {api_state or 'no answer'}"
        if api_state in API_FULFILLED and taken not in (TAKE_FULFILLED, TAKE_SENT_UNLOCK):
            detail += " (the API alone is no proof: waiting for the destination chain)"
        created_at = carried.get("created_at")
        if isinstance(created_at, int) and time.time() - created_at >= self._unfulfilled_after:
            # still fillable, so never FAILED: undecided, which pages like any UNKNOWN node
            # (MANUAL_INTERVENTION); recovery keeps asking (a late taker still completes
            # it), and operators may cancel it by resolving it FAILED (prove_failure)
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                provider_refs=carried,
                error_code="DEBRIDGE_UNFULFILLED",
                error_detail=f"no taker fulfilled order {order_id} in "
                f"{time.time() - created_at:.0f} s; {detail}",
            )
        return ObserveResult(
            status=ObserveStatus.PENDING,
            provider_refs=carried,
            retry_after_seconds=self._poll,
            error_detail=detail,
        )

    async def _fulfilled(self, dest: Chain, order: Order, order_id: str) -> dict[str, Any] | None:
        """The FulfilledOrder of this id whose receipt paid the receiver takeAmount."""
        rpc = self._rpcs[dest.chain_id]
        for log in await self._logs(dest.chain_id, dest.dln_destination, FULFILLED_ORDER):
            if order_id[2:].lower() not in str(log["data"]).lower():
                continue  # a cheap pre-filter; the receipt check below decides
            receipt = await rpc.receipt(log["transactionHash"])
            if receipt is None or int(receipt["status"], 16) != 1:
                continue
            if fulfilled_in_logs(receipt.get("logs") or [], dest.dln_destination, order, order_id):
                return {
                    "dest_tx_hash": receipt["transactionHash"],
                    "dest_block": int(receipt["blockNumber"], 16),
                    "fulfilled_amount": str(order.take_amount),
                    "token": order.take_token,
                }
        return None

    async def _refunded(self, source: Chain, order_id: str) -> dict[str, Any] | None:
        """The source's ClaimedOrderCancel of this id, with giveOrders saying ClaimedCancel."""
        rpc = self._rpcs[source.chain_id]
        status = first_word(await rpc.eth_call(source.dln_source, give_orders_data(order_id)))
        if status != GIVE_CLAIMED_CANCEL:
            return None
        for log in await self._logs(source.chain_id, source.dln_source, CLAIMED_ORDER_CANCEL):
            refund = refund_from_logs([log], source.dln_source, order_id)
            if refund is not None:
                return {
                    "refund_tx_hash": log["transactionHash"],
                    "refunded_amount": str(refund.paid_amount),
                    "refund_beneficiary": refund.beneficiary,
                }
        return None

    # ------------------------------------------------------------- the lever
    async def prove_failure(
        self, node_id: str, attempt_no: int, refs: Mapping[str, Any]
    ) -> tuple[str, dict[str, Any], dict[str, Any] | None] | None:
        """Operators resolved a debridge_fulfillment node FAILED (four eyes): the order is
        cancelled and the chains decide. ("failed", proof, None) once the source chain
        holds the ClaimedOrderCancel that refunded the give amount; ("paid", proof, refs)
        when a taker fulfilled the order first (the receiver was paid: never FAILED);
        None while neither shows — the cancel is sent, or its kept bytes sent again."""
        if "order" not in refs or "order_id" not in refs:
            return None  # nothing to cancel by: the resolution waits (and pages)
        order, order_id = decode_order(str(refs["order"])), str(refs["order_id"])
        source = self._chains[int(refs["source_chain_id"])]
        dest = self._chains[int(refs["destination_chain_id"])]
        raw = await self._rpcs[dest.chain_id].eth_call(
            dest.dln_destination, take_orders_data(order_id)
        )
        taken = first_word(raw)
        kept = await self._follow_cancel(node_id, attempt_no, dest)
        if taken in (TAKE_FULFILLED, TAKE_SENT_UNLOCK):
            done = await self._fulfilled(dest, order, order_id)
            if done is None:
                return None
            proof = {"kind": "debridge_fulfilled", "tx_hash": done["dest_tx_hash"]}
            return "paid", {**proof, "block": done["dest_block"]}, {**refs, **done}
        if taken == TAKE_SENT_ORDER_CANCEL:
            refund = await self._refunded(source, order_id)
            if refund is None:
                return None  # cancelled on the destination; the refund is on its way
            proof = {
                "kind": "debridge_refund",
                "tx_hash": refund["refund_tx_hash"],
                "order_id": order_id,
                "refunded": refund["refunded_amount"],
                "chain_id": source.chain_id,
            }
            return "failed", proof, None
        if not kept:
            await self._send_cancel(node_id, attempt_no, dest, order)
        return None

    async def _follow_cancel(self, node_id: str, attempt_no: int, dest: Chain) -> bool:
        """The kept cancel of this resolution, if any (True), under the chain rule: its
        bytes go out again until the chain consumes the nonce, then the reservation is
        spent — the order's status says what the cancel did (mined, or reverted because
        a taker came first)."""
        key = _cancel_key(node_id)
        row = await evm_nonces.for_attempt(self._db, request_node_id=key, attempt_no=attempt_no)
        if row is None or not row["tx_hash"]:
            return False
        seen = await self._judge.look(
            dest.chain_id,
            row["address"],
            int(row["nonce"]),
            request_node_id=key,
            attempt_no=attempt_no,
            known_hashes=(row["tx_hash"],),
        )
        verdict = seen.judgement.verdict
        if verdict in (Verdict.WAIT_REBROADCAST, Verdict.REPLACE_WITH_BUMP):
            await self._judge.rebroadcast(
                dest.chain_id, seen.txs, unless_within=REBROADCAST_EVERY_SECONDS
            )
        elif seen.judgement.receipt is not None or verdict is Verdict.NOT_LANDED:
            await evm_nonces.mark(
                self._db,
                state="consumed",
                chain_id=dest.chain_id,
                address=row["address"],
                nonce=int(row["nonce"]),
                owner=node_id,
                attempt_no=attempt_no,
            )
        return True

    async def _send_cancel(self, node_id: str, attempt_no: int, dest: Chain, order: Order) -> None:
        """sendEvmOrderCancel(order, qtg's signer, 0) on the destination: reserved, and its
        bytes kept before the broadcast (submit_signed); `_follow_cancel` from then on."""
        key = _cancel_key(node_id)
        rpc = self._rpcs[dest.chain_id]
        owner = self._signer.address

        async def reserve(floor: int, counts: tuple[int, int]) -> int:
            return await evm_nonces.reserve(
                self._db,
                chain_id=dest.chain_id,
                address=owner,
                request_node_id=key,
                attempt_no=attempt_no,
                chain_floor=floor,
                chain_counts=counts,
            )

        nonce = await evm_ledger.reserve_in_step(self._db, rpc, owner, reserve)
        call = {
            "from": owner,
            "to": dest.dln_destination,
            "data": send_evm_order_cancel_data(order, owner),
        }
        tx = await contract_call_tx(rpc, self._judge, dest.chain_id, call, nonce)
        signed = await self._sign(tx, "debridge_cancel")
        await submit_signed(
            self._db,
            rpc,
            chain_id=dest.chain_id,
            address=owner,
            run=[Signed(nonce, raw_tx_hash(signed), signed, tx, key, attempt_no)],
            crash_prefix="debridge_cancel.",
        )

    # ---------------------------------------------------------------- recover
    async def recover(self, ctx: ExecutionContext) -> RecoverResult:
        if ctx.action_type == "debridge_fulfillment":  # watching only
            return _from_observation(await self.observe(ctx))
        return await self._recover_tx(ctx)

    async def _recover_tx(self, ctx: ExecutionContext) -> RecoverResult:
        """createOrder's transaction under the chain rule of qtg.domain.chain_outcome: one
        that may have been broadcast is followed (its kept bytes sent again) until the
        chain consumes its nonce; a new attempt only when provably none can land."""
        refs = dict(ctx.node_provider_refs)
        approval = await evm_nonces.for_attempt(
            self._db, request_node_id=_approve_key(ctx), attempt_no=ctx.attempt_no
        )
        if "tx_hash" not in refs:
            row = await evm_nonces.for_attempt(
                self._db, request_node_id=ctx.request_node_id, attempt_no=ctx.attempt_no
            )
            if row is None:
                if approval is not None and approval["tx_hash"] is None:
                    await _release(self._db, ctx, approval)
                return _not_sent("no nonce was reserved for this attempt")
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
            # bytes are kept before any broadcast and none were: nothing left qtg; a raise
            # signed just before is harmless (no value moves) and goes out, leaving no gap
            await evm_nonces.mark(self._db, state="released", **where, **evm_nonces.owner_of(ctx))
            if approval is not None:
                if approval["tx_hash"] is None:
                    await _release(self._db, ctx, approval)
                else:
                    await self._keep_raise_moving(ctx, refs)
            return _not_sent("the attempt's transaction was never broadcast")
        if verdict is Verdict.NOT_LANDED:
            await self._consume(ctx, refs)
            return RecoverResult(
                outcome=RecoverOutcome.NOT_SUBMITTED,
                error_code="DEBRIDGE_NOT_LANDED",
                error_detail=not_landed_proof(seen.judgement, where["nonce"]),
            )
        pending = pending_recovery(seen, refs, "DEBRIDGE", where["nonce"])
        if pending is not None:
            return pending
        if verdict is Verdict.NEEDS_PERSON:
            return RecoverResult(
                outcome=RecoverOutcome.UNKNOWN,
                error_detail="createOrder was mined without its CreatedOrder log: a person decides",
            )
        if verdict is Verdict.WAIT_REBROADCAST or verdict is Verdict.REPLACE_WITH_BUMP:
            # e.g. a crash after the write-ahead, before the broadcast: the same bytes
            await self._keep_raise_moving(ctx, refs)
            await self._judge.rebroadcast(where["chain_id"], seen.txs)
        if seen.judgement.receipt is not None:
            refs["tx_hash"] = seen.judgement.receipt.tx_hash
        elif seen.txs:
            refs["tx_hash"] = seen.txs[-1]["tx_hash"]
        # mined or in flight: observe decides (receipt, CreatedOrder) from here
        return RecoverResult(outcome=RecoverOutcome.SUBMITTED, provider_refs=refs)

    async def health(self) -> HealthReport:
        detail: dict[str, Any] = {}
        state = HealthState.HEALTHY
        for chain_id, chain in self._chains.items():
            try:
                code = await self._rpcs[chain_id].call("eth_getCode", chain.dln_source, "latest")
                detail[str(chain_id)] = {"dln_source_has_code": code not in ("0x", None)}
            except Exception as exc:  # a chain that does not answer degrades, never crashes
                detail[str(chain_id)] = {"error": type(exc).__name__}
                state = HealthState.DEGRADED
        return HealthReport(state=state, detail=detail, signer_address=self._signer.address)


async def _release(db: Database, ctx: ExecutionContext, row: Mapping[str, Any]) -> None:
    await evm_nonces.mark(
        db,
        state="released",
        chain_id=row["chain_id"],
        address=row["address"],
        nonce=row["nonce"],
        **evm_nonces.owner_of(ctx),
    )


def _from_observation(seen: ObserveResult) -> RecoverResult:
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


def _not_sent(detail: str) -> RecoverResult:
    """Provably nothing landed under this attempt: qtg may attempt again (a new key)."""
    return RecoverResult(
        outcome=RecoverOutcome.NOT_SUBMITTED, error_code="DEBRIDGE_NOT_SENT", error_detail=detail
    )


def _cancel_key(node_id: str) -> str:
    """The reservation key of the order's cancel, under the fulfilment node's id."""
    return f"{node_id}:cancel"


def _approve_key(ctx: ExecutionContext) -> str:
    """The reservation key of an order's allowance raise."""
    return f"{ctx.request_node_id}:approve"
