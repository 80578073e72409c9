"""The chain's side of "never pay twice" (issues 24 and 43): the one module every
chain executor (evm, ccip, cctp) submits, broadcasts and judges through.

- `submit_signed`: keep the signed bytes (write-ahead), broadcast them in nonce
  order, and classify the answer the same way for every executor: accepted,
  ambiguous (no answer, or a refusal after which the bytes may be in a mempool:
  `refusal_may_be_in_flight`), refused (every URL judged and refused the first
  bytes: nothing left, the nonces go back), or reclaimed (a nonce was taken back
  before anything left: a new attempt, never FAILED).
- `ChainJudge.look` reads what the chain says about one nonce of ours (the
  account's count at the trusted depth and at the tip, the receipts of every
  transaction we signed for it, and — when the count passed the nonce and no
  receipt of ours is readable — the transaction that consumed it, read from its
  block: qtg.providers.evm.consumed) and asks the pure rule
  (qtg.domain.chain_outcome.judge). A consumer qtg never signed holds the signer
  (qtg.providers.evm.holds) and pages; evidence missing past
  MG_EVM_EVIDENCE_ATTENTION_SECONDS pages.
- Acting on the verdict: broadcast the newest signed bytes again, or replace them
  at the same nonce with a fee bump; `pending_observation` / `pending_recovery`
  answer the verdicts every executor answers alike.

Nothing here ever releases a nonce that may have been broadcast.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypedDict

from eth_utils import keccak

from qtg.db import Database
from qtg.domain.chain_outcome import (
    Facts,
    FeeCap,
    Judgement,
    Receipt,
    Verdict,
    bumped,
    fee_over_cap,
    judge,
    refusal_may_be_in_flight,
    trusted_head,
)
from qtg.domain.context import SigningIntent, SignRequest
from qtg.domain.custody import replacement_problem
from qtg.domain.ledger import TransferCall, pays
from qtg.providers.base import (
    ObserveResult,
    ObserveStatus,
    RecoverOutcome,
    RecoverResult,
    RetryLater,
)
from qtg.providers.evm import consumed
from qtg.providers.evm import holds as signer_holds
from qtg.providers.evm import nonces as evm_nonces
from qtg.providers.evm.rpc import EvmRpc, RpcError, RpcUnavailable
from qtg.providers.evm.signer import EvmSigner

log = logging.getLogger("qtg.providers.evm.outcome")

#: How long a transfer whose fee is above its cap waits before it is looked at again.
FEE_CAP_RETRY_SECONDS = 30.0
#: observe sends unmined bytes again at most this often (recovery: at every look).
REBROADCAST_EVERY_SECONDS = 3.0


class _NonceSlot(TypedDict):
    """The keywords that name one nonce in evm_nonces (its functions take them alone)."""

    chain_id: int
    address: str
    nonce: int


class _NodeAttempt(TypedDict):
    """The keywords that name the node attempt a nonce was looked at for."""

    request_node_id: str | None
    attempt_no: int | None


class _RunOwner(TypedDict):
    """The keywords that name the node attempt owning a run's nonces."""

    owner: str
    attempt_no: int


@dataclass(frozen=True, slots=True)
class Look:
    judgement: Judgement
    #: this attempt's signed transactions for the nonce, oldest first
    txs: list[dict[str, Any]] = field(default_factory=list)
    #: the JSON-RPC receipt of the one of ours that was mined (None: none found)
    receipt: dict[str, Any] | None = None


class ChainJudge:
    def __init__(
        self,
        db: Database,
        rpcs: dict[int, EvmRpc],
        signer: EvmSigner,
        *,
        depths: dict[int, int | str],
        default_depth: int,
        fee_caps: dict[int, FeeCap],
        replace_after_seconds: float,
        evidence_attention_seconds: float = 120.0,
    ) -> None:
        self._db = db
        self._rpcs = rpcs
        self._signer = signer
        self._depths = depths
        self._default_depth = default_depth
        self._fee_caps = fee_caps
        self._replace_after = replace_after_seconds
        self._evidence_attention = evidence_attention_seconds
        #: (chain, address, nonce) -> the transaction that consumed it (below the
        #: trusted depth a block does not change: found once, kept)
        self._consumers: dict[tuple[int, str, int], consumed.Consumer] = {}

    @property
    def signer_address(self) -> str:
        return self._signer.address

    # ------------------------------------------------------------------ facts
    async def trusted_head(self, chain_id: int) -> int:
        rpc = self._rpcs[chain_id]
        depth = self._depths.get(chain_id, self._default_depth)
        latest = await rpc.block_number()
        tagged = None
        if isinstance(depth, str):
            block = await rpc.call("eth_getBlockByNumber", depth, False)
            tagged = int(block["number"], 16) if block else -1  # no such block yet: trust none
        return trusted_head(depth, latest, tagged)

    async def look(
        self,
        chain_id: int,
        address: str,
        nonce: int,
        *,
        request_node_id: str | None,
        attempt_no: int | None,
        known_hashes: tuple[str | None, ...] = (),
        effect: Callable[[dict[str, Any]], bool | Awaitable[bool]] | None = None,
        intended: TransferCall | None = None,
    ) -> Look:
        """The verdict on `nonce` for one node attempt. `known_hashes`: hashes the node's
        refs name, None where they name none (rows signed before issue 24 kept no bytes);
        `effect(receipt)` checks a mined transaction did what it was for (an ERC-20
        Transfer log); `intended`: the node's transfer (to, value, calldata), so that a
        consumer qtg has no bytes of that is exactly this node's payment (its bytes lost
        in a failover) is its payment, not a foreign consumer (qtg.domain.ledger.pays,
        the ledger's matching rule)."""
        rpc = self._rpcs[chain_id]
        txs = await evm_nonces.signed_for(
            self._db,
            chain_id=chain_id,
            address=address,
            nonce=nonce,
            request_node_id=request_node_id,
            attempt_no=attempt_no,
        )
        hashes = [t["tx_hash"] for t in txs]
        hashes += [h for h in known_hashes if h and h not in hashes]
        # Counts first, receipts after: a transaction mined between the reads is then
        # seen by its receipt, never mistaken for another transaction's use of the nonce.
        # Both counts in one batch request: the one at the trusted head is of a fixed
        # block, so reading it beside the tip's changes neither.
        head = await self.trusted_head(chain_id)
        count_trusted, count_latest = await rpc.nonces(address, hex(max(head, 0)), "latest")
        receipts: list[Receipt] = []
        found = None

        async def note(tx_hash: str, receipt: dict[str, Any]) -> None:
            status = int(receipt["status"], 16)
            ok: bool | None = None
            if effect is not None and status == 1:
                checked = effect(receipt)
                ok = await checked if inspect.isawaitable(checked) else bool(checked)
            receipts.append(
                Receipt(
                    tx_hash=tx_hash,
                    status=status,
                    block=int(receipt["blockNumber"], 16),
                    effect_ok=ok,
                )
            )

        for tx_hash in reversed(hashes):
            found = await rpc.receipt(tx_hash)
            if found is None:
                continue
            await note(tx_hash, found)
            break  # one nonce, one mined transaction
        where: _NonceSlot = {"chain_id": chain_id, "address": address, "nonce": nonce}
        attempt: _NodeAttempt = {"request_node_id": request_node_id, "attempt_no": attempt_no}
        consumer: consumed.Consumer | None = None
        qtg_signed: list[str] = []
        missing_for = None
        if not receipts and count_trusted > nonce and hashes:
            # No receipt of ours, the nonce used at depth: a missing receipt is no
            # evidence (issue 43). The block that consumed the nonce says who did.
            consumer = await self._consumer(rpc, address, nonce, head)
            if (
                consumer is not None
                and consumer.tx_hash not in hashes
                and intended is not None
                and consumer.tx is not None
                and pays(consumer.tx, intended)
            ):
                # this node's own payment whose signed bytes the ledger lost (an
                # asynchronous failover kept earlier bytes of the node, not these): it
                # is observed as the node's, never called foreign (no hold to clear)
                log.warning(
                    "the nonce's consumer is this node's payment the ledger kept no bytes of",
                    extra={"chain_id": chain_id, "nonce": nonce, "tx_hash": consumer.tx_hash},
                )
                hashes.append(consumer.tx_hash)
            if consumer is not None and consumer.tx_hash in hashes:
                found = await consumed.block_receipt(rpc, consumer.block, consumer.tx_hash)
                if found is not None:
                    await note(consumer.tx_hash, found)
            if consumer is not None and consumer.tx_hash not in hashes:
                rows = await evm_nonces.signed_at_nonce(self._db, **where)
                qtg_signed = [r["tx_hash"] for r in rows]
        if not receipts and count_trusted > nonce and hashes:
            missing_for = await evm_nonces.note_not_landed(self._db, **where, **attempt)
        else:
            await evm_nonces.clear_not_landed(self._db, **where, **attempt)
        newest_age = min((t["age_seconds"] for t in txs), default=0.0)
        verdict = judge(
            Facts(
                nonce=nonce,
                ours=hashes,
                receipts=receipts,
                trusted_head=head,
                count_at_trusted=count_trusted,
                count_latest=count_latest,
                newest_age_seconds=float(newest_age),
                replace_after_seconds=self._replace_after,
                consumer=consumer.tx_hash if consumer else None,
                consumer_block=consumer.block if consumer else None,
                qtg_signed=qtg_signed,
                evidence_missing_seconds=missing_for,
                evidence_attention_seconds=self._evidence_attention,
            )
        )
        await self._act_on_findings(chain_id, address, nonce, hashes, verdict, missing_for)
        return Look(verdict, txs, found)

    async def _consumer(
        self, rpc: EvmRpc, address: str, nonce: int, head: int
    ) -> consumed.Consumer | None:
        key = (rpc.chain_id, address.lower(), nonce)
        known = self._consumers.get(key)
        if known is not None and known.block <= head:
            return known
        found = await consumed.find_consumer(rpc, address, nonce, head)
        if found is not None:
            if len(self._consumers) > 10_000:  # bounded: forget the oldest findings
                self._consumers.pop(next(iter(self._consumers)))
            self._consumers[key] = found
        return found

    async def _act_on_findings(
        self,
        chain_id: int,
        address: str,
        nonce: int,
        hashes: Sequence[str],
        verdict: Judgement,
        missing_for: float | None,
    ) -> None:
        """A foreign consumer holds the signer on every chain (the key is used
        elsewhere, or the ledger lost what it signed) and pages critical; evidence
        missing past its bound pages critical once per nonce."""
        if verdict.verdict is Verdict.FOREIGN_CONSUMER:
            log.critical(
                "a transaction qtg never signed consumed one of its nonces: signer held",
                extra={"chain_id": chain_id, "nonce": nonce, "tx_hash": verdict.consumer},
            )
            await signer_holds.place(
                self._db,
                chain_id=None,
                address=address,
                reason=signer_holds.FOREIGN_NONCE_CONSUMER,
                evidence={
                    "chain_id": chain_id,
                    "nonce": nonce,
                    "consumer": verdict.consumer,
                    "block": verdict.consumer_block,
                    "ours": list(hashes),
                },
                actor="chain_judge",
                body=(
                    f"On chain {chain_id}, nonce {nonce} of {address.lower()} was consumed by "
                    f"{verdict.consumer} (block {verdict.consumer_block}), which qtg never "
                    f"signed; qtg's own were {list(hashes)}. The key is used elsewhere, or "
                    "the ledger lost what it signed: nothing new is signed for this signer "
                    "until a person clears the hold."
                ),
            )
        elif verdict.attention:
            await evm_nonces.page_missing_evidence(
                self._db,
                chain_id=chain_id,
                address=address,
                nonce=nonce,
                hashes=hashes,
                body=(
                    f"The account's count at the trusted depth passed nonce {nonce} "
                    f"{missing_for or 0:.0f} s ago, and neither a receipt of qtg's "
                    f"transactions {list(hashes)} nor the consuming transaction can be read. "
                    "Nothing is re-sent and nothing is failed while the chain cannot say."
                ),
            )

    # ---------------------------------------------------------------- actions
    async def broadcast(self, chain_id: int, raw: str) -> bool:
        """Send signed bytes (again). The same bytes are the same transaction, so this is
        idempotent; any refusal ("already known", "nonce too low", an underpriced
        replacement) or silence is left for the next look to judge. True: accepted."""
        try:
            await self._rpcs[chain_id].call("eth_sendRawTransaction", raw)
        except RpcError as exc:
            if not refusal_may_be_in_flight(exc.message):
                log.info("rebroadcast refused", extra={"chain_id": chain_id, "error": exc.message})
                return False
        except RpcUnavailable as exc:
            log.info("rebroadcast got no answer", extra={"chain_id": chain_id, "error": str(exc)})
            return False
        await evm_nonces.touch_broadcast(self._db, raw_tx_hash(raw))
        return True

    async def rebroadcast(
        self, chain_id: int, txs: list[dict[str, Any]], *, unless_within: float = 0.0
    ) -> None:
        """Send the newest kept bytes again; not when they went out less than
        `unless_within` seconds ago (observe looks every second: a mempool that has
        them does not need them every second)."""
        if not txs:
            return
        since = txs[-1].get("since_broadcast_seconds")
        if since is not None and since < unless_within:
            return
        await self.broadcast(chain_id, txs[-1]["raw"])

    async def replace(
        self,
        chain_id: int,
        txs: list[dict[str, Any]],
        *,
        request_node_id: str | None,
        attempt_no: int | None,
    ) -> str | None:
        """Sign the newest payload again at the same nonce with fees bumped (+12 %, or the
        market's if higher), keep it, broadcast it; its hash. None: the bump would pass
        the chain's fee cap (or the reservation is no longer ours): the old bytes are
        broadcast again instead, and the reaper's attention threshold pages a person."""
        newest = txs[-1]
        payload = dict(newest["payload"])
        # The signer checks what it signs (issue 45): a replacement changes only the fees
        # of bytes we signed. A payload column that no longer says what those bytes say
        # (edited in the database) is never signed again: the kept bytes go out instead.
        why = replacement_problem(payload, signed_fields(newest["raw"]))
        if why is not None:
            log.error(
                "custody: replacement refused, the kept payload is not the signed transaction",
                extra={"chain_id": chain_id, "nonce": payload.get("nonce"), "why": why},
            )
            await self.rebroadcast(chain_id, txs)
            return None
        market_fee, market_tip = await fee_per_gas(self._rpcs[chain_id])
        max_fee = bumped(int(payload["maxFeePerGas"]), market_fee)
        tip = bumped(int(payload["maxPriorityFeePerGas"]), market_tip)
        why = fee_over_cap(self._fee_caps.get(chain_id), max_fee, tip)
        if why is not None:
            log.warning(
                "replacement not sent: fee bump above the cap",
                extra={"chain_id": chain_id, "nonce": payload["nonce"], "why": why},
            )
            await self.rebroadcast(chain_id, txs)
            return None
        payload["maxFeePerGas"], payload["maxPriorityFeePerGas"] = str(max_fee), str(tip)
        raw = await self.sign(payload)
        tx_hash = raw_tx_hash(raw)
        kept = await evm_nonces.record_signed(
            self._db,
            chain_id=chain_id,
            address=payload["from"],
            nonce=int(payload["nonce"]),
            # a provider's cancel bumped is still that cancel (the reaper re-sends it)
            kind="provider_cancel" if newest["kind"] == "provider_cancel" else "replacement",
            tx_hash=tx_hash,
            raw=raw,
            payload=payload,
            request_node_id=request_node_id,
            attempt_no=attempt_no,
        )
        if not kept:
            return None
        log.info(
            "replaced an unmined transaction with a fee bump",
            extra={"chain_id": chain_id, "nonce": payload["nonce"], "tx_hash": tx_hash},
        )
        await self.broadcast(chain_id, raw)
        return tx_hash

    async def fees(self, chain_id: int) -> tuple[int, int]:
        """Market (maxFeePerGas, maxPriorityFeePerGas), or RetryLater when above the
        chain's cap: nothing is signed, the node waits (and is paged past a threshold)."""
        max_fee, tip = await fee_per_gas(self._rpcs[chain_id])
        why = fee_over_cap(self._fee_caps.get(chain_id), max_fee, tip)
        if why is not None:
            raise RetryLater(
                f"chain {chain_id}: {why} (MG_EVM_FEE_CAPS); waiting",
                code="EVM_FEE_ABOVE_CAP",
                retry_after_seconds=FEE_CAP_RETRY_SECONDS,
            )
        return max_fee, tip

    async def sign(self, payload: dict[str, Any]) -> str:
        """Sign a transaction qtg built itself (a replacement of an already-allowed payload
        with only its fees changed, a zero-value gap fill to ourselves): the raw bytes."""
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).hexdigest()
        return await self._signer.sign(
            SignRequest(
                request_id="",
                request_node_id="",
                signing_intent=SigningIntent(
                    action="evm_nonce",
                    asset="",
                    amount="",
                    destination=payload["to"],
                    allowed_payload_hash=digest,
                ),
                payload_format="evm_tx_json",
                payload=text,
                payload_hash=digest,
                metadata={},
            )
        )


async def fee_per_gas(rpc: EvmRpc) -> tuple[int, int]:
    """EIP-1559 (maxFeePerGas, maxPriorityFeePerGas): twice the latest base fee plus the tip,
    so a transaction survives a few full blocks of base-fee rises."""
    history = await rpc.call("eth_feeHistory", "0x1", "latest", [50])
    base_fee = int(history["baseFeePerGas"][-1], 16)
    tip = int(await rpc.call("eth_maxPriorityFeePerGas"), 16)
    return 2 * base_fee + tip, tip


def signed_fields(raw: str) -> dict[str, Any]:
    """The fields of a kept signed transaction (`0x…` hex), read from its bytes, with
    `from` recovered from its signature: what a replacement may be compared with."""
    from eth_account import Account
    from eth_account.typed_transactions import TypedTransaction
    from hexbytes import HexBytes

    try:
        fields = TypedTransaction.from_bytes(HexBytes(raw)).as_dict()
        sender = Account.recover_transaction(raw)
    except Exception:  # not a typed transaction we could have signed: compare to nothing
        return {}
    return {
        "from": sender,
        "to": "0x" + bytes(fields["to"]).hex(),
        "value": fields["value"],
        "data": "0x" + bytes(fields["data"]).hex(),
        "gas": fields["gas"],
        "nonce": fields["nonce"],
        "chainId": fields["chainId"],
    }


def raw_tx_hash(raw: str) -> str:
    """The hash of a signed raw transaction (`0x…` hex): its id on the chain."""
    return "0x" + keccak(bytes.fromhex(raw[2:])).hex()


# ------------------------------------------------------------ the shared submit


class Sent(StrEnum):
    #: a URL took the bytes (all of them, in order)
    ACCEPTED = "accepted"
    #: maybe on their way: no answer, a refusal after which they may be in a mempool
    #: (`refusal_may_be_in_flight`), or a refusal after earlier bytes of the run went
    #: out. The chain decides, through observe; nothing is released.
    AMBIGUOUS = "ambiguous"
    #: every URL judged the first bytes and refused them: nothing left qtg, the run's
    #: nonces are released. The executor's SubmitRejected (a safe FAILED: the refusal
    #: is the proof) follows.
    REFUSED = "refused"
    #: a nonce of the run was no longer this attempt's before anything was kept: nothing
    #: left qtg; a new attempt (RetryLater), never FAILED
    RECLAIMED = "reclaimed"


@dataclass(frozen=True, slots=True)
class Signed:
    """One signed transaction of a run (an allowance raise, then the send that spends
    it; or a lone transfer), as `submit_signed` keeps and broadcasts it."""

    nonce: int
    tx_hash: str
    raw: str
    payload: dict[str, Any]
    request_node_id: str
    attempt_no: int


@dataclass(frozen=True, slots=True)
class Submitted:
    sent: Sent
    #: the node's refusal message (REFUSED, or an ambiguous refusal)
    refusal: str = ""


async def submit_signed(
    db: Database,
    rpc: EvmRpc,
    *,
    chain_id: int,
    address: str,
    run: Sequence[Signed],
    crash_prefix: str = "",
    kind: str = "payment",
) -> Submitted:
    """Keep every signed transaction of `run` (write-ahead, issue 24), then broadcast them
    in nonce order, and say what happened (`Sent`). The run's last item is the node
    attempt's own transaction (the raises before it are keyed `<its key>:approve…`).
    The one submit of the evm, ccip and cctp executors (issue 43: three copies had
    drifted). `crash_prefix` names the test crash points (`<prefix>before_broadcast`,
    `<prefix>after_broadcast`). `kind`: what the kept rows are (`provider_cancel`: a
    provider's cancel lever, which the reaper sends again and never cancels)."""
    for item in run:
        kept = await evm_nonces.record_signed(
            db,
            chain_id=chain_id,
            address=address,
            nonce=item.nonce,
            kind=kind,
            tx_hash=item.tx_hash,
            raw=item.raw,
            payload=item.payload,
            request_node_id=item.request_node_id,
            attempt_no=item.attempt_no,
        )
        if not kept:
            return Submitted(Sent.RECLAIMED)
    # the node attempt owns the run (its raises are keyed `<owner>:approve…`): the send's
    # owner is the key's node part (mark.sql compares it), so a `<node id>:cancel` key's own
    # broadcast and release marks land too
    owner: _RunOwner = {
        "owner": run[-1].request_node_id.split(":")[0],
        "attempt_no": run[-1].attempt_no,
    }
    crash_point(f"{crash_prefix}before_broadcast")
    for index, item in enumerate(run):
        try:
            await rpc.call("eth_sendRawTransaction", item.raw)
        except RpcUnavailable:
            return Submitted(Sent.AMBIGUOUS)
        except RpcError as exc:
            if index > 0 or refusal_may_be_in_flight(exc.message):
                return Submitted(Sent.AMBIGUOUS, exc.message)
            for unsent in run:
                await evm_nonces.mark(
                    db,
                    state="released",
                    chain_id=chain_id,
                    address=address,
                    nonce=unsent.nonce,
                    **owner,
                )
            return Submitted(Sent.REFUSED, exc.message)
    crash_point(f"{crash_prefix}after_broadcast")
    for item in run:
        await evm_nonces.mark(
            db, state="broadcast", chain_id=chain_id, address=address, nonce=item.nonce, **owner
        )
        await evm_nonces.touch_broadcast(db, item.tx_hash)
    return Submitted(Sent.ACCEPTED)


def reclaimed(prefix: str, nonce: int) -> RetryLater:
    """A nonce of the run was taken back before anything left: nothing was sent, nothing
    is wrong with the payment — a new attempt after a short wait (issue 24 item 8)."""
    return RetryLater(
        f"nonce {nonce} was taken back before the broadcast; a new attempt follows",
        code=f"{prefix}_NONCE_RECLAIMED",
        retry_after_seconds=1.0,
    )


# ------------------------------------------------------- verdicts answered alike


def foreign_consumer_detail(judgement: Judgement, nonce: int) -> str:
    return (
        f"nonce {nonce} was consumed by {judgement.consumer} (block "
        f"{judgement.consumer_block}), a transaction qtg never signed: the signer is held "
        "and a person decides (the key is used elsewhere, or the ledger lost what it signed)"
    )


def pending_observation(
    seen: Look, refs: dict[str, Any], prefix: str, nonce: int
) -> ObserveResult | None:
    """The observation of the verdicts every chain executor answers alike (None: the
    executor's own): a foreign consumer → UNKNOWN `<prefix>_FOREIGN_NONCE_CONSUMER` (the
    signer is held, a person decides); evidence not yet readable → PENDING (wait)."""
    verdict = seen.judgement
    if verdict.verdict is Verdict.FOREIGN_CONSUMER:
        return ObserveResult(
            status=ObserveStatus.UNKNOWN,
            provider_refs=refs,
            error_code=f"{prefix}_FOREIGN_NONCE_CONSUMER",
            error_detail=foreign_consumer_detail(verdict, nonce),
        )
    if verdict.verdict is Verdict.AWAIT_EVIDENCE:
        if verdict.consumer is not None:
            refs["tx_hash"] = verdict.consumer  # ours, mined: its receipt is awaited
        return ObserveResult(
            status=ObserveStatus.PENDING,
            provider_refs=refs,
            retry_after_seconds=2.0,
            error_detail=(
                f"chain: nonce {nonce} is used at depth; waiting to read what consumed it"
                + (f" ({verdict.consumer}, ours: awaiting its receipt)" if verdict.consumer else "")
            ),
        )
    return None


def pending_recovery(
    seen: Look, refs: dict[str, Any], prefix: str, nonce: int
) -> RecoverResult | None:
    """`pending_observation` for recover(): a foreign consumer stays UNKNOWN for a person;
    evidence not yet readable goes back to observing (SUBMITTED), never a new attempt."""
    verdict = seen.judgement
    if verdict.verdict is Verdict.FOREIGN_CONSUMER:
        return RecoverResult(
            outcome=RecoverOutcome.UNKNOWN,
            error_code=f"{prefix}_FOREIGN_NONCE_CONSUMER",
            error_detail=foreign_consumer_detail(verdict, nonce),
        )
    if verdict.verdict is Verdict.AWAIT_EVIDENCE:
        if verdict.consumer is not None:
            refs["tx_hash"] = verdict.consumer
        return RecoverResult(outcome=RecoverOutcome.SUBMITTED, provider_refs=refs)
    return None


def crash_point(name: str) -> None:
    """Tests only (QTG_TEST_CRASH_AT): die here like a kill -9, with no clean-up."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


#: Tests only: SIGKILL this process at a named point (see tests/evm).
CRASH_ENV = "QTG_TEST_CRASH_AT"
