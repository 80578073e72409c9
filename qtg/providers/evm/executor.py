"""The `evm` executor (issue 11): `evm_transfer` of native coin or an ERC-20.

Node config `evm`: {"chain_id": int, "token": address | absent (native), "decimals": int};
the intent gives `amount` (decimal, whole units) and `destination`.
The nonce comes from an evm_nonce_reservations row (qtg.services.evm_nonces);
the tx hash is written ahead of the broadcast; `recover` asks the chain only.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
from collections.abc import Mapping
from typing import Any

from eth_utils import keccak

from qtg.db import Database
from qtg.domain.context import ExecutionContext
from qtg.domain.evm import (
    erc20_transfer_data,
    intent_problem,
    is_address,
    nonce_lane_key,
    to_base_units,
)
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
from qtg.providers.evm.rpc import EvmRpc, RpcError
from qtg.providers.evm.signer import EvmLocalSigner
from qtg.services import evm_nonces

#: Tests only: SIGKILL this process at a named point of submit() (see tests/evm).
CRASH_ENV = "QTG_TEST_CRASH_AT"

EXECUTOR_KEY = "evm"
ACTION_TYPES = frozenset({"evm_transfer"})


class EvmExecutor:
    key = EXECUTOR_KEY
    action_types = ACTION_TYPES

    def __init__(
        self, db: Database, rpcs: dict[int, EvmRpc], signer: EvmLocalSigner, confirmations: int
    ) -> None:
        self._db = db
        self._rpcs = rpcs
        self._signer = signer
        self._confirmations = confirmations

    # ---------------------------------------------------------------- helpers
    def _transfer(self, ctx: ExecutionContext) -> tuple[EvmRpc, dict[str, Any]]:
        cfg = dict(ctx.node_config.get("evm") or {})
        chain_id = cfg.get("chain_id")
        rpc = self._rpcs.get(chain_id) if isinstance(chain_id, int) else None
        if rpc is None:
            raise PreflightError(
                f"node config evm.chain_id {chain_id!r} names no chain in MG_EVM_RPC_URLS",
                code="EVM_CHAIN_UNKNOWN",
            )
        destination = ctx.intent.get("destination", cfg.get("destination"))
        if not is_address(destination):
            raise PreflightError(
                f"destination {destination!r} is not an address", code="EVM_BAD_DESTINATION"
            )
        token = cfg.get("token")
        if token is not None and not is_address(token):
            raise PreflightError(f"evm.token {token!r} is not an address", code="EVM_BAD_TOKEN")
        decimals = cfg.get("decimals", 18)
        try:
            value = to_base_units(str(ctx.intent.get("amount", cfg.get("amount"))), int(decimals))
        except ValueError as exc:
            raise PreflightError(str(exc), code="EVM_BAD_AMOUNT") from None
        return rpc, {"chain_id": chain_id, "to": destination, "token": token, "value": value}

    # --------------------------------------------------------------- contract
    def check_intent(self, intent: Mapping[str, Any], node_config: Mapping[str, Any]) -> None:
        """At movement creation: a destination that is no address, or an amount
        the token cannot express, is refused before anyone approves it (preflight
        would only refuse it after approval, failing the movement)."""
        cfg = node_config.get("evm")
        decimals = cfg.get("decimals", 18) if isinstance(cfg, Mapping) else 18
        problem = intent_problem(intent, decimals)
        if problem is not None:
            field, message, code = problem
            raise IntentRejected(field, message, code=code)

    async def preflight(self, ctx: ExecutionContext) -> None:
        rpc, t = self._transfer(ctx)
        if await rpc.chain_id_on_chain() != t["chain_id"]:
            raise PreflightError(
                f"chain at {rpc.url} is not chain {t['chain_id']}", code="EVM_CHAIN_MISMATCH"
            )
        if t["token"] is None and await rpc.balance(self._signer.address) < t["value"]:
            raise PreflightError(
                "signer balance is below the amount", code="EVM_INSUFFICIENT_FUNDS"
            )

    async def prepare(self, ctx: ExecutionContext) -> PreparedAction:
        rpc, t = self._transfer(ctx)
        sender = self._signer.address
        call = (
            {"from": sender, "to": t["to"], "value": hex(t["value"]), "data": "0x"}
            if t["token"] is None
            else {
                "from": sender,
                "to": t["token"],
                "value": "0x0",
                "data": erc20_transfer_data(t["to"], t["value"]),
            }
        )
        gas = int(await rpc.call("eth_estimateGas", call), 16)
        max_fee, tip = await fee_per_gas(rpc)
        nonce = await evm_nonces.reserve(
            self._db,
            chain_id=t["chain_id"],
            address=sender,
            request_node_id=ctx.request_node_id,
            attempt_no=ctx.attempt_no,
            chain_floor=await rpc.nonce(sender, "pending"),
        )
        tx = {
            "from": sender,
            "to": call["to"],
            "value": str(int(call["value"], 16)),
            "data": call["data"],
            "gas": str(gas),
            "maxFeePerGas": str(max_fee),
            "maxPriorityFeePerGas": str(tip),
            "nonce": str(nonce),
            "chainId": str(t["chain_id"]),
            "type": 2,
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

    def lane_key(self, prepared: PreparedAction) -> str:
        """The nonce lane (issue 15): one sender on one chain. A batching
        dispatcher submits one lane's transactions in the order their nonces
        were reserved (prepare order)."""
        return nonce_lane_key(json.loads(prepared.payload))

    async def submit(
        self,
        ctx: ExecutionContext,
        prepared: PreparedAction,
        signature: str | None,
        idempotency_key: str,
    ) -> SubmitResult:
        if not signature:
            raise SubmitRejected("evm_transfer needs the signed transaction", code="EVM_UNSIGNED")
        tx = json.loads(prepared.payload)
        chain_id, nonce = int(tx["chainId"]), int(tx["nonce"])
        tx_hash = raw_tx_hash(signature)
        where = {"chain_id": chain_id, "address": tx["from"], "nonce": nonce}
        await evm_nonces.record_tx_hash(self._db, tx_hash=tx_hash, **where)
        refs = {"chain_id": chain_id, "tx_hash": tx_hash, "from": tx["from"], "nonce": nonce}
        crash_point("before_broadcast")
        try:
            await self._rpcs[chain_id].call("eth_sendRawTransaction", signature)
        except RpcError as exc:
            if "already known" in exc.message.lower():
                return SubmitResult(provider_refs=refs)  # the same bytes are already in flight
            if "nonce too low" in exc.message.lower():
                raise  # unknown: maybe our own earlier broadcast; recovery reads the chain
            await evm_nonces.mark(self._db, state="released", **where)
            raise SubmitRejected(
                f"node refused the transaction: {exc.message}", code="EVM_REJECTED"
            ) from None
        crash_point("after_broadcast")
        await evm_nonces.mark(self._db, state="broadcast", **where)
        return SubmitResult(provider_refs=refs)

    async def observe(self, ctx: ExecutionContext) -> ObserveResult:
        refs = ctx.node_provider_refs
        rpc = self._rpcs[int(refs["chain_id"])]
        receipt = await rpc.receipt(refs["tx_hash"])
        if receipt is None:
            return await not_mined(
                rpc, refs["tx_hash"], "EVM_TX_DROPPED", "transaction is neither mined nor pending"
            )
        mined_at = int(receipt["blockNumber"], 16)
        if await rpc.block_number() - mined_at < self._confirmations - 1:
            return ObserveResult(status=ObserveStatus.PENDING, retry_after_seconds=1.0)
        where = {
            "chain_id": int(refs["chain_id"]),
            "address": refs["from"],
            "nonce": int(refs["nonce"]),
        }
        await evm_nonces.mark(self._db, state="consumed", **where)
        artifacts = {"tx_hash": refs["tx_hash"], "block_number": mined_at}
        if int(receipt["status"], 16) != 1:
            return ObserveResult(
                status=ObserveStatus.FAILED,
                artifacts=artifacts,
                error_code="EVM_REVERTED",
                error_detail="transaction reverted",
            )
        return ObserveResult(status=ObserveStatus.COMPLETED, artifacts=artifacts)

    async def recover(self, ctx: ExecutionContext) -> RecoverResult:
        """From the chain alone: the receipt or mempool entry by hash, else whether the
        nonce was used. When the SUBMITTED commit never happened the node has no refs;
        the reservation's write-ahead tx_hash is then the evidence to look up."""
        refs = dict(ctx.node_provider_refs)
        if "tx_hash" not in refs:
            row = await evm_nonces.for_attempt(
                self._db, request_node_id=ctx.request_node_id, attempt_no=ctx.attempt_no
            )
            if row is None:
                return _not_sent("no nonce was reserved for this attempt")
            where = {"chain_id": row["chain_id"], "address": row["address"], "nonce": row["nonce"]}
            if row["tx_hash"] is None:  # never signed for broadcast
                await evm_nonces.mark(self._db, state="released", **where)
                return _not_sent("the attempt's transaction was never broadcast")
            refs = {
                "chain_id": row["chain_id"],
                "tx_hash": row["tx_hash"],
                "from": row["address"],
                "nonce": row["nonce"],
            }
        rpc = self._rpcs[int(refs["chain_id"])]
        if await rpc.transaction(refs["tx_hash"]) is not None:
            return RecoverResult(outcome=RecoverOutcome.SUBMITTED, provider_refs=refs)
        where = {
            "chain_id": int(refs["chain_id"]),
            "address": refs["from"],
            "nonce": int(refs["nonce"]),
        }
        if await rpc.nonce(refs["from"], "latest") > int(refs["nonce"]):
            # the nonce went to another transaction: ours can never be mined
            await evm_nonces.mark(self._db, state="consumed", **where)
        else:
            await evm_nonces.mark(self._db, state="released", **where)
        return _not_sent("the chain has no transaction for this attempt")

    async def health(self) -> HealthReport:
        detail: dict[str, Any] = {}
        state = HealthState.HEALTHY
        for chain_id, rpc in self._rpcs.items():
            try:
                detail[str(chain_id)] = {"block": await rpc.block_number()}
            except Exception as exc:  # a chain that does not answer degrades, never crashes
                detail[str(chain_id)] = {"error": type(exc).__name__}
                state = HealthState.DEGRADED
        return HealthReport(state=state, detail=detail, signer_address=self._signer.address)


async def fee_per_gas(rpc: EvmRpc) -> tuple[int, int]:
    """EIP-1559 (maxFeePerGas, maxPriorityFeePerGas): twice the latest base fee plus the tip,
    so a transaction survives a few full blocks of base-fee rises."""
    history = await rpc.call("eth_feeHistory", "0x1", "latest", [50])
    base_fee = int(history["baseFeePerGas"][-1], 16)
    tip = int(await rpc.call("eth_maxPriorityFeePerGas"), 16)
    return 2 * base_fee + tip, tip


def raw_tx_hash(raw: str) -> str:
    """The hash of a signed raw transaction (`0x…` hex): its id on the chain."""
    return "0x" + keccak(bytes.fromhex(raw[2:])).hex()


async def not_mined(rpc: EvmRpc, tx_hash: str, code: str, detail: str) -> ObserveResult:
    """An observation of a transaction with no receipt yet: PENDING while the node
    still knows it, UNKNOWN (`code`, `detail`) once it is neither mined nor pending."""
    if await rpc.transaction(tx_hash) is None:
        return ObserveResult(status=ObserveStatus.UNKNOWN, error_code=code, error_detail=detail)
    return ObserveResult(status=ObserveStatus.PENDING, retry_after_seconds=1.0)


def _not_sent(detail: str) -> RecoverResult:
    return RecoverResult(
        outcome=RecoverOutcome.FAILED, error_code="EVM_NOT_BROADCAST", error_detail=detail
    )


def crash_point(name: str) -> None:
    """Tests only (QTG_TEST_CRASH_AT): die here like a kill -9, with no clean-up."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
