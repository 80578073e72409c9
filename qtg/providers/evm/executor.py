"""The `evm` executor (issue 11): `evm_transfer` of native coin or an ERC-20.

Node config `evm`: {"chain_id": int, "token": address | absent (native), "decimals": int};
the intent gives `amount` (decimal, whole units) and `destination`.
The nonce comes from an evm_nonce_reservations row (qtg.providers.evm.nonces);
the signed bytes are kept ahead of the broadcast (evm_signed_transactions), and
what happened is decided by the chain alone under the rule of
qtg.domain.chain_outcome (issue 24): observe and recover never call a
transaction that may have been broadcast FAILED, nor release its nonce, until
the chain has consumed that nonce; meanwhile they broadcast the same bytes
again and, after MG_EVM_REPLACE_AFTER_SECONDS, replace them with a fee bump.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from qtg.db import Database
from qtg.domain.chain_outcome import (
    TRANSFER_TOPIC,
    Verdict,
    balances_problem,
    effect_seen,
    not_landed_proof,
    with_margin,
)
from qtg.domain.context import ExecutionContext
from qtg.domain.evm import (
    erc20_balance_of_data,
    intent_problem,
    is_address,
    nonce_lane_key,
    to_base_units,
)
from qtg.domain.ledger import transfer_call
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
from qtg.providers.evm import ledger as evm_ledger
from qtg.providers.evm import nonces as evm_nonces
from qtg.providers.evm.outcome import (
    REBROADCAST_EVERY_SECONDS,
    ChainJudge,
    Look,
    Sent,
    Signed,
    crash_point,
    pending_observation,
    pending_recovery,
    raw_tx_hash,
    reclaimed,
    submit_signed,
)
from qtg.providers.evm.rpc import EvmRpc, RpcError, RpcUnavailable, transient_rpc_faults
from qtg.providers.evm.signer import EvmSigner

EXECUTOR_KEY = "evm"
ACTION_TYPES = frozenset({"evm_transfer"})


class EvmExecutor:
    key = EXECUTOR_KEY
    action_types = ACTION_TYPES

    def __init__(
        self,
        db: Database,
        rpcs: dict[int, EvmRpc],
        signer: EvmSigner,
        judge: ChainJudge,
        *,
        gas_margin_percent: int = 20,
    ) -> None:
        self._db = db
        self._rpcs = rpcs
        self._signer = signer
        self._judge = judge
        self._gas_margin = gas_margin_percent
        #: tx hash -> why its effect check failed (the evidence the node's detail names)
        self._effect_problems: dict[str, str] = {}

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
        with transient_rpc_faults("preflight"):
            await self._preflight(ctx)

    async def _preflight(self, ctx: ExecutionContext) -> None:
        rpc, t = self._transfer(ctx)
        if await rpc.chain_id_on_chain() != t["chain_id"]:
            raise PreflightError(
                f"the RPC of chain {t['chain_id']} serves another chain", code="EVM_CHAIN_MISMATCH"
            )
        wrong = await rpc.wrong_chain()  # reads fail over to any URL: each must be this chain
        if wrong is not None:
            raise PreflightError(
                f"MG_EVM_RPC_URLS chain {t['chain_id']}: {wrong}", code="EVM_CHAIN_MISMATCH"
            )
        if t["token"] is not None:
            # A contract whose code (or decimals, symbol) drifted may move money anywhere:
            # hold, do not fail, until verify_drift clears the finding (issue 24).
            found = await evm_nonces.open_drift(
                self._db, chain_id=t["chain_id"], subject=t["token"]
            )
            if found:
                checks = ", ".join(f["check_name"] for f in found)
                raise RetryLater(
                    f"token {t['token']} has open drift findings ({checks}); held until cleared",
                    code="EVM_DRIFT_HOLD",
                    retry_after_seconds=60.0,
                )
        if t["token"] is None and await rpc.balance(self._signer.address) < t["value"]:
            if await evm_ledger.adoption(self._db, ctx.request_node_id) is not None:
                return  # paid already (adopted from the chain): nothing to fund
            raise PreflightError(
                "signer balance is below the amount", code="EVM_INSUFFICIENT_FUNDS"
            )

    async def prepare(self, ctx: ExecutionContext) -> PreparedAction:
        with transient_rpc_faults("prepare"):
            return await self._prepare(ctx)

    async def _prepare(self, ctx: ExecutionContext) -> PreparedAction:
        rpc, t = self._transfer(ctx)
        sender = self._signer.address
        adopted = await evm_ledger.adoption(self._db, ctx.request_node_id)
        if adopted is not None:  # its payment is on chain already (issue 43): sign nothing
            return adopted_action(ctx, adopted)
        # the one rule of what a transfer is on chain, also the ledger's matching rule
        built = transfer_call(t["to"], t["token"], t["value"])
        call = {"from": sender, "to": built.to, "value": hex(built.value), "data": built.data}
        # the margin: the state (and so the gas) can change between estimate and mining
        try:
            estimate = int(await rpc.call("eth_estimateGas", call), 16)
        except RpcError as exc:
            if exc.transient:
                raise
            # the chain says this transfer cannot work as built (a revert: e.g. fewer
            # tokens than the amount): permanent, nothing was sent
            raise PreflightError(
                f"eth_estimateGas refused the transfer: {exc.message}", code="EVM_WOULD_REVERT"
            ) from None
        gas = with_margin(estimate, self._gas_margin)
        max_fee, tip = await self._judge.fees(t["chain_id"])  # RetryLater above the cap
        # Everything the transaction can cost, before a nonce is taken: value + gas * maxFee.
        cost = int(call["value"], 16) + gas * max_fee
        have = await rpc.balance(sender)
        if have < cost:
            raise PreflightError(
                f"signer balance {have} wei is below value + gas x maxFeePerGas = {cost} wei",
                code="EVM_INSUFFICIENT_FUNDS",
            )
        try:
            nonce = await self._reserve(ctx, rpc, t["chain_id"])
        except evm_ledger.PaidOnChain as paid:
            return adopted_action(ctx, paid.adopted)
        crash_point("before_signing")  # reserved, nothing signed yet (tests/evm harness)
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

    async def _reserve(self, ctx: ExecutionContext, rpc: EvmRpc, chain_id: int) -> int:
        """The attempt's nonce, once the ledger is in step with the chain (issue 43 item 2):
        a chain ahead of what the ledger knows it signed is reconciled first (the signer
        held, the unknown transactions read and adopted: qtg.providers.evm.ledger); while
        it cannot be, nothing is signed and the node waits (RetryLater)."""

        async def reserve(floor: int, counts: tuple[int, int]) -> int:
            return await evm_nonces.reserve(
                self._db,
                chain_id=chain_id,
                address=self._signer.address,
                request_node_id=ctx.request_node_id,
                attempt_no=ctx.attempt_no,
                chain_floor=floor,
                chain_counts=counts,
            )

        return await evm_ledger.reserve_in_step(self._db, rpc, self._signer.address, reserve)

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
        if prepared.payload_format == ADOPTED_FORMAT:
            # the payment is a chain transaction the ledger adopted: nothing is sent, the
            # node is observed from it (its receipt, depth and effect decide)
            adopted = json.loads(prepared.payload)
            return SubmitResult(
                provider_refs={
                    "chain_id": int(adopted["chainId"]),
                    "tx_hash": adopted["tx_hash"],
                    "from": adopted["from"],
                    "nonce": int(adopted["nonce"]),
                    "adopted": True,
                }
            )
        if not signature:
            raise SubmitRejected("evm_transfer needs the signed transaction", code="EVM_UNSIGNED")
        tx = json.loads(prepared.payload)
        chain_id, nonce = int(tx["chainId"]), int(tx["nonce"])
        tx_hash = raw_tx_hash(signature)
        done = await submit_signed(
            self._db,
            self._rpcs[chain_id],
            chain_id=chain_id,
            address=tx["from"],
            run=[Signed(nonce, tx_hash, signature, tx, ctx.request_node_id, ctx.attempt_no)],
        )
        if done.sent is Sent.RECLAIMED:
            raise reclaimed("EVM", nonce)
        if done.sent is Sent.REFUSED:  # every URL refused the bytes: nothing left qtg
            raise SubmitRejected(
                f"node refused the transaction: {done.refusal}", code="EVM_REJECTED"
            )
        # accepted, or maybe on its way: the chain decides, through observe
        return SubmitResult(
            provider_refs={
                "chain_id": chain_id,
                "tx_hash": tx_hash,
                "from": tx["from"],
                "nonce": nonce,
            }
        )

    async def release_unsubmitted(self, ctx: ExecutionContext) -> None:
        """The dispatcher will not submit this attempt (the rest of a nonce lane after a
        refused or ambiguous submit): give back its reservation if no signed bytes were
        kept for it (kept bytes may have been broadcast: never released)."""
        await evm_nonces.release_unsigned(
            self._db, request_node_id=ctx.request_node_id, attempt_no=ctx.attempt_no
        )

    def _effect(self, ctx: ExecutionContext) -> Callable[[dict[str, Any]], Awaitable[bool]] | None:
        """An ERC-20 transfer's proof (issue 43 item 4): the token's Transfer(signer,
        destination, amount) log in the receipt, AND the sender's and destination's
        balances at the receipt's block - 1 and block moved by exactly the net of the
        token's Transfer logs in that block (a token that logs without moving balances
        fails). None for native coin (the receipt's status is the proof)."""
        try:
            rpc, t = self._transfer(ctx)
        except PreflightError:
            return None
        if t["token"] is None:
            return None
        sender, token = self._signer.address, t["token"]

        async def check(receipt: dict[str, Any]) -> bool:
            if not effect_seen(receipt.get("logs") or [], token, sender, t["to"], t["value"]):
                self._effect_problems[str(receipt["transactionHash"]).lower()] = (
                    "the receipt has no Transfer(signer, destination, amount) log"
                )
                return False
            block = int(receipt["blockNumber"], 16)
            logs = await rpc.call(
                "eth_getLogs",
                {
                    "address": token,
                    "fromBlock": hex(block),
                    "toBlock": hex(block),
                    "topics": [TRANSFER_TOPIC],
                },
            )
            if not isinstance(logs, list):
                raise RpcUnavailable(f"eth_getLogs of block {block} answered {logs!r:.40}")
            owners = [sender, t["to"]]
            reads = [
                ("eth_call", ({"to": token, "data": erc20_balance_of_data(owner)}, hex(at)))
                for at in (block - 1, block)
                for owner in owners
            ]
            answers = [int(a, 16) for a in await rpc.read_many(reads)]
            before = dict(zip(owners, answers[:2], strict=True))
            after = dict(zip(owners, answers[2:], strict=True))
            problem = balances_problem(logs, token, before, after)
            if problem is not None:
                self._effect_problems[str(receipt["transactionHash"]).lower()] = problem
                return False
            return True

        return check

    async def _look(self, ctx: ExecutionContext, refs: dict[str, Any]) -> Look:
        try:
            _, t = self._transfer(ctx)
            intended = transfer_call(t["to"], t["token"], t["value"])
        except PreflightError:
            intended = None  # a node that cannot be built: its consumer cannot be its payment
        return await self._judge.look(
            int(refs["chain_id"]),
            refs["from"],
            int(refs["nonce"]),
            request_node_id=ctx.request_node_id,
            attempt_no=ctx.attempt_no,
            known_hashes=(refs.get("tx_hash"),),
            effect=self._effect(ctx),
            # a consumer that is exactly this transfer is this node's payment (issue 43)
            intended=intended,
        )

    async def observe(self, ctx: ExecutionContext) -> ObserveResult:
        refs = dict(ctx.node_provider_refs)
        chain_id = int(refs["chain_id"])
        where = {"chain_id": chain_id, "address": refs["from"], "nonce": int(refs["nonce"])}
        seen = await self._look(ctx, refs)
        verdict, receipt = seen.judgement.verdict, seen.judgement.receipt
        if receipt is not None:
            refs["tx_hash"] = receipt.tx_hash  # the one of ours that was mined
        artifacts = {"tx_hash": receipt.tx_hash, "block_number": receipt.block} if receipt else {}
        if verdict is Verdict.COMPLETED:
            await evm_nonces.mark(self._db, state="consumed", **where, **evm_nonces.owner_of(ctx))
            return ObserveResult(
                status=ObserveStatus.COMPLETED, provider_refs=refs, artifacts=artifacts
            )
        if verdict is Verdict.FAILED_REVERTED:
            await evm_nonces.mark(self._db, state="consumed", **where, **evm_nonces.owner_of(ctx))
            return ObserveResult(
                status=ObserveStatus.FAILED,
                provider_refs=refs,
                artifacts=artifacts,
                error_code="EVM_REVERTED",
                error_detail="transaction reverted: the chain moved no value",
            )
        if verdict is Verdict.NEEDS_PERSON:
            await evm_nonces.mark(self._db, state="consumed", **where, **evm_nonces.owner_of(ctx))
            why = self._effect_problems.pop(receipt.tx_hash if receipt else "", None)
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                provider_refs=refs,
                artifacts={**artifacts, "effect_problem": why} if why else artifacts,
                error_code="EVM_EFFECT_UNVERIFIED",
                error_detail=(
                    "the token transfer was mined with status 1 but the chain does not show "
                    f"the payment: {why or 'its Transfer log or balances disagree'}; "
                    "money may have gone elsewhere, a person decides"
                ),
            )
        if verdict is Verdict.NOT_LANDED:
            await evm_nonces.mark(self._db, state="consumed", **where, **evm_nonces.owner_of(ctx))
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                provider_refs=refs,
                error_code="EVM_NOT_LANDED",
                error_detail=not_landed_proof(seen.judgement, where["nonce"])
                + " (recovery makes a new attempt)",
            )
        pending = pending_observation(seen, refs, "EVM", where["nonce"])
        if pending is not None:
            return pending
        if verdict is Verdict.REPLACE_WITH_BUMP:
            new_hash = await self._judge.replace(
                chain_id, seen.txs, request_node_id=ctx.request_node_id, attempt_no=ctx.attempt_no
            )
            if new_hash is not None:
                refs["tx_hash"] = new_hash
        elif verdict is Verdict.WAIT_REBROADCAST:
            await self._judge.rebroadcast(
                chain_id, seen.txs, unless_within=REBROADCAST_EVERY_SECONDS
            )
        return ObserveResult(
            status=ObserveStatus.PENDING,
            provider_refs=refs,
            retry_after_seconds=1.0,
            error_detail=f"chain: {verdict.value}",
        )

    async def recover(self, ctx: ExecutionContext) -> RecoverResult:
        """From the chain alone, under the rule of qtg.domain.chain_outcome. When the
        SUBMITTED commit never happened the node has no refs: the attempt's reservation
        and its signed bytes (kept before any broadcast) are the evidence."""
        refs = dict(ctx.node_provider_refs)
        if not refs.get("adopted"):
            adopted = await evm_ledger.adoption(self._db, ctx.request_node_id)
            if adopted is not None:
                # its payment is a chain transaction the ledger adopted (issue 43 item 2):
                # observed from it, never attempted again
                return RecoverResult(
                    outcome=RecoverOutcome.SUBMITTED, provider_refs=adopted_refs(adopted)
                )
        if "tx_hash" not in refs:
            row = await evm_nonces.for_attempt(
                self._db, request_node_id=ctx.request_node_id, attempt_no=ctx.attempt_no
            )
            if row is None:
                return _not_sent("no nonce was reserved for this attempt")
            refs = {
                "chain_id": row["chain_id"],
                "tx_hash": row["tx_hash"],
                "from": row["address"],
                "nonce": row["nonce"],
            }
        where = {
            "chain_id": int(refs["chain_id"]),
            "address": refs["from"],
            "nonce": int(refs["nonce"]),
        }
        seen = await self._look(ctx, refs)
        verdict = seen.judgement.verdict
        if verdict is Verdict.NOTHING_SIGNED:
            # no signed bytes were kept, and they are kept before any broadcast: nothing
            # of this attempt ever left; the nonce is unused, so it goes back
            await evm_nonces.mark(self._db, state="released", **where, **evm_nonces.owner_of(ctx))
            return _not_sent("the attempt's transaction was never broadcast")
        if verdict is Verdict.NOT_LANDED:
            await evm_nonces.mark(self._db, state="consumed", **where, **evm_nonces.owner_of(ctx))
            return RecoverResult(
                outcome=RecoverOutcome.NOT_SUBMITTED,
                error_code="EVM_NOT_LANDED",
                error_detail=not_landed_proof(seen.judgement, where["nonce"]),
            )
        pending = pending_recovery(seen, refs, "EVM", where["nonce"])
        if pending is not None:
            return pending
        if verdict is Verdict.NEEDS_PERSON:
            # mined without the token's Transfer log: no chain evidence will decide it;
            # the node stays UNKNOWN (EVM_EFFECT_UNVERIFIED) for a person
            return RecoverResult(
                outcome=RecoverOutcome.UNKNOWN,
                error_detail="mined without the token's Transfer log: a person must decide",
            )
        if verdict is Verdict.WAIT_REBROADCAST or verdict is Verdict.REPLACE_WITH_BUMP:
            # e.g. a crash after the write-ahead, before the broadcast: send the same bytes
            await self._judge.rebroadcast(where["chain_id"], seen.txs)
        if seen.judgement.receipt is not None:
            refs["tx_hash"] = seen.judgement.receipt.tx_hash
        elif seen.txs:
            refs["tx_hash"] = seen.txs[-1]["tx_hash"]
        # mined or in flight: observe decides (depth, receipt, effect) from here
        return RecoverResult(outcome=RecoverOutcome.SUBMITTED, provider_refs=refs)

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


#: The prepared action of a node whose payment the ledger adopted from the chain.
ADOPTED_FORMAT = "evm_adopted_tx"


def adopted_action(ctx: ExecutionContext, adopted: evm_ledger.Adopted) -> PreparedAction:
    """Nothing to sign: the transaction to observe (its lane is the signer's, like a payment's)."""
    payload = json.dumps(
        {
            "chainId": str(adopted.chain_id),
            "from": adopted.address,
            "nonce": str(adopted.nonce),
            "tx_hash": adopted.tx_hash,
            "block": adopted.block_number,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return PreparedAction(
        action_type=ctx.action_type,
        payload_format=ADOPTED_FORMAT,
        payload=payload,
        payload_hash=hashlib.sha256(payload.encode()).hexdigest(),
        needs_signature=False,
    )


def adopted_refs(adopted: evm_ledger.Adopted) -> dict[str, Any]:
    """A node's refs when its payment is an adopted chain transaction."""
    return {
        "chain_id": adopted.chain_id,
        "tx_hash": adopted.tx_hash,
        "from": adopted.address,
        "nonce": adopted.nonce,
        "adopted": True,
    }


def _not_sent(detail: str) -> RecoverResult:
    """Provably nothing of this attempt left qtg: a new attempt is safe."""
    return RecoverResult(
        outcome=RecoverOutcome.NOT_SUBMITTED, error_code="EVM_NOT_BROADCAST", error_detail=detail
    )
