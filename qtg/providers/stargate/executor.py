"""The `stargate` executor (issue 46): a Stargate V2 send and its LayerZero delivery.

Node config `stargate` (on the send): {"source_chain_id": int, "destination_chain_id":
int, "decimals": int (6), "max_fee_bps": int (0)}; the intent gives `amount` (whole
tokens, what leaves the source) and `destination` (the recipient on the destination
chain). The send refuses to go when the pool's quoteOFT would deliver less than
amount less max_fee_bps (SendParam.minAmountLD makes the chain refuse it too).

- stargate_send (action): an allowance raise for the source pool when the standing
  allowance is short (signed in prepare, broadcast just below the send's nonce), then
  `send(SendParam, MessagingFee, refundAddress)` paying quoteSend's native fee. The
  tx hashes are written ahead of the broadcast (evm_nonce_reservations) and the
  consuming transaction decides (qtg.providers.evm.outcome); the observation reads
  the pool's OFTSent and the endpoint's PacketSent from the receipt: the LayerZero
  GUID, the nonce, what was taken and what will be delivered.
- stargate_delivery (observe): the destination pool's OFTReceived of that GUID, and
  in its receipt the token's Transfer from the pool to the recipient of exactly the
  promised amount. Not delivered yet is PENDING; not delivered
  MG_STARGATE_UNDELIVERED_AFTER_SECONDS after the send's block it is UNKNOWN
  (STARGATE_UNDELIVERED): beside the completed send the movement pages at once
  (MANUAL_INTERVENTION); resumed, recovery asks the destination again (a late delivery
  still completes it). Never FAILED: the
  money left the source and a LayerZero message cannot be cancelled — the
  destination alone can still pay it (operators cannot resolve it FAILED either,
  qtg.domain.chain_outcome.NEVER_FAILED_BY_OPERATORS).

Recovery decides from the chains (node_recovery's Stargate arm): the send by its
write-ahead transaction (one send per movement: a second attempt happens only when
the first provably cannot land), the delivery by the destination's logs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from qtg.db import Database
from qtg.domain.context import ExecutionContext
from qtg.domain.evm import intent_problem, is_address, to_base_units
from qtg.domain.stargate import (
    OFT_RECEIVED,
    Chain,
    chain_for_eid,
    native_fee_from,
    oft_receipt_from,
    quote_oft_data,
    quote_send_data,
    received_from_logs,
    send_data,
    send_param,
    sent_from_logs,
    transferred,
)
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
from qtg.providers.evm.contract_action import ContractActionExecutor, from_observation
from qtg.providers.evm.outcome import (
    REBROADCAST_EVERY_SECONDS,
    ChainJudge,
)
from qtg.providers.evm.rpc import EvmRpc, transient_rpc_faults
from qtg.providers.evm.signer import EvmSigner
from qtg.providers.evm.transactions import (
    allowance_raise_call,
    contract_call_tx,
)

EXECUTOR_KEY = "stargate"
ACTION_TYPES = frozenset({"stargate_send", "stargate_delivery"})
TOKEN_DECIMALS = 6
#: send's gas when it cannot be estimated (its allowance raise is not mined yet)
SEND_GAS = 400_000
#: what the send carries forward to the delivery
CARRIED = (
    "source_chain_id",
    "destination_chain_id",
    "src_eid",
    "dst_eid",
    "guid",
    "lz_nonce",
    "send_tx_hash",
    "recipient",
    "amount_sent",
    "amount_received",
    "sent_at",
)


class StargateExecutor(ContractActionExecutor):
    key = EXECUTOR_KEY
    action_types = ACTION_TYPES
    prefix = "STARGATE"
    no_effect_code = "STARGATE_NO_PACKET"
    no_effect_detail = (
        "the send was mined with status 1 but has no OFTSent and PacketSent of the "
        "configured pool and endpoint: a person decides"
    )

    def __init__(
        self,
        db: Database,
        rpcs: dict[int, EvmRpc],
        signer: EvmSigner,
        judge: ChainJudge,
        chains: dict[int, Chain],
        *,
        delivery_poll: float,
        search_blocks: int = 50_000,
        undelivered_after: float = 1800.0,
    ) -> None:
        self._db = db
        self._rpcs = rpcs
        self._signer = signer
        self._judge = judge
        self._chains = chains
        self._delivery_poll = delivery_poll
        self._search_blocks = search_blocks
        self._undelivered_after = undelivered_after

    # ---------------------------------------------------------------- helpers
    def _chain(self, chain_id: Any, what: str) -> Chain:
        chain = self._chains.get(chain_id) if isinstance(chain_id, int) else None
        if chain is None or chain_id not in self._rpcs:
            raise PreflightError(
                f"stargate.{what} {chain_id!r} names no chain in MG_STARGATE_CHAINS "
                "and MG_EVM_RPC_URLS",
                code="STARGATE_CHAIN_UNKNOWN",
            )
        return chain

    def _send(self, ctx: ExecutionContext) -> tuple[Chain, Chain, dict[str, Any]]:
        cfg = dict(ctx.node_config.get("stargate") or {})
        source = self._chain(cfg.get("source_chain_id"), "source_chain_id")
        dest = self._chain(cfg.get("destination_chain_id"), "destination_chain_id")
        if source.chain_id == dest.chain_id:
            raise PreflightError(
                "stargate: source and destination chains are the same",
                code="STARGATE_SAME_CHAIN",
            )
        recipient = ctx.intent.get("destination", cfg.get("destination"))
        if not is_address(recipient):
            raise PreflightError(
                f"destination {recipient!r} is not an address", code="STARGATE_BAD_DESTINATION"
            )
        try:
            amount = to_base_units(
                str(ctx.intent.get("amount", cfg.get("amount"))),
                int(cfg.get("decimals", TOKEN_DECIMALS)),
            )
        except ValueError as exc:
            raise PreflightError(str(exc), code="STARGATE_BAD_AMOUNT") from None
        fee_bps = cfg.get("max_fee_bps", 0)
        if not isinstance(fee_bps, int) or isinstance(fee_bps, bool) or not 0 <= fee_bps < 10_000:
            raise PreflightError(
                f"stargate.max_fee_bps {fee_bps!r} is not 0..9999", code="STARGATE_BAD_FEE_BOUND"
            )
        minimum = amount - amount * fee_bps // 10_000
        return source, dest, {"recipient": recipient.lower(), "amount": amount, "min": minimum}

    # --------------------------------------------------------------- contract
    def check_intent(self, intent: Mapping[str, Any], node_config: Mapping[str, Any]) -> None:
        """At movement creation: a recipient that is no address, or an amount the token
        cannot express, is refused before anyone approves it."""
        cfg = node_config.get("stargate")
        decimals = cfg.get("decimals", TOKEN_DECIMALS) if isinstance(cfg, Mapping) else 6
        problem = intent_problem(intent, decimals)
        if problem is not None:
            field, message, code = problem
            raise IntentRejected(field, message, code=code.replace("EVM_", "STARGATE_"))

    async def preflight(self, ctx: ExecutionContext) -> None:
        with transient_rpc_faults("preflight"):  # a wait, not a failure (issue 24)
            if ctx.action_type != "stargate_send":
                return
            source, _, _ = self._send(ctx)
            rpc = self._rpcs[source.chain_id]
            if await rpc.chain_id_on_chain() != source.chain_id:
                raise PreflightError(
                    f"chain at {rpc.url} is not chain {source.chain_id}",
                    code="STARGATE_CHAIN_MISMATCH",
                )

    async def prepare(self, ctx: ExecutionContext) -> PreparedAction:
        with transient_rpc_faults("prepare"):  # a wait, not a failure (issue 24)
            return await self._prepare(ctx)

    async def _prepare(self, ctx: ExecutionContext) -> PreparedAction:
        source, dest, s = self._send(ctx)
        rpc = self._rpcs[source.chain_id]
        owner = self._signer.address
        param = send_param(dest.eid, s["recipient"], s["amount"], s["min"])
        _, received = oft_receipt_from(await rpc.eth_call(source.pool, quote_oft_data(param)))
        if received < s["min"]:
            raise PreflightError(
                f"the pool would deliver {received} of {s['amount']}, below the bound "
                f"{s['min']} (stargate.max_fee_bps)",
                code="STARGATE_FEE_ABOVE_BOUND",
            )
        native_fee = native_fee_from(await rpc.eth_call(source.pool, quote_send_data(param)))
        # raised by the amount (increaseAllowance where the token has it) on the nonce right
        # below the send: nothing of ours runs between them (as the cctp burn)
        raise_call = await allowance_raise_call(rpc, source.token, owner, source.pool, s["amount"])
        nonce, approvals = await self._reserve_with_raise(ctx, rpc, source.chain_id, raise_call)
        call = {
            "from": owner,
            "to": source.pool,
            "data": send_data(param, native_fee, owner),
            "value": hex(native_fee),
        }
        tx = await contract_call_tx(
            rpc, self._judge, source.chain_id, call, nonce, gas=SEND_GAS if approvals else None
        )
        tx["qtg"] = {
            "destination_chain_id": dest.chain_id,
            "dst_eid": dest.eid,
            "recipient": s["recipient"],
            "amount": str(s["amount"]),
            "min_amount": str(s["min"]),
            "native_fee": str(native_fee),
            "approvals": approvals,
        }
        return self._prepared(ctx, tx)

    # ---------------------------------------------------------------- observe
    async def observe(self, ctx: ExecutionContext) -> ObserveResult:
        if ctx.action_type == "stargate_delivery":
            return await self._observe_delivery(ctx)
        refs = dict(ctx.node_provider_refs)
        seen = await self._look(ctx, refs)
        return await self._settle(ctx, refs, seen, rebroadcast_within=REBROADCAST_EVERY_SECONDS)

    def _effect(
        self, ctx: ExecutionContext, refs: Mapping[str, Any]
    ) -> Callable[[dict[str, Any]], bool]:
        """Mined with status 1 counts only with the pool's OFTSent and the endpoint's packet."""
        source = self._chains[int(refs["chain_id"])]

        def effect(receipt: dict[str, Any]) -> bool:
            return sent_from_logs(receipt.get("logs") or [], source) is not None

        return effect

    async def _mined(
        self, ctx: ExecutionContext, refs: dict[str, Any], receipt: dict[str, Any]
    ) -> ObserveResult:
        await self._consume(ctx, refs)
        block = int(receipt["blockNumber"], 16)
        artifacts = {"send_tx_hash": refs["tx_hash"], "block_number": block}
        if int(receipt["status"], 16) != 1:
            # the proof: the send's own (consuming) transaction reverted, and a reverted
            # send reverts its transferFrom and its endpoint fee with it: nothing moved
            return ObserveResult(
                status=ObserveStatus.FAILED,
                provider_refs=refs,
                artifacts=artifacts,
                error_code="STARGATE_SEND_REVERTED",
                error_detail=f"send {refs['tx_hash']} reverted in block {block} (receipt "
                "status 0): no token left the source and no packet was sent",
            )
        source = self._chains[int(refs["chain_id"])]
        sent = sent_from_logs(receipt.get("logs") or [], source)
        dest = chain_for_eid(self._chains, sent.packet.dst_eid) if sent else None
        if sent is None or dest is None:
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                error_code="STARGATE_NO_PACKET",
                error_detail="the mined send has no packet of the configured pool and endpoint "
                "to a chain in MG_STARGATE_CHAINS",
            )
        header = await self._rpcs[source.chain_id].call("eth_getBlockByNumber", hex(block), False)
        done = {
            "source_chain_id": source.chain_id,
            "destination_chain_id": dest.chain_id,
            "src_eid": sent.packet.src_eid,
            "dst_eid": sent.packet.dst_eid,
            "guid": sent.packet.guid,
            "lz_nonce": sent.packet.nonce,
            "send_tx_hash": refs["tx_hash"],
            "recipient": sent.packet.to,
            "amount_sent": str(sent.amount_sent),
            "amount_received": str(sent.amount_received),
            # the send's block time: how long the message has been in flight
            "sent_at": int(header["timestamp"], 16),
        }
        return ObserveResult(
            status=ObserveStatus.COMPLETED,
            provider_refs=done,
            artifacts={**artifacts, **done},
        )

    async def _observe_delivery(self, ctx: ExecutionContext) -> ObserveResult:
        refs = {**ctx.provider_context, **ctx.node_provider_refs}
        guid, chain_id = refs.get("guid"), refs.get("destination_chain_id")
        dest = self._chains.get(chain_id) if isinstance(chain_id, int) else None
        if not isinstance(guid, str) or dest is None or dest.chain_id not in self._rpcs:
            # never FAILED: a send may have moved money; what it was must be read by a person
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                error_code="STARGATE_NO_SEND",
                error_detail="stargate_delivery needs a stargate_send before it (its GUID) to "
                f"a chain in MG_STARGATE_CHAINS and MG_EVM_RPC_URLS (got {chain_id!r})",
            )
        rpc = self._rpcs[dest.chain_id]
        carried = {k: refs[k] for k in CARRIED if k in refs}
        # where the search starts, pinned at the first look (the delivery cannot come
        # before the send): found however long the runtime was away, never out of a window
        from_block = refs.get("search_from_block")
        if not isinstance(from_block, int):
            from_block = max(0, await rpc.block_number() - self._search_blocks)
        carried["search_from_block"] = from_block
        pending = ObserveResult(
            status=ObserveStatus.PENDING,
            provider_refs=carried,
            retry_after_seconds=self._delivery_poll,
            error_detail=f"LayerZero message {guid} not delivered on chain {dest.chain_id} yet",
        )
        logs = await rpc.call(
            "eth_getLogs",
            {"address": dest.pool, "topics": [OFT_RECEIVED, guid], "fromBlock": hex(from_block)},
        )
        if not logs:  # not delivered yet: never FAILED, the money is in flight
            return self._undelivered(pending, refs.get("sent_at"))
        receipt = await rpc.receipt(logs[0]["transactionHash"])
        if receipt is None:
            return pending  # the log is there, its receipt shortly
        recipient, amount = refs["recipient"], int(refs["amount_received"])
        found = received_from_logs(receipt.get("logs") or [], dest, guid)
        paid = transferred(receipt.get("logs") or [], dest.token, dest.pool, recipient)
        delivered = {
            **carried,
            "delivery_tx_hash": receipt["transactionHash"],
            "delivery_block": int(receipt["blockNumber"], 16),
        }
        if found != (recipient, amount) or paid != amount:
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                provider_refs=delivered,
                error_code="STARGATE_DELIVERY_MISMATCH",
                error_detail=f"the delivery of {guid} paid {paid} to {recipient} "
                f"(OFTReceived {found}); the send promised {amount}: a person decides",
            )
        return ObserveResult(
            status=ObserveStatus.COMPLETED,
            provider_refs=delivered,
            artifacts={**delivered, "delivered": str(paid), "token": dest.token},
        )

    def _undelivered(self, pending: ObserveResult, sent_at: Any) -> ObserveResult:
        """Past MG_STARGATE_UNDELIVERED_AFTER_SECONDS since the send's block, undecided
        (UNKNOWN: the movement pages, and recover() asks again when resumed); before,
        pending. A send observed without `sent_at` has no bound: pending."""
        if not isinstance(sent_at, int) or time.time() - sent_at < self._undelivered_after:
            return pending
        return ObserveResult(
            status=ObserveStatus.UNKNOWN,
            provider_refs=pending.provider_refs,
            error_code="STARGATE_UNDELIVERED",
            error_detail=f"{pending.error_detail} {time.time() - sent_at:.0f} s after the "
            "send's block; the message cannot be cancelled and may still be delivered: "
            "never FAILED",
        )

    # ---------------------------------------------------------------- recover
    async def recover(self, ctx: ExecutionContext) -> RecoverResult:
        if ctx.action_type == "stargate_delivery":  # watching only
            return from_observation(await self.observe(ctx))
        return await self._recover_tx(ctx)

    async def health(self) -> HealthReport:
        detail: dict[str, Any] = {}
        state = HealthState.HEALTHY
        for chain_id, chain in self._chains.items():
            try:
                code = await self._rpcs[chain_id].call("eth_getCode", chain.pool, "latest")
                detail[str(chain_id)] = {"pool_has_code": code not in ("0x", None)}
            except Exception as exc:  # a chain that does not answer degrades, never crashes
                detail[str(chain_id)] = {"error": type(exc).__name__}
                state = HealthState.DEGRADED
        return HealthReport(state=state, detail=detail, signer_address=self._signer.address)
