"""An operator cannot make FAILED true by saying so (issue 43 item 3): evm_nonce_reaper's
cancel step.

Two operators resolving a node FAILED attest that no money moved. Where the node's
attempt signed transactions that could still be mined (qtg.services.node_attention keeps
such a resolution confirmed but not applied, the node UNKNOWN `FAILURE_NOT_PROVEN`), the
attestation is made true, or found false, on the chain:

- each live reservation of the attempt is replaced at its nonce by a zero-value transfer
  to ourselves (kind `cancel`) with fees bumped over the newest bytes kept for it (what a
  node needs to accept a same-nonce replacement), signed and kept before it leaves like
  any payment; the reservation then points at the cancel, so every later re-send (the
  reconcile step's) sends the cancel, never the payment. A cancel unmined for
  MG_EVM_REPLACE_AFTER_SECONDS is replaced by a further bumped one;
- once the account's count at the trusted depth has passed the nonce, the transaction
  that consumed it is read from the block that consumed it
  (qtg.providers.evm.consumed.find_consumer), and its receipt for its status. A cancel
  → FAILED, proven (the proof names it); the attempt's own payment with status 1 →
  paid: the node goes back to SUBMITTED for the observer, never FAILED (and a critical
  page says the operators were overruled); reverted → FAILED, proven by the revert.
  A consumer qtg never signed, or one that cannot be read, proves nothing: the step
  waits;
- a resolution still waiting after MG_NODE_UNKNOWN_ATTENTION_SECONDS pages (critical
  `failure_not_proven`), once per node attempt.

The node attempt's own reservation decides; its allowance raises are cancelled alongside
(their nonces sit below it). What is applied, and how, is qtg.services.node_attention's
(`settle_awaiting_proof`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from qtg.db import sql_family
from qtg.domain.chain_outcome import (
    PROVIDER_PROVEN_FAILURES,
    bumped,
    fee_over_cap,
    parse_fee_caps,
)
from qtg.domain.execution import build_execution_context
from qtg.providers.evm import nonces as evm_nonces
from qtg.providers.evm.consumed import block_receipt, find_consumer
from qtg.providers.evm.rpc import EvmRpc, RpcError, RpcUnavailable
from qtg.services import node_attention, notifications, progress
from qtg.services.auditing import record_audit
from qtg.services.context import ServiceContext

if TYPE_CHECKING:
    from qtg.providers.evm.outcome import ChainJudge

log = logging.getLogger("qtg.services.evm_cancels")

SQL = sql_family("evm_cancels", "awaiting", "reservations")

#: A cancel still unmined is sent again at most this often.
RESEND_EVERY_SECONDS = 3.0

#: (verdict, proof, provider_refs) of one reservation, or None: not decided yet.
Decision = tuple[str, dict[str, Any], dict[str, Any] | None] | None


async def settle_cancels(ctx: ServiceContext) -> int:
    """One pass over the FAILED resolutions waiting for the chain; how many were decided."""
    judge: ChainJudge | None = getattr(ctx.providers, "evm_judge", None)
    rpcs: dict[int, EvmRpc] = getattr(ctx.providers, "evm_rpcs", {})
    if judge is None:
        return 0
    rows = await ctx.db.fetch(
        SQL.awaiting, {"network_class": ctx.settings.network_class, "limit": 100}
    )
    decided = 0
    for res in rows:
        try:
            if res["action_type"] in PROVIDER_PROVEN_FAILURES:
                decided += await _settle_by_provider(ctx, res)
                continue
            decided += await _settle_one(ctx, judge, rpcs, res)
        except (RpcError, RpcUnavailable) as exc:
            # no answer is no verdict: the resolution waits (and pages past its bound)
            log.warning(
                "cancel step: chain did not answer: %s",
                type(exc).__name__,
                extra={"request_id": str(res["request_id"]), "node_key": res["node_key"]},
            )
            await _page_if_overdue(ctx, res)
        except Exception:
            # one resolution that cannot be worked on (a signer backend's fault, a row this
            # code did not expect) must not stop the others nor the reaper's other steps
            # (issue 44 item 2); it waits, and pages past its bound like any other
            log.exception(
                "cancel step failed for one resolution; it waits",
                extra={"request_id": str(res["request_id"]), "node_key": res["node_key"]},
            )
            await _page_if_overdue(ctx, res)
    return decided


async def _settle_one(
    ctx: ServiceContext, judge: ChainJudge, rpcs: dict[int, EvmRpc], res: Any
) -> int:
    reservations = await ctx.db.fetch(
        SQL.reservations, {"node_id": res["node_id"], "attempt_no": res["attempt_no"]}
    )
    own = str(res["node_id"])
    decisions: dict[str, Decision] = {}
    for row in reservations:
        rpc = rpcs.get(row["chain_id"])
        if rpc is None:
            continue  # a chain this runtime has no client for: another runtime's to do
        decisions[row["request_node_id"]] = await _cancel_and_look(ctx, judge, rpc, row)
    # the attempt's own nonce decides; only raises left live (its own consumed with no
    # kept bytes): the highest of them
    decision = decisions[own] if own in decisions else next(reversed(decisions.values()), None)
    return await _apply(ctx, res, decision)


async def _apply(ctx: ServiceContext, res: Any, decision: Decision) -> int:
    """The chain's verdict applied to the resolution (1), or none yet: it waits, and pages
    past its bound (0)."""
    if decision is None:
        await _page_if_overdue(ctx, res)
        return 0
    verdict, proof, refs = decision
    applied = await node_attention.settle_awaiting_proof(
        ctx.db, res["id"], verdict=verdict, proof=proof, provider_refs=refs
    )
    if applied:
        log.warning(
            "operators' FAILED %s by the chain (%s %s)",
            "proven" if verdict == "failed" else "overruled: the money arrived after all",
            proof["kind"],
            proof["tx_hash"],
            extra={"request_id": str(res["request_id"]), "node_key": res["node_key"]},
        )
    return int(applied)


async def _settle_by_provider(ctx: ServiceContext, res: Any) -> int:
    """A provider-proven node (issue 46): its executor's `prove_failure` cancels what the
    earlier node started and says what the chains show — the refund ("failed"), the
    money delivered after all ("paid"), or nothing yet (None: it waits, and pages)."""
    async with ctx.db.transaction() as tx:
        snap = await progress.load_snapshot(tx, res["request_id"])
    node = snap.node(res["node_key"])
    try:
        executor = ctx.providers.executor_for(node["action_type"], node["executor_key"])
    except Exception:  # no executor here for it: another runtime's to do
        return 0
    prove = getattr(executor, "prove_failure", None)
    if prove is None:
        return 0
    # what the node's observe reads: its predecessors' refs (the order), then its own
    context = build_execution_context(snap.request, node, snap.nodes, in_flight=True)
    refs = {**context.provider_context, **context.node_provider_refs}
    decision: Decision = await prove(str(res["node_id"]), res["attempt_no"], refs)
    return await _apply(ctx, res, decision)


async def _page_if_overdue(ctx: ServiceContext, res: Any) -> None:
    """A resolution undecided past MG_NODE_UNKNOWN_ATTENTION_SECONDS pages, once per node
    attempt (the notification's dedupe key), whatever kept it undecided."""
    if res["waiting_seconds"] >= ctx.settings.node_unknown_attention_seconds:
        async with ctx.db.transaction() as tx:
            await notifications.raise_notification(
                tx, kind="failure_not_proven", severity="critical",
                dedupe_key=f"failure_not_proven:{res['node_id']}:{res['attempt_no']}",
                subject=f"node {res['node_key']} resolved FAILED; the chain has not shown it "
                f"for {res['waiting_seconds']:.0f} s",
                body="Operators resolved the node FAILED while what it signed could still be "
                "mined. Its same-nonce cancel has not been seen consuming the nonce (a fee "
                "above MG_EVM_FEE_CAPS, an RPC that does not answer, or the nonce consumed by "
                "a transaction whose receipt cannot be read). The node stays UNKNOWN "
                "(FAILURE_NOT_PROVEN); it cannot be retried.",
                links={"request_id": str(res["request_id"]), "node_key": res["node_key"]},
                request_id=res["request_id"], node_key=res["node_key"],
            )  # fmt: skip


async def _cancel_and_look(
    ctx: ServiceContext, judge: ChainJudge, rpc: EvmRpc, row: Any
) -> Decision:
    """Make sure a cancel of this reservation's nonce is out, and say what consumed the
    nonce once the chain at the trusted depth shows it (None: not yet, or not readable)."""
    chain_id, address, nonce = row["chain_id"], row["address"], row["nonce"]
    owner = {"request_node_id": row["request_node_id"], "attempt_no": row["attempt_no"]}
    txs = await evm_nonces.signed_for(
        ctx.db, chain_id=chain_id, address=address, nonce=nonce, **owner
    )
    head = await judge.trusted_head(chain_id)
    if await rpc.nonce(address, hex(max(head, 0))) > nonce:
        # consumed at the trusted depth: the transaction that consumed it is read from the
        # block that did (never inferred from a missing receipt)
        consumer = await find_consumer(rpc, address, nonce, head)
        if consumer is None:
            return None  # unreadable for now: wait (and page past the bound)
        kept = next((t for t in txs if t["tx_hash"].lower() == consumer.tx_hash), None)
        if kept is None:
            log.critical(
                "nonce %s of %s on chain %s was consumed by %s, which qtg never signed for "
                "it: the operators' FAILED stays unproven",
                nonce, address, chain_id, consumer.tx_hash,
            )  # fmt: skip
            return None
        receipt = await rpc.receipt(kept["tx_hash"]) or await block_receipt(
            rpc, consumer.block, kept["tx_hash"]
        )
        if receipt is None:
            return None  # its status unreadable for now: wait
        status = int(receipt["status"], 16)
        proof = {
            "chain_id": chain_id, "address": address, "nonce": nonce,
            "tx_hash": kept["tx_hash"], "block": consumer.block, "status": status,
        }  # fmt: skip
        await evm_nonces.mark(
            ctx.db, chain_id=chain_id, address=address, nonce=nonce, state="consumed",
            owner=row["request_node_id"].split(":")[0], attempt_no=row["attempt_no"],
        )  # fmt: skip
        if kept["kind"] == "cancel":
            return "failed", {**proof, "kind": "cancel_mined"}, None
        if status != 1:
            return "failed", {**proof, "kind": "payment_reverted"}, None
        refs = {"chain_id": chain_id, "tx_hash": kept["tx_hash"], "from": address, "nonce": nonce}
        return "paid", {**proof, "kind": "payment_mined"}, refs
    if row["state"] not in ("reserved", "broadcast"):
        return None
    if await rpc.nonce(address, "latest") > nonce:
        return None  # consumed at the tip: its depth decides next pass
    await _keep_cancel_out(ctx, judge, rpc, row, txs)
    return None


async def cancel_nonce(ctx: ServiceContext, judge: ChainJudge, rpc: EvmRpc, row: Any) -> None:
    """The reconcile step's way with a live nonce of a FAILED node (one resolved before
    issue 43, whose bytes nothing may send again): cancel it, so it is no hole either."""
    txs = await evm_nonces.signed_for(
        ctx.db, chain_id=row["chain_id"], address=row["address"], nonce=row["nonce"],
        request_node_id=row["request_node_id"], attempt_no=row["attempt_no"],
    )  # fmt: skip
    await _keep_cancel_out(ctx, judge, rpc, row, txs)


async def _keep_cancel_out(
    ctx: ServiceContext, judge: ChainJudge, rpc: EvmRpc, row: Any, txs: list[dict[str, Any]]
) -> None:
    """Send the newest cancel again, or sign one (the first, or a further bump once the
    last has waited MG_EVM_REPLACE_AFTER_SECONDS)."""
    cancels = [t for t in txs if t["kind"] == "cancel"]
    if cancels and cancels[-1]["age_seconds"] < ctx.settings.evm_replace_after_seconds:
        await judge.rebroadcast(row["chain_id"], cancels, unless_within=RESEND_EVERY_SECONDS)
    elif txs:
        await _sign_cancel(ctx, judge, rpc, row, txs[-1])


async def _sign_cancel(
    ctx: ServiceContext, judge: ChainJudge, rpc: EvmRpc, row: Any, newest: dict[str, Any]
) -> None:
    """Replace the newest kept bytes of a nonce by a zero-value self-transfer, fees bumped
    over them; kept (and the reservation pointed at it) before it leaves."""
    from qtg.providers.evm.outcome import fee_per_gas, raw_tx_hash  # imports this layer's store

    chain_id, nonce = row["chain_id"], row["nonce"]
    if judge.signer_address.lower() != row["address"].lower():
        log.warning("cancel step: nonce %s of %s is not this signer's", nonce, row["address"])
        return
    market_fee, market_tip = await fee_per_gas(rpc)
    max_fee = bumped(int(newest["max_fee_per_gas"]), market_fee)
    tip = bumped(int(newest["max_priority_fee_per_gas"]), market_tip)
    why = fee_over_cap(parse_fee_caps(ctx.settings.evm_fee_caps).get(chain_id), max_fee, tip)
    if why is not None:
        log.warning("cancel not sent: %s (MG_EVM_FEE_CAPS)", why, extra={"chain_id": chain_id})
        return
    payload = {
        "from": judge.signer_address, "to": judge.signer_address, "value": "0", "data": "0x",
        "gas": "21000", "maxFeePerGas": str(max_fee), "maxPriorityFeePerGas": str(tip),
        "nonce": str(nonce), "chainId": str(chain_id), "type": 2,
    }  # fmt: skip
    raw = await judge.sign(payload)
    tx_hash = raw_tx_hash(raw)
    kept = await evm_nonces.record_signed(
        ctx.db, chain_id=chain_id, address=row["address"], nonce=nonce, kind="cancel",
        tx_hash=tx_hash, raw=raw, payload=payload,
        request_node_id=row["request_node_id"], attempt_no=row["attempt_no"],
    )  # fmt: skip
    if not kept:
        return  # the reservation is no longer this attempt's: nothing leaves
    async with ctx.db.transaction() as tx:
        await record_audit(
            tx, actor="evm_nonce_reaper", action="evm_nonce_cancel_signed",
            object_type="evm_nonce", object_id=f"{chain_id}:{row['address']}:{nonce}",
            detail={"tx_hash": tx_hash, "replaces": newest["tx_hash"],
                    "request_node_id": row["request_node_id"], "attempt_no": row["attempt_no"]},
        )  # fmt: skip
    log.warning(
        "nonce %s of %s on chain %s: the payment of a node resolved FAILED is replaced by a "
        "zero-value cancel %s",
        nonce,
        row["address"],
        chain_id,
        tx_hash,
    )
    await judge.broadcast(chain_id, raw)
