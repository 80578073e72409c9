"""evm_nonce_reaper (issue 11, reference §10): the worker over EVM nonce reservations.

The reservations themselves — how an executor takes, marks and keeps a nonce's
signed bytes — are the executors' store, qtg/providers/evm/nonces.py (the
providers' floor); both use the queries in sql/evm_nonces/.

evm_nonce_reaper reclaims stale reservations deciding from the chain alone
(`qtg.domain.evm.nonce_verdict`); rows are claimed FOR UPDATE SKIP LOCKED so
several runtimes share the work. Any error of that step is raised: the worker is
in the core fail-fast group, as the reference says. Then (issue 24) each account
is reconciled with the chain's count (`reconcile_account`): reorged nonces
reopened, stale broadcasts sent again from their kept bytes
(evm_signed_transactions, migration 0018), gaps filled; a chain that does not
answer skips that account until the next pass.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from qtg.db import Jsonb, Tx, sql_family
from qtg.domain.evm import NonceVerdict, nonce_verdict
from qtg.providers.base import RetryLater
from qtg.providers.evm import nonces as nonce_store
from qtg.providers.evm.rpc import EvmRpc, RpcError, RpcUnavailable
from qtg.services import evm_cancels, notifications
from qtg.services.auditing import record_audit
from qtg.services.context import ServiceContext

if TYPE_CHECKING:
    from qtg.providers.evm.outcome import ChainJudge

SQL = sql_family(
    "evm_nonces",
    "lock_account",
    "for_attempt",
    "take_released",
    "take_next",
    "mark",
    "claim_stale",
    "settle",
    "flag_attention",
    "record_signed",
    "own_for_signed",
    "signed_for",
    "touch_broadcast",
    "note_not_landed",
    "clear_not_landed",
    "drift_open",
    "accounts",
    "above_count",
    "newest_signed",
    "reopen",
    "take_for_gap_fill",
    "db_now",
    "release_unsigned",
    "reorged_owner",
    "record_event",
    "recently_consumed",
)

#: The reorg watch looks at payments consumed this recently; a deeper reorg is the full
#: pass's (sql/evm_nonces/accounts.sql looks back a day).
REORG_WATCH_WINDOW_SECONDS = 3600.0

log = logging.getLogger("qtg.services.evm_nonces")


async def nonce_reaper_pass(ctx: ServiceContext) -> int:
    """The evm_nonce_reaper worker's pass: the full pass (`reap_stale_nonces`) once per
    MG_EVM_NONCE_REAPER_INTERVAL_SECONDS; between them (every MG_EVM_REORG_WATCH_SECONDS,
    `next_reaper_due`, or at once when an operator's FAILED resolution wakes it on
    qtg_evm_reaper) only the cancel step and the reorg watch, so a COMPLETED payment that
    left the canonical chain pages and is re-sent within seconds (issue 43 item 5)."""
    cadence = ctx.reaper_cadence
    if cadence.full_due(ctx.settings.evm_nonce_reaper_interval_seconds):
        cadence.ran_full()
        return await reap_stale_nonces(ctx)
    return await evm_cancels.settle_cancels(ctx) + await watch_reorgs(ctx)


async def next_reaper_due(ctx: ServiceContext) -> datetime | None:
    """The next reorg watch, or the next full pass if that comes first."""
    wait = min(
        ctx.settings.evm_reorg_watch_seconds,
        ctx.reaper_cadence.seconds_to_full(ctx.settings.evm_nonce_reaper_interval_seconds),
    )
    return datetime.now(UTC) + timedelta(seconds=wait)


async def watch_reorgs(ctx: ServiceContext) -> int:
    """Cheap when nothing changed: one query for the accounts with a payment consumed in
    the last REORG_WATCH_WINDOW_SECONDS, one count per such account. An account whose
    count is at or below its highest consumed nonce lost a payment to a reorg: it is
    reconciled now (`reconcile_account`: reopened, paged, its kept bytes re-sent)."""
    judge: ChainJudge | None = getattr(ctx.providers, "evm_judge", None)
    rpcs: dict[int, EvmRpc] = getattr(ctx.providers, "evm_rpcs", {})
    if judge is None:
        return 0
    async with ctx.db.transaction() as tx:
        started = await tx.fetchval(SQL.db_now, {})
        accounts = await tx.fetch(
            SQL.recently_consumed, {"window_seconds": REORG_WATCH_WINDOW_SECONDS}
        )
    changed = 0
    for account in accounts:
        rpc = rpcs.get(account["chain_id"])
        if rpc is None:
            continue
        try:
            if await rpc.nonce(account["address"], "latest") > account["top"]:
                continue  # every payment of the window is still below the count
            changed += await reconcile_account(
                ctx,
                judge,
                rpc,
                account["chain_id"],
                account["address"],
                pass_started=started,
            )
        except (RpcError, RpcUnavailable) as exc:
            # no answer is no verdict: the next watch (or full pass) asks again
            log.warning(
                "reorg watch skipped: chain %s did not answer: %s",
                account["chain_id"],
                type(exc).__name__,
            )
    return changed


async def reap_stale_nonces(ctx: ServiceContext) -> int:
    """The evm_nonce_reaper pass: settle what the chain has decided, then reconcile each
    account with the chain (issue 24); return rows settled, reopened or gap-filled."""
    rpcs: dict[int, EvmRpc] = getattr(ctx.providers, "evm_rpcs", {})
    # first the operators' FAILED resolutions waiting for the chain: their cancels are
    # kept before this pass's reconcile would re-send anything of those nonces
    settled = await evm_cancels.settle_cancels(ctx)
    async with ctx.db.transaction() as tx:
        started = await tx.fetchval(SQL.db_now, {})
        rows = await tx.fetch(
            SQL.claim_stale,
            {
                "stale_seconds": ctx.settings.evm_nonce_reservation_stale_seconds,
                "attention_seconds": ctx.settings.evm_nonce_attention_seconds,
                "limit": 100,
                "network_class": ctx.settings.network_class,
            },
        )
        for row in rows:
            rpc = rpcs.get(row["chain_id"])
            if rpc is None:
                continue  # no client for that chain in this process: another runtime's
            try:
                mined = await rpc.nonce(row["address"], "latest")
            except (RpcError, RpcUnavailable) as exc:
                # no answer is no verdict (issue 24 item 5): the row waits for the next
                # pass, and an outage does not take the core group down through here
                log.warning(
                    "nonce reaper: chain %s did not answer: %s", row["chain_id"], type(exc).__name__
                )
                continue
            verdict = nonce_verdict(
                state=row["state"],
                nonce=row["nonce"],
                mined_nonce=mined,
                signed=bool(row["tx_hash"]),
            )
            if verdict is NonceVerdict.WAIT:
                if row["past_attention"] and not row["attention_raised"]:
                    log.warning(
                        "request_attention: nonce %s of %s on chain %s broadcast but not mined",
                        row["nonce"],
                        row["address"],
                        row["chain_id"],
                    )
                    await tx.execute(SQL.flag_attention, _owned(row))
                continue
            await tx.execute(
                SQL.settle, {**_owned(row), "state": verdict.value, "from_state": row["state"]}
            )
            if verdict.value == "consumed":  # mined again after a reorg: its pages close
                for kind in ("payment_reorged", "reorg_resend_failed"):
                    await notifications.resolve_notification(tx, _reorg_key(kind, row))
            settled += 1
    judge: ChainJudge | None = getattr(ctx.providers, "evm_judge", None)
    if judge is not None:
        async with ctx.db.transaction() as tx:
            accounts = await tx.fetch(SQL.accounts, {})
        for account in accounts:
            if account["chain_id"] not in rpcs:
                continue
            try:
                settled += await reconcile_account(
                    ctx,
                    judge,
                    rpcs[account["chain_id"]],
                    account["chain_id"],
                    account["address"],
                    pass_started=started,
                )
            except (RpcError, RpcUnavailable) as exc:
                # the chain did not answer: nothing was changed, the next pass tries again
                # (an RPC outage must not take the core group down through this pass)
                log.warning(
                    "nonce reconcile skipped: chain %s did not answer: %s",
                    account["chain_id"],
                    type(exc).__name__,
                )
    return settled


async def reconcile_account(
    ctx: ServiceContext,
    judge: ChainJudge,
    rpc: EvmRpc,
    chain_id: int,
    address: str,
    *,
    pass_started: Any = None,
) -> int:
    """One account against the chain's count (issue 24), under the account lock:

    - a consumed reservation at or above the count was undone by a reorg: it is live
      again, and its signed bytes are broadcast again (nothing mints above a hole);
    - a stale broadcast (or written-ahead) one: its newest signed bytes are broadcast
      again (a mempool may have dropped them: the same bytes are the same transaction);
    - a released nonce below a live one is a gap that blocks every later transaction:
      it is filled with a zero-value transfer to ourselves, kept and audited
      (`evm_nonce_gap_filled`) before it is broadcast. Released before this pass
      (`pass_started`): one this pass released itself is first offered to the next
      reservation, and filled by the next pass, one interval later, if none took it.
    """
    count = await rpc.nonce(address, "latest")
    fees: tuple[int, int] | None = None
    ours = judge.signer_address.lower() == address.lower()
    if ours:
        try:
            fees = await judge.fees(chain_id)
        except RetryLater:  # market above the cap: no fill this pass (rebroadcasts still go)
            fees = None
    changed = 0
    to_send: list[str] = []
    to_cancel: list[dict[str, Any]] = []
    resend: list[tuple[Any, str]] = []
    args = {"chain_id": chain_id, "address": address, "floor": count}
    async with ctx.db.transaction() as tx:
        await tx.execute(SQL.lock_account, args)
        rows = await tx.fetch(
            SQL.above_count,
            {
                **args,
                "stale_seconds": ctx.settings.evm_nonce_reservation_stale_seconds,
                "pass_started": pass_started,
                "network_class": ctx.settings.network_class,
            },
        )
        top = max((r["nonce"] for r in rows if r["state"] != "released"), default=-1)
        for row in rows:
            if not row["mine"]:
                continue  # another network class's: its own runtimes reconcile it
            reorged = False
            if row["state"] == "consumed":
                if await tx.fetchrow(SQL.reopen, _owned(row)) is None:
                    continue
                log.warning(
                    "nonce %s of %s on chain %s is unused again (reorg): reopened",
                    row["nonce"],
                    address,
                    chain_id,
                )
                await _reorg_event(tx, chain_id, address, row)
                reorged = True
                changed += 1
            elif not (row["state"] in ("broadcast", "reserved") and row["stale"]):
                if (
                    row["state"] == "released"
                    and row["before_pass"] is not False
                    and row["nonce"] < top
                    and fees is not None
                ):
                    raw = await _fill(tx, judge, chain_id, address, row, fees)
                    if raw is not None:
                        to_send.append(raw)
                        changed += 1
                continue
            if row["tx_hash"]:
                signed = await tx.fetchrow(SQL.newest_signed, {"tx_hash": row["tx_hash"]})
                if signed is None:
                    continue
                # a provider's cancel (kind provider_cancel, deBridge's sendEvmOrderCancel)
                # IS the FAILED resolution's lever: its kept bytes go out again like any
                # unmined transaction of ours; replaced by a self-transfer, it would undo it
                if row["cancelling"] and signed["kind"] not in ("cancel", "provider_cancel"):
                    # resolved FAILED (or FAILED): its payment is never sent again
                    # (issue 43 item 3); the cancel step replaces it at this nonce
                    log.warning(
                        "nonce %s of %s on chain %s: not re-sent, its node is resolved FAILED;"
                        " cancelled instead",
                        row["nonce"],
                        address,
                        chain_id,
                    )
                    to_cancel.append(row)
                    continue
                if reorged:
                    resend.append((row, signed["raw"]))
                else:
                    to_send.append(signed["raw"])
    for raw in to_send:  # after the commit: kept before they leave
        await judge.broadcast(chain_id, raw)
    for row, raw in resend:  # a reorged payment's bytes, at once; a refusal pages
        await _resend_reorged(ctx, rpc, chain_id, address, row, raw)
    for row in to_cancel:  # a FAILED node's live nonce is not left a hole: it is cancelled
        await evm_cancels.cancel_nonce(
            ctx, judge, rpc, {**row, "chain_id": chain_id, "address": address}
        )
    return changed


def _owned(row: Any) -> dict[str, Any]:
    """The row's id and the owner it was read with: a write checks both (issue 44 item 5)."""
    return {
        "id": row["id"],
        "request_node_id": row["request_node_id"],
        "attempt_no": row["attempt_no"],
    }


async def _fill(
    tx: Tx, judge: ChainJudge, chain_id: int, address: str, row: Any, fees: tuple[int, int]
) -> str | None:
    """Sign, keep and audit the gap fill of one released nonce; its raw bytes (None: the
    row is no longer the released one read, so nothing was kept)."""
    payload = {
        "from": judge.signer_address,
        "to": judge.signer_address,
        "value": "0",
        "data": "0x",
        "gas": "21000",
        "maxFeePerGas": str(fees[0]),
        "maxPriorityFeePerGas": str(fees[1]),
        "nonce": str(row["nonce"]),
        "chainId": str(chain_id),
        "type": 2,
    }
    from qtg.providers.evm.outcome import raw_tx_hash  # here: that module imports this one

    raw = await judge.sign(payload)
    tx_hash = raw_tx_hash(raw)
    if await tx.fetchrow(SQL.take_for_gap_fill, {**_owned(row), "tx_hash": tx_hash}) is None:
        # the released row moved since it was read (its owner wrote it): nothing is kept
        # and nothing leaves; the next pass looks again
        return None
    await tx.execute(
        SQL.record_signed,
        {
            "chain_id": chain_id,
            "address": address.lower(),
            "nonce": row["nonce"],
            "kind": "gap_fill",
            "tx_hash": tx_hash,
            "raw": raw,
            "payload": Jsonb(payload),
            "max_fee": fees[0],
            "tip": fees[1],
            "request_node_id": "gap_fill",
            "attempt_no": None,
        },
    )
    await record_audit(
        tx,
        actor="evm_nonce_reaper",
        action="evm_nonce_gap_filled",
        object_type="evm_nonce",
        object_id=f"{chain_id}:{address.lower()}:{row['nonce']}",
        detail={"tx_hash": tx_hash, "reason": "released nonce below broadcast ones"},
    )
    log.warning(
        "filled nonce gap %s of %s on chain %s with a zero-value self-transfer %s",
        row["nonce"],
        address,
        chain_id,
        tx_hash,
    )
    return raw


def _reorg_key(kind: str, row: Any) -> str:
    """The dedupe key of a reorg page about one nonce (one page per nonce and kind)."""
    return f"{kind}:{row['chain_id']}:{row['address']}:{row['nonce']}"


async def _reorg_event(tx: Tx, chain_id: int, address: str, row: Any) -> None:
    """A payment's transaction left the canonical chain (issue 43 item 5): when its node
    had COMPLETED, an event on the movement and a critical page, in the transaction that
    reopens the nonce (its bytes are re-sent right after the commit)."""
    owner = await tx.fetchrow(
        SQL.reorged_owner,
        {"request_node_id": row["request_node_id"], "attempt_no": row["attempt_no"]},
    )
    if owner is None or owner["node_state"] != "COMPLETED":
        return  # a gap fill, or a node still observed (observe sees the receipt vanish)
    where = {"chain_id": chain_id, "address": address, "nonce": row["nonce"]}
    payload = {**where, "tx_hash": row["tx_hash"]}
    await tx.execute(
        SQL.record_event,
        {
            "request_id": owner["request_id"],
            "node_id": owner["node_id"],
            "node_key": owner["node_key"],
            "event_type": "payment_reorged",
            "payload": Jsonb(payload),
        },
    )
    await notifications.raise_notification(
        tx,
        kind="payment_reorged",
        severity="critical",
        dedupe_key=_reorg_key("payment_reorged", where),
        subject=f"payment of node {owner['node_key']} left the canonical chain (reorg)",
        body=f"Transaction {row['tx_hash']} (nonce {row['nonce']} of {address} on chain "
        f"{chain_id}) of a COMPLETED node is no longer in the canonical chain. Its kept bytes "
        "are being re-sent; the movement stays COMPLETED. This page closes when the nonce is "
        "seen consumed again.",
        links={"request_id": str(owner["request_id"]), "node_key": owner["node_key"], **payload},
        request_id=owner["request_id"],
        node_key=owner["node_key"],
    )
    log.critical(
        "payment_reorged: a COMPLETED payment left the canonical chain; re-sending its bytes",
        extra={"request_id": str(owner["request_id"]), "node_key": owner["node_key"], **payload},
    )


async def _resend_reorged(
    ctx: ServiceContext, rpc: EvmRpc, chain_id: int, address: str, row: Any, raw: str
) -> None:
    """Send a reorged payment's kept bytes again, now; a refusal (a drained signer: the
    bytes cannot land) or no answer pages critical, naming why — not an info log."""
    from qtg.providers.evm.outcome import raw_tx_hash  # here: that module imports this one

    try:
        await rpc.call("eth_sendRawTransaction", raw)
        why = None
    except RpcError as exc:
        why = None if "already known" in exc.message.lower() else exc.message
    except RpcUnavailable as exc:
        why = f"no answer ({type(exc).__name__})"
    if why is None:
        await nonce_store.touch_broadcast(ctx.db, raw_tx_hash(raw))
        return
    where = {"chain_id": chain_id, "address": address, "nonce": row["nonce"]}
    async with ctx.db.transaction() as tx:
        owner = await tx.fetchrow(
            SQL.reorged_owner,
            {"request_node_id": row["request_node_id"], "attempt_no": row["attempt_no"]},
        )
        links: dict[str, Any] = {**where, "tx_hash": row["tx_hash"], "error": why[:500]}
        if owner is not None:
            await tx.execute(
                SQL.record_event,
                {
                    "request_id": owner["request_id"],
                    "node_id": owner["node_id"],
                    "node_key": owner["node_key"],
                    "event_type": "payment_resend_failed",
                    "payload": Jsonb(links),
                },
            )
            links = {**links, "request_id": str(owner["request_id"]), "node_key": owner["node_key"]}
        await notifications.raise_notification(
            tx,
            kind="reorg_resend_failed",
            severity="critical",
            dedupe_key=_reorg_key("reorg_resend_failed", where),
            subject=f"a reorged payment cannot be re-sent: nonce {row['nonce']} "
            f"on chain {chain_id}",
            body=f"The kept bytes of {row['tx_hash']} were refused: {why[:500]}. Until they land "
            "(fund the signer; the reaper sends them again) the payment is not on the chain "
            "and every later transaction of this signer waits behind its nonce.",
            links=links,
            request_id=owner["request_id"] if owner is not None else None,
            node_key=owner["node_key"] if owner is not None else None,
        )
    log.critical(
        "reorg_resend_failed: a reorged payment's bytes were refused",
        extra={**where, "tx_hash": row["tx_hash"], "error": why[:500]},
    )
