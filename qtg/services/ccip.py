"""ccip_stranded_reaper (issue 12, reference §11): the worker over CCIP send intents.

The intents themselves — the write-ahead row of one ccipSend and its moves — are
the executor's store, qtg/providers/ccip/intents.py (the providers' floor); both
use the queries in sql/ccip/.

ccip_stranded_reaper: intents unresolved past MG_CCIP_SEND_INTENT_STRANDED_SECONDS
are claimed FOR UPDATE SKIP LOCKED (with their node, so a node another worker
holds is left to it, and two runtimes never take one intent), leased and
released before the chain is asked (no lock across an RPC: issue 44 item 3),
and resolved from
the chain where it can tell (`qtg.domain.ccip.reap_verdict`): mined → the message
id is attached; the nonce used by another transaction → released, and
node_recovery is woken for the node; otherwise (a chain that does not answer
included) stranded, with a request_attention event and a critical notification —
never dropped silently. The worker is in the core fail-fast group: any other
error is raised, not swallowed.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from qtg.db import Database, Tx, sql_family
from qtg.domain.ccip import (
    Execution,
    Verdict,
    execution_from_block,
    execution_from_logs,
    execution_topics,
    message_id_from_logs,
    parse_lanes,
    reap_verdict,
)
from qtg.providers.ccip.intents import DELIVERABLE, UNRESOLVED, S, move
from qtg.providers.evm import nonces as evm_nonces
from qtg.providers.evm.consumed import find_consumer
from qtg.providers.evm.rpc import RpcError, RpcUnavailable
from qtg.services.context import ServiceContext

SQL = sql_family(
    "ccip",
    "claim_unresolved",
    "strand",
    "wake_recovery",
    "list_intents",
    "lease_claimed",
    "relock",
)

log = logging.getLogger("qtg.services.ccip")

REAP_BATCH = 100


async def list_intents(db: Database, request_id: Any) -> list[dict[str, Any]]:
    async with db.transaction() as tx:
        rows = await tx.fetch(SQL.list_intents, {"request_id": request_id})
    return [dict(r) for r in rows]


async def reap_stranded_intents(ctx: ServiceContext) -> int:
    """The ccip_stranded_reaper pass: returns how many intents it resolved or stranded.

    No lock is held across a chain lookup (issue 44 item 3): the claim leases its
    intents (reap_lease, migrations/0058) and commits; each intent's lookups run
    with no transaction open; each verdict is written in a short transaction of
    its own, only while the lease holds and the intent is still in the state it
    was asked about — so an operator's resolution of a node never meets
    NODE_BUSY behind a slow RPC, and a verdict made on a stale state is dropped."""
    rpcs: dict[int, Any] = getattr(ctx.providers, "evm_rpcs", {})
    lanes = parse_lanes(ctx.settings.ccip_lanes)
    done = 0
    released = False
    token = uuid.uuid4()
    async with ctx.db.transaction() as tx:
        rows = await tx.fetch(
            SQL.claim_unresolved,
            {
                "threshold_seconds": ctx.settings.ccip_send_intent_stranded_seconds,
                "limit": REAP_BATCH,
                "network_class": ctx.settings.network_class,
            },
        )
        if rows:
            await tx.execute(
                SQL.lease_claimed,
                {
                    "lease": token,
                    "ids": [r["id"] for r in rows],
                    "lease_seconds": ctx.settings.node_observe_lease_seconds,
                },
            )
    # committed: the intents and their nodes are free while the chain is asked
    for row in rows:
        try:
            verdict, facts = await _look_up(
                row, rpcs.get(row["chain_id"]), lanes, rpcs, await _hashes(ctx.db, row)
            )
        except (RpcError, RpcUnavailable) as exc:  # the chain cannot tell: a person must
            verdict = Verdict.STRANDED
            facts = {"state_detail": f"the chain did not answer: {type(exc).__name__}"}
        async with ctx.db.transaction() as tx:
            held = await tx.fetchrow(
                SQL.relock, {"id": row["id"], "lease": token, "state": row["state"]}
            )
            if held is None:
                log.info(
                    "ccip reaper verdict dropped: intent moved on or held meanwhile",
                    extra={"intent_id": row["id"], "verdict": str(verdict)},
                )
                continue
            released = await _write_verdict(tx, row, verdict, facts) or released
        done += 1
    if released:
        await ctx.db.fetchrow(SQL.wake_recovery, {})
    return done


async def _write_verdict(tx: Tx, row: Any, verdict: Verdict, facts: dict[str, Any]) -> bool:
    """Record one intent's verdict in `tx`, which holds it; True when it was released."""
    if verdict is Verdict.SENT:
        await move(tx, row["id"], S.SENT, UNRESOLVED, **facts)
    elif verdict is Verdict.DELIVERED:
        if row["state"] != S.SENT:
            await move(tx, row["id"], S.SENT, UNRESOLVED, **facts)
        await move(tx, row["id"], S.SUCCESS, DELIVERABLE, **facts)
    elif verdict is Verdict.REVERTED:
        await move(tx, row["id"], S.REVERTED, UNRESOLVED, **facts)
    elif verdict is Verdict.RELEASED:
        await move(tx, row["id"], S.RELEASED, UNRESOLVED, **facts)
        return True
    else:
        detail = facts.get("state_detail") or "the chain cannot tell"
        await tx.fetchrow(SQL.strand, {"id": row["id"], "detail": detail})
        log.warning(
            "request_attention: ccip send intent stranded",
            extra={
                "intent_id": row["id"],
                "request_id": str(row["request_id"]),
                "tx_hash": row["tx_hash"],
                "detail": detail,
            },
        )
    return False


async def _hashes(db: Database, row: Any) -> list[str]:
    """Every ccipSend signed for the intent's nonce in its attempt, newest first (a fee-bumped
    replacement has its own hash, issue 24), and the intent's own."""
    signed = await evm_nonces.signed_for(
        db,
        chain_id=row["chain_id"],
        address=row["sender"],
        nonce=row["nonce"],
        request_node_id=str(row["request_node_id"]),
        attempt_no=row["attempt_no"],
    )
    hashes = [s["tx_hash"] for s in reversed(signed)]
    return [*hashes, row["tx_hash"]] if row["tx_hash"] not in hashes else hashes


async def _look_up(
    row: Any, rpc: Any, lanes: dict[str, Any], rpcs: dict[int, Any], hashes: list[str]
) -> tuple[Verdict, dict[str, Any]]:
    """Ask the chain about one intent: the verdict and the facts to record with it."""
    if rpc is None:
        return Verdict.STRANDED, {
            "state_detail": f"no EVM client for chain {row['chain_id']} in this process"
        }
    receipt = None
    for tx_hash in hashes:
        receipt = await rpc.receipt(tx_hash)
        if receipt is not None:
            break
    facts: dict[str, Any] = {}
    executed = False
    status = None
    message_id = row["message_id"]
    if receipt is not None:
        status = int(receipt["status"], 16)
        message_id = message_id or message_id_from_logs(receipt.get("logs") or [])
        facts = {"message_id": message_id, "block_number": int(receipt["blockNumber"], 16)}
        lane = lanes.get(row["lane"])
        dest = rpcs.get(lane.dest_chain_id) if lane is not None else None
        if status == 1 and message_id and lane is not None and dest is not None:
            address, topics = execution_topics(lane, message_id)
            start = execution_from_block(lane, facts["block_number"], await dest.block_number())
            logs = await dest.call(
                "eth_getLogs", {"address": address, "topics": topics, "fromBlock": hex(start)}
            )
            found = execution_from_logs(logs or [], message_id)
            executed = found is not None and found[0] is Execution.SUCCESS
            if found is not None:
                facts["dest_tx_hash"] = found[1]
        if status != 1:
            facts["state_detail"] = "the ccipSend transaction reverted"
        elif not executed:
            facts["state_detail"] = "sent, but no execution on the destination yet"
    known = receipt is not None
    for tx_hash in hashes:
        known = known or await rpc.transaction(tx_hash) is not None
    mined_nonce = await rpc.nonce(row["sender"], "latest")
    consumed_by_other, consumer = False, None
    if not known and mined_nonce > row["nonce"]:
        # what used the nonce, read from its block (issue 43): only another transaction
        # than ours proves this send can never be mined
        consumer = await find_consumer(rpc, row["sender"], row["nonce"], await rpc.block_number())
        ours = {h.lower() for h in hashes}
        consumed_by_other = consumer is not None and consumer.tx_hash not in ours
    verdict = reap_verdict(
        state=row["state"],
        receipt_status=status,
        message_id=message_id,
        tx_known=known,
        nonce=row["nonce"],
        mined_nonce=mined_nonce,
        executed=executed,
        consumed_by_other=consumed_by_other,
    )
    if verdict is Verdict.RELEASED and consumer is not None:
        facts["state_detail"] = (
            f"the nonce went to another transaction, {consumer.tx_hash} in block "
            f"{consumer.block}: never sent"
        )
    elif verdict is Verdict.STRANDED and "state_detail" not in facts:
        facts["state_detail"] = (
            "broadcast but not mined" if known else "nothing on chain, nonce still free"
        )
    return verdict, facts
