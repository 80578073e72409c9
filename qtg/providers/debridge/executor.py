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
  was cancelled on the destination and the source chain holds, at the judge's trusted
  depth, the ClaimedOrderCancel that refunded the give amount to qtg's signer. Both
  searches start where the first look pinned them (MG_DEBRIDGE_LOG_SEARCH_BLOCKS behind
  each head, kept in the refs). No order in the refs is UNKNOWN, never FAILED. Anything
  else is pending; an
  order unfulfilled MG_DEBRIDGE_UNFULFILLED_AFTER_SECONDS after its creation is UNKNOWN
  (DEBRIDGE_UNFULFILLED): the movement goes to MANUAL_INTERVENTION (a page); a resume
  has recovery ask the chains again (a late taker completes it).
- The cancel lever (`prove_failure`): operators resolving that node FAILED (four eyes,
  qtg.services.node_attention) do not make it so: qtg sends `sendEvmOrderCancel` on the
  destination (write-ahead, kept bytes as kind provider_cancel, which the nonce reaper
  sends again and never replaces by a self-transfer), and the node is
  FAILED only when the source shows the refund; if a taker fulfilled first, it is paid.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import trio

from qtg.db import Database
from qtg.domain import bounded_json
from qtg.domain.chain_outcome import Verdict
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
    refund_problem,
    send_evm_order_cancel_data,
    state_from_body,
    take_orders_data,
)
from qtg.domain.evm import intent_problem, is_address, to_base_units
from qtg.domain.plan import Plan, PlanNode
from qtg.providers.base import (
    HealthReport,
    HealthState,
    IntentRejected,
    ObserveResult,
    ObserveStatus,
    PreflightError,
    PreparedAction,
    RecoverResult,
)
from qtg.providers.evm import nonces as evm_nonces
from qtg.providers.evm.contract_action import ContractActionExecutor, from_observation
from qtg.providers.evm.outcome import (
    REBROADCAST_EVERY_SECONDS,
    ChainJudge,
    Signed,
    raw_tx_hash,
    submit_signed,
)
from qtg.providers.evm.rpc import EvmRpc, transient_rpc_faults
from qtg.providers.evm.signer import EvmSigner
from qtg.providers.evm.transactions import (
    allowance_raise_call,
    contract_call_tx,
)

log = logging.getLogger("qtg.providers.debridge")

EXECUTOR_KEY = "debridge"
ACTION_TYPES = frozenset({"debridge_send", "debridge_fulfillment"})
DEFAULT_DECIMALS = 6
#: the taker's margin over takeAmount when the template names none (0.1 %)
DEFAULT_MARGIN_BPS = 10
#: createOrder's gas when it cannot be estimated (its allowance raise is not mined yet)
CREATE_GAS = 500_000
#: fresh cancels of one resolution at most, each sent only when the one before was beaten
#: to its nonce by another transaction of ours (a bound on a loop that should never run)
MAX_CANCELS = 5
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
#: where the fulfilment's log searches start on each chain, pinned at its first look
SEARCH_PINS = ("dest_from_block", "source_from_block")


class DebridgeExecutor(ContractActionExecutor):
    key = EXECUTOR_KEY
    action_types = ACTION_TYPES
    prefix = "DEBRIDGE"
    no_effect_code = "DEBRIDGE_NO_ORDER"
    no_effect_detail = (
        "createOrder was mined with status 1 but has no CreatedOrder log of the configured "
        "DlnSource: a person decides"
    )

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
        search_blocks: int = 50_000,
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
        self._search_blocks = search_blocks
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
        # an asset with no token on both of the template's chains can never be ordered
        chains = [
            self._chains.get(cfg.get(key))  # type: ignore[arg-type]
            for key in ("source_chain_id", "destination_chain_id")
            if isinstance(cfg, Mapping)
        ]
        asset = str(intent.get("asset", "")).upper()
        if "asset" in intent and any(c is not None and asset not in c.tokens for c in chains):
            raise IntentRejected(
                "asset",
                f"asset {intent['asset']!r} has no token on both chains in MG_DEBRIDGE_CHAINS",
                code="DEBRIDGE_ASSET_UNKNOWN",
            )

    def plan_problem(self, plan: Plan, node: PlanNode) -> tuple[str, str] | None:
        """At template creation: a debridge_fulfillment learns its order only from a
        direct predecessor's provider_refs (qtg.domain.execution), so one with no
        debridge_send right before it could never observe an order."""
        if node.action_type != "debridge_fulfillment":
            return None
        if any(plan.node(k).action_type == "debridge_send" for k in plan.predecessors(node.key)):
            return None
        return (
            "DEBRIDGE_FULFILLMENT_WITHOUT_SEND",
            "a debridge_fulfillment node needs a debridge_send as a direct predecessor "
            "(it reads the order from that node's provider_refs)",
        )

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
        # raised by the amount where the token can, else approve(current + amount), on the
        # nonce right below the order's
        raise_call = await allowance_raise_call(
            rpc, o["give_token"], owner, source.dln_source, o["give"]
        )
        nonce, approvals = await self._reserve_with_raise(ctx, rpc, source.chain_id, raise_call)
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
        return self._prepared(ctx, tx)

    # ---------------------------------------------------------------- observe
    async def observe(self, ctx: ExecutionContext) -> ObserveResult:
        if ctx.action_type == "debridge_fulfillment":
            return await self._observe_fulfillment(ctx)
        refs = dict(ctx.node_provider_refs)
        seen = await self._look(ctx, refs)
        return await self._settle(ctx, refs, seen, rebroadcast_within=REBROADCAST_EVERY_SECONDS)

    def _effect(
        self, ctx: ExecutionContext, refs: Mapping[str, Any]
    ) -> Callable[[dict[str, Any]], bool] | None:
        source = self._chains[int(refs["chain_id"])].dln_source

        def effect(receipt: dict[str, Any]) -> bool:  # the order's CreatedOrder is there
            return created_from_logs(receipt.get("logs") or [], source) is not None

        return effect

    async def _mined(
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

    async def _search_start(self, chain_id: int) -> int:
        """MG_DEBRIDGE_LOG_SEARCH_BLOCKS behind the head: where a first look starts."""
        return max(0, await self._rpcs[chain_id].block_number() - self._search_blocks)

    async def _pins(self, refs: Mapping[str, Any], source: Chain, dest: Chain) -> dict[str, int]:
        """Where the searches start: the refs' pins (the first look's), else from now. Pinned,
        a fulfilment or refund made while qtg was away is found however far the chains
        have moved on since (a window behind the head would lose it: stuck, never proven)."""
        pins = {k: refs[k] for k in SEARCH_PINS if isinstance(refs.get(k), int)}
        for key, chain in zip(SEARCH_PINS, (dest, source), strict=True):
            if key not in pins:
                pins[key] = await self._search_start(chain.chain_id)
        return pins

    async def _logs(
        self, chain_id: int, address: str, topic: str, from_block: int
    ) -> list[dict[str, Any]]:
        """`address`'s logs of `topic` from `from_block` (the events carry no indexed order
        id: the caller matches the id in their data)."""
        logs = await self._rpcs[chain_id].call(
            "eth_getLogs", {"address": address, "topics": [topic], "fromBlock": hex(from_block)}
        )
        return list(logs or [])

    async def _observe_fulfillment(self, ctx: ExecutionContext) -> ObserveResult:
        refs = {**ctx.provider_context, **ctx.node_provider_refs}
        carried = {k: refs[k] for k in ORDER_REFS if k in refs}
        if "order" not in carried or "order_id" not in carried:
            # no order to ask the chains about is no proof that none exists: the send
            # may have been resolved COMPLETED by operators (its refs hold no order) or
            # sit behind another node; the order may be live and fillable, and FAILED
            # would invite a re-create (a second payment). Undecided: it pages.
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                error_code="DEBRIDGE_NO_ORDER",
                error_detail="debridge_fulfillment has no order in its direct predecessors' "
                "provider_refs (needs a debridge_send right before it): a person decides "
                "from the source chain whether an order was created",
            )
        order, order_id = decode_order(carried["order"]), str(carried["order_id"])
        source = self._chains[int(carried["source_chain_id"])]
        dest = self._chains[int(carried["destination_chain_id"])]
        pins = await self._pins(refs, source, dest)
        carried.update(pins)
        api_state = await self._api_state(order_id)
        raw = await self._rpcs[dest.chain_id].eth_call(
            dest.dln_destination, take_orders_data(order_id)
        )
        taken = first_word(raw)
        if taken in (TAKE_FULFILLED, TAKE_SENT_UNLOCK):
            done = await self._fulfilled(dest, order, order_id, pins["dest_from_block"])
            if done is not None:
                found = {**carried, **done}
                return ObserveResult(
                    status=ObserveStatus.COMPLETED,
                    provider_refs=found,
                    artifacts={**done, "order_id": order_id, "api_state": api_state},
                )
        elif taken == TAKE_SENT_ORDER_CANCEL:
            refund = await self._refunded(source, order, order_id, pins["source_from_block"])
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
            # still fillable, so never FAILED: undecided, which pages (MANUAL_INTERVENTION);
            # a resume has recovery ask again (a late taker completes it), and operators
            # may cancel the order by resolving the node FAILED (prove_failure)
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

    async def _fulfilled(
        self, dest: Chain, order: Order, order_id: str, from_block: int
    ) -> dict[str, Any] | None:
        """The FulfilledOrder of this id whose receipt paid the receiver takeAmount."""
        rpc = self._rpcs[dest.chain_id]
        logs = await self._logs(dest.chain_id, dest.dln_destination, FULFILLED_ORDER, from_block)
        for log in logs:
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

    async def _refunded(
        self, source: Chain, order: Order, order_id: str, from_block: int
    ) -> dict[str, Any] | None:
        """The source's refund of this order, read at the trusted depth (the judge's
        MG_EVM_CONFIRMATIONS, as for qtg's own transactions: a refund a reorg could drop is
        no proof yet): giveOrders says ClaimedCancel and a ClaimedOrderCancel of this id
        paid the give amount to the order's cancel beneficiary, qtg's signer. A refund of
        another amount or to another beneficiary proves nothing: it is logged for a person,
        never FAILED."""
        rpc = self._rpcs[source.chain_id]
        head = await self._judge.trusted_head(source.chain_id)
        if head < 0:
            return None
        at = hex(head)
        raw = await rpc.call(
            "eth_call", {"to": source.dln_source, "data": give_orders_data(order_id)}, at
        )
        if first_word(str(raw)) != GIVE_CLAIMED_CANCEL:
            if first_word(await rpc.eth_call(source.dln_source, give_orders_data(order_id))) == (
                GIVE_CLAIMED_CANCEL
            ):  # at the tip only: a reorg could still drop it
                log.info(
                    "debridge: order %s refunded at the tip of chain %s, not yet at the "
                    "trusted depth (block %s)",
                    order_id,
                    source.chain_id,
                    head,
                    extra={"order_id": order_id, "event": "debridge_refund_awaiting_depth"},
                )
            return None
        logs = await rpc.call(
            "eth_getLogs",
            {
                "address": source.dln_source,
                "topics": [CLAIMED_ORDER_CANCEL],
                "fromBlock": hex(min(from_block, head)),
                "toBlock": at,
            },
        )
        for log_ in logs or []:
            refund = refund_from_logs([log_], source.dln_source, order_id)
            if refund is None:
                continue
            problem = refund_problem(refund, order, self._signer.address)
            if problem is not None:
                log.error(
                    "debridge: order %s's refund %s proves nothing: %s",
                    order_id,
                    log_["transactionHash"],
                    problem,
                )
                continue
            return {
                "refund_tx_hash": log_["transactionHash"],
                "refund_block": int(log_["blockNumber"], 16),
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
        pins = await self._pins(refs, source, dest)
        raw = await self._rpcs[dest.chain_id].eth_call(
            dest.dln_destination, take_orders_data(order_id)
        )
        taken = first_word(raw)
        due = await self._follow_cancel(node_id, attempt_no, dest)
        if taken in (TAKE_FULFILLED, TAKE_SENT_UNLOCK):
            done = await self._fulfilled(dest, order, order_id, pins["dest_from_block"])
            if done is None:
                return None
            proof = {"kind": "debridge_fulfilled", "tx_hash": done["dest_tx_hash"]}
            return "paid", {**proof, "block": done["dest_block"]}, {**refs, **done}
        if taken == TAKE_SENT_ORDER_CANCEL:
            refund = await self._refunded(source, order, order_id, pins["source_from_block"])
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
        if due is not None:
            await self._send_cancel(node_id, attempt_no, dest, order, due)
        return None

    async def _follow_cancel(self, node_id: str, attempt_no: int, dest: Chain) -> int | None:
        """The kept cancels of this resolution under the chain rule (None: one is live or
        mined — the order's status says what it did: mined, or reverted because a taker
        came first). Its bytes go out again until the chain consumes the nonce (a fee bump
        once it waited MG_EVM_REPLACE_AFTER_SECONDS); the reaper's reconcile sends them
        too and never cancels them (kind provider_cancel). n: none sent yet (1), or each
        one's nonce was consumed by another transaction of ours (NOT_LANDED) — a fresh
        cancel is due, under key n (`<node>:cancel:2`, …)."""
        for n in range(1, MAX_CANCELS + 1):
            key = _cancel_key(node_id, n)
            row = await evm_nonces.for_attempt(self._db, request_node_id=key, attempt_no=attempt_no)
            if row is None or not row["tx_hash"]:
                return n
            seen = await self._judge.look(
                dest.chain_id,
                row["address"],
                int(row["nonce"]),
                request_node_id=key,
                attempt_no=attempt_no,
                known_hashes=(row["tx_hash"],),
            )
            verdict = seen.judgement.verdict
            if verdict is Verdict.REPLACE_WITH_BUMP:
                await self._judge.replace(
                    dest.chain_id, seen.txs, request_node_id=key, attempt_no=attempt_no
                )
                return None
            if verdict is Verdict.WAIT_REBROADCAST:
                await self._judge.rebroadcast(
                    dest.chain_id, seen.txs, unless_within=REBROADCAST_EVERY_SECONDS
                )
                return None
            if seen.judgement.receipt is None and verdict is not Verdict.NOT_LANDED:
                return None  # above the trusted depth, or unreadable yet: wait
            if row["state"] != "consumed":
                await evm_nonces.mark(
                    self._db,
                    state="consumed",
                    chain_id=dest.chain_id,
                    address=row["address"],
                    nonce=int(row["nonce"]),
                    owner=node_id,
                    attempt_no=attempt_no,
                )
            consumer = (seen.judgement.receipt.tx_hash if seen.judgement.receipt else "").lower()
            # a zero-value self-transfer the reaper signed at this nonce (before cancels
            # had their own kind) is no cancel of the order either
            filled = any(
                t["tx_hash"].lower() == consumer and t["kind"] == "cancel" for t in seen.txs
            )
            if verdict is not Verdict.NOT_LANDED and not filled:
                return None  # our cancel was mined: the order's status tells the rest
            # beaten to its nonce by another transaction: the next key sends afresh
        return None  # MAX_CANCELS beaten: no more; the resolution waits (and pages)

    async def _send_cancel(
        self, node_id: str, attempt_no: int, dest: Chain, order: Order, n: int
    ) -> None:
        """sendEvmOrderCancel(order, qtg's signer, 0) on the destination: reserved, and its
        bytes kept (kind provider_cancel) before the broadcast (submit_signed);
        `_follow_cancel` from then on."""
        key = _cancel_key(node_id, n)
        rpc = self._rpcs[dest.chain_id]
        owner = self._signer.address
        nonce = await self._reserve(rpc, dest.chain_id, key, attempt_no)
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
            kind="provider_cancel",
        )

    # ---------------------------------------------------------------- recover
    async def recover(self, ctx: ExecutionContext) -> RecoverResult:
        if ctx.action_type == "debridge_fulfillment":  # watching only
            return from_observation(await self.observe(ctx))
        return await self._recover_tx(ctx)

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


def _cancel_key(node_id: str, n: int = 1) -> str:
    """The reservation key of the order's n-th cancel, under the fulfilment node's id (a
    further one only when the one before was beaten to its nonce)."""
    return f"{node_id}:cancel" if n == 1 else f"{node_id}:cancel:{n}"
