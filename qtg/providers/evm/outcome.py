"""The chain's side of "never pay twice" (issue 24): gather the facts, act on the verdict.

`ChainJudge.look` reads what the chain says about one nonce of ours (the account's
count at the trusted depth and at the tip, the receipts of every transaction we
signed for it) and asks the pure rule (qtg.domain.chain_outcome.judge). Acting on
the verdict is also here, shared by every chain executor (evm, ccip): broadcast
the newest signed bytes again, or replace them at the same nonce with a fee bump.
Nothing here ever releases a nonce that may have been broadcast.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eth_utils import keccak

from qtg.db import Database
from qtg.domain.chain_outcome import (
    Facts,
    FeeCap,
    Judgement,
    Receipt,
    bumped,
    fee_over_cap,
    judge,
    trusted_head,
)
from qtg.domain.context import SigningIntent, SignRequest
from qtg.providers.base import RetryLater
from qtg.providers.evm import nonces as evm_nonces
from qtg.providers.evm.rpc import EvmRpc, RpcError, RpcUnavailable
from qtg.providers.evm.signer import EvmSigner

log = logging.getLogger("qtg.providers.evm.outcome")

#: How long a transfer whose fee is above its cap waits before it is looked at again.
FEE_CAP_RETRY_SECONDS = 30.0
#: observe sends unmined bytes again at most this often (recovery: at every look).
REBROADCAST_EVERY_SECONDS = 3.0


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
        not_landed_confirm_seconds: float,
    ) -> None:
        self._db = db
        self._rpcs = rpcs
        self._signer = signer
        self._depths = depths
        self._default_depth = default_depth
        self._fee_caps = fee_caps
        self._replace_after = replace_after_seconds
        self._confirm = not_landed_confirm_seconds

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
        known_hashes: tuple[str, ...] = (),
        effect: Callable[[dict[str, Any]], bool] | None = None,
    ) -> Look:
        """The verdict on `nonce` for one node attempt. `known_hashes`: hashes the node's
        refs name (rows signed before issue 24 kept no bytes); `effect(receipt)` checks a
        mined transaction did what it was for (an ERC-20 Transfer log)."""
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
        head = await self.trusted_head(chain_id)
        count_trusted = await rpc.nonce(address, hex(max(head, 0)))
        count_latest = await rpc.nonce(address, "latest")
        receipts: list[Receipt] = []
        found = None
        for tx_hash in reversed(hashes):
            found = await rpc.receipt(tx_hash)
            if found is None:
                continue
            status = int(found["status"], 16)
            receipts.append(
                Receipt(
                    tx_hash=tx_hash,
                    status=status,
                    block=int(found["blockNumber"], 16),
                    effect_ok=effect(found) if effect is not None and status == 1 else None,
                )
            )
            break  # one nonce, one mined transaction
        where = {
            "chain_id": chain_id,
            "address": address,
            "nonce": nonce,
            "request_node_id": request_node_id,
            "attempt_no": attempt_no,
        }
        seen_for = None
        if not receipts and count_trusted > nonce and hashes:
            seen_for = await evm_nonces.note_not_landed(self._db, **where)
        else:
            await evm_nonces.clear_not_landed(self._db, **where)
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
                not_landed_for_seconds=seen_for,
                not_landed_confirm_seconds=self._confirm,
            )
        )
        return Look(verdict, txs, found)

    # ---------------------------------------------------------------- actions
    async def broadcast(self, chain_id: int, raw: str) -> bool:
        """Send signed bytes (again). The same bytes are the same transaction, so this is
        idempotent; any refusal ("already known", "nonce too low", an underpriced
        replacement) or silence is left for the next look to judge. True: accepted."""
        try:
            await self._rpcs[chain_id].call("eth_sendRawTransaction", raw)
        except RpcError as exc:
            if "already known" not in exc.message.lower():
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
            kind="replacement",
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


def raw_tx_hash(raw: str) -> str:
    """The hash of a signed raw transaction (`0x…` hex): its id on the chain."""
    return "0x" + keccak(bytes.fromhex(raw[2:])).hex()
