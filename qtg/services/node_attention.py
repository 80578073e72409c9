"""Nothing stuck silently (issue 25 items 1 and 2): the sweeps node_recovery runs
after each of its passes.

`raise_attention`: a node recovery has not decided for
MG_NODE_UNKNOWN_ATTENTION_SECONDS (UNKNOWN that long, or SUBMITTING that long
past its grace) puts its movement in front of a person once per attempt:
EXECUTING → MANUAL_INTERVENTION, which is the existing attention path (the
request_attention event and its callback, the critical notification). The
operator then settles the node by hand (`resolve_node`, four-eyes) or resumes
the movement, which gives recovery another go and does not page again for the
same attempt.

`settle_unsettled`: the dispatcher commits a submit's FAILED/UNKNOWN outcome
on the node row alone and moves the request on in a second transaction (lock
order, qtg/services/dispatch.py). If that second transaction fails (a
statement timeout behind another holder of the request, a lost connection, a
crash), the request would stay EXECUTING with nothing in flight for ever. The
sweep lists EXECUTING requests whose nodes already decide their state, and
settles each under its own lock exactly as the worker would have.

`resolve_node`: the operators' lever for an undecided node — proposed by one
principal, confirmed by another with the same outcome, audited, refused while
a worker holds the node — after which the DAG goes on from the chosen outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import psycopg

from qtg.config import Settings
from qtg.db import Database, Jsonb, sql_family
from qtg.domain.chain_outcome import NEVER_FAILED_BY_OPERATORS, PROVIDER_PROVEN_FAILURES
from qtg.domain.faults import submitting_grace_seconds
from qtg.domain.observe_policy import RECOVERY_LANES
from qtg.domain.states import NodeState, RequestState
from qtg.services import notifications, progress
from qtg.services.auditing import record_audit
from qtg.services.context import ServiceContext
from qtg.services.errors import Conflict, Forbidden, InvalidInput, NotFound, uuid_or_not_found
from qtg.services.movements import read_movement

log = logging.getLogger("qtg.services.node_attention")

SQL = sql_family(
    "node_attention",
    "raise_attention",
    "raise_transient_attention",
    "raise_observe_failing",
    "resolve_observe_failing",
    "unsettled",
    "lock_request",
    "lock_request_for_resolve",
    "lock_node_nowait",
    "open_resolution",
    "insert_resolution",
    "confirm_resolution",
    "supersede_resolution",
    "live_signed",
    "await_failure_proof",
    "wake_reaper",
    "lock_awaiting_proof",
    "apply_resolution",
    "hand_back_paid",
    "signed_any",
)

N, R = NodeState, RequestState

#: The outcomes an operator may settle a node with.
#: EXECUTING requests the settle sweep reads per pass (a few buffers each).
SETTLE_SCAN = 500

OUTCOMES = frozenset({N.COMPLETED, N.FAILED})
#: Request states in which an undecided node can be settled by hand: recovery
#: is still on it (EXECUTING) or a person was asked (MANUAL_INTERVENTION).
RESOLVABLE_REQUESTS = frozenset({R.EXECUTING, R.MANUAL_INTERVENTION})
#: The error code a node settled FAILED by operators carries.
RESOLVED_FAILED = "RESOLVED_FAILED_BY_OPERATORS"
#: The error code of a node operators resolved FAILED while what it signed could still
#: be mined: UNKNOWN until the chain shows a same-nonce cancel consumed the nonce
#: (qtg/services/evm_cancels.py); recovery leaves it alone.
FAILURE_NOT_PROVEN = "FAILURE_NOT_PROVEN"


def attention_grace_seconds(settings: Settings) -> float:
    """The SUBMITTING grace the attention sweep adds: the longest of the lanes'
    (a node is never paged before recovery could have asked recover())."""
    per_lane = {
        name: getattr(settings, f"node_recovery_submitting_grace_seconds_{name}")
        for name in RECOVERY_LANES
    }
    general = settings.node_recovery_submitting_grace_seconds
    return max(submitting_grace_seconds(lane, per_lane, general) for lane in RECOVERY_LANES)


async def sweep(ctx: ServiceContext) -> int:
    """Both sweeps; how many requests they moved (0: nothing to go round for)."""
    return await settle_unsettled(ctx) + await raise_attention(ctx)


async def raise_attention(ctx: ServiceContext) -> int:
    """Page on undecided nodes, then on nodes waiting out transient faults (issue 24
    item 5), one statement each; returns how many requests they moved to
    MANUAL_INTERVENTION."""
    settings = ctx.settings
    args = {
        "network_class": settings.network_class,
        "attention_seconds": settings.node_unknown_attention_seconds,
        "transient_attention_seconds": settings.node_transient_attention_seconds,
        "grace_seconds": attention_grace_seconds(settings),
        "limit": settings.node_recovery_batch_size,
    }
    async with ctx.db.transaction() as tx:
        rows = await tx.fetch(SQL.raise_attention, args)
    async with ctx.db.transaction() as tx:
        waiting = await tx.fetch(SQL.raise_transient_attention, args)
    await page_failing_observations(ctx, args)
    for row in rows:
        log.warning(
            "request_attention: node undecided for %.0f s; movement needs a person",
            row["undecided_seconds"],
            extra={
                "request_id": str(row["request_id"]),
                "node_key": row["node_key"],
                "node_state": row["node_state"],
            },
        )
    for row in waiting:
        log.warning(
            "request_attention: node waiting out transient faults for %.0f s (nothing sent);"
            " movement needs a person",
            row["undecided_seconds"],
            extra={"request_id": str(row["request_id"]), "node_key": row["node_key"]},
        )
    return len({row["request_id"] for row in (*rows, *waiting) if row["moved"]})


async def page_failing_observations(ctx: ServiceContext, args: Mapping[str, Any]) -> int:
    """Issue 44 item 2: page (critical, once per run of failures) every node whose
    observations have failed in a row for MG_NODE_UNKNOWN_ATTENTION_SECONDS, and
    resolve the pages of nodes that answer again or left observation. The
    movement stays EXECUTING: the node keeps being observed. Returns how many
    pages were raised."""
    raised = await ctx.db.fetch(SQL.raise_observe_failing, dict(args))
    await ctx.db.fetch(SQL.resolve_observe_failing, {"limit": args["limit"]})
    for row in raised:
        log.warning(
            "observe_failing: node's observations failed %d times in a row for %.0f s;"
            " its money may be in flight, unwatched",
            row["observe_errors"],
            row["failing_seconds"],
            extra={"request_id": str(row["request_id"]), "node_key": row["node_key"]},
        )
    return len(raised)


async def settle_unsettled(ctx: ServiceContext) -> int:
    """Settle EXECUTING requests whose settle was lost; returns how many moved.

    One window of SETTLE_SCAN EXECUTING requests per pass, after where the
    last pass stopped (ctx.settle_cursor; past the end, from the start again),
    and at most MG_NODE_RECOVERY_BATCH_SIZE settles: the sweep costs the same
    with 100 requests in flight or 100,000 (issue 44 item 5)."""
    settings = ctx.settings
    cursor = ctx.settle_cursor
    window = await ctx.db.fetch(
        SQL.unsettled,
        {
            "network_class": settings.network_class,
            "grace_seconds": settings.node_settle_grace_seconds,
            "scan": SETTLE_SCAN,
            **cursor.params(),
        },
    )
    unsettled = [row for row in window if row["unsettled"]]
    listed = unsettled[: settings.node_recovery_batch_size]
    if len(listed) < len(unsettled):  # the rest of this window next pass
        cursor.after = (listed[-1]["created_at"], listed[-1]["id"])
    elif window and window[-1]["window_size"] >= SETTLE_SCAN:  # more may follow
        cursor.after = (window[-1]["created_at"], window[-1]["id"])
    else:  # the end: the next pass starts again
        cursor.after = None
    moved = 0
    for row in listed:
        async with ctx.db.transaction() as tx:
            if await tx.fetchrow(SQL.lock_request, {"request_id": row["id"]}) is None:
                continue  # held by a worker (it settles it), or moved on already
            snap = await progress.load_snapshot(tx, row["id"])
            await progress.refresh_frontier(tx, snap)
            state = await progress.settle_request_state(tx, snap)
        if state is not None:
            moved += 1
            log.warning(
                "request settled by the sweep: its worker's settle was lost",
                extra={"request_id": str(row["id"]), "request_state": str(state)},
            )
    return moved


# ------------------------------------------------------------------ resolve by hand


def _validate(
    outcome: Any, evidence: Any, provider_refs: Any
) -> tuple[NodeState, str, dict[str, Any]]:
    if outcome not in {str(o) for o in OUTCOMES}:
        raise InvalidInput("outcome must be COMPLETED or FAILED", detail={"field": "outcome"})
    if not isinstance(evidence, str) or not evidence.strip() or len(evidence) > 2000:
        raise InvalidInput(
            "evidence must be a non-empty string of at most 2000 characters "
            "(what shows the outcome: a transaction hash, a venue's statement)",
            detail={"field": "evidence"},
        )
    if provider_refs is None:
        provider_refs = {}
    if not isinstance(provider_refs, Mapping):
        raise InvalidInput("provider_refs must be an object", detail={"field": "provider_refs"})
    return NodeState(outcome), evidence.strip(), dict(provider_refs)


def _resolution_out(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: row[k]
        for k in (
            "id", "request_id", "node_key", "attempt_no", "node_state", "outcome", "evidence",
            "provider_refs", "status", "proposed_by", "proposed_at", "confirmed_by",
            "confirm_evidence", "decided_at", "applied_at", "proof",
        )
    }  # fmt: skip


async def resolve_node(
    db: Database,
    settings: Settings,
    request_id: object,
    node_key: str,
    *,
    actor: str,
    outcome: Any,
    evidence: Any,
    provider_refs: Any = None,
) -> tuple[dict[str, Any], bool]:
    """Propose, or confirm, an operator's settlement of an undecided node.

    Returns (the resolution with the movement as it now is, confirmed?). The
    first call for a node attempt records a proposal (nothing moves); a call by
    a different principal with the same outcome (and no different
    provider_refs) confirms it and applies it: COMPLETED completes the node and
    releases its successors, FAILED fails it (the operators attest that no
    money moved), and the request state is derived again — from
    MANUAL_INTERVENTION by way of EXECUTING, as a resume would.

    Refused: the proposer confirming (403 FOUR_EYES), another outcome than the
    one proposed (409 RESOLUTION_MISMATCH), a node that is not UNKNOWN nor
    SUBMITTING past its grace (409 ILLEGAL_NODE_STATE), FAILED for a node whose money
    may still arrive and cannot be called back (409 FAILURE_NOT_PROVABLE,
    chain_outcome.NEVER_FAILED_BY_OPERATORS), a node a worker holds
    (409 NODE_BUSY: its row is locked NOWAIT, so the API never waits behind a
    submit or an observation, and a worker's write can never be overwritten).
    """
    wanted, evidence_text, refs = _validate(outcome, evidence, provider_refs)
    rid = uuid_or_not_found(request_id, what="movement", key="request_id")
    async with db.transaction() as tx:
        request = await tx.fetchrow(SQL.lock_request_for_resolve, {"request_id": rid})
        if request is None:
            raise NotFound(f"movement {rid} not found", detail={"request_id": str(rid)})
        if request["request_state"] not in RESOLVABLE_REQUESTS:
            raise Conflict(
                f"cannot resolve a node of a movement that is {request['request_state']}",
                code="ILLEGAL_STATE",
                detail={
                    "current_state": request["request_state"],
                    "allowed_states": sorted(RESOLVABLE_REQUESTS),
                },
            )
        snap = await progress.load_snapshot(tx, rid)
        try:
            node = snap.node(node_key)
        except KeyError:
            raise NotFound(
                f"movement has no node {node_key!r}", detail={"node_key": node_key}
            ) from None
        refused = NEVER_FAILED_BY_OPERATORS.get(node["action_type"])
        if wanted == N.FAILED and refused is not None:
            # refused before anything is recorded: no proposal can ever be confirmed
            raise Conflict(
                f"node {node_key} ({node['action_type']}) cannot be resolved FAILED: {refused}",
                code="FAILURE_NOT_PROVABLE",
                detail={
                    "node_key": node_key,
                    "action_type": node["action_type"],
                    "current_state": node["node_state"],
                    "reason": refused,
                    "allowed_outcomes": [str(N.COMPLETED)],
                },
            )
        try:
            locked = await tx.fetchrow(
                SQL.lock_node_nowait,
                {"node_id": node["id"], "grace_seconds": attention_grace_seconds(settings)},
            )
        except psycopg.errors.LockNotAvailable:
            raise Conflict(
                f"node {node_key} is held by a worker right now; try again",
                code="NODE_BUSY",
                detail={"node_key": node_key, "current_state": node["node_state"]},
            ) from None
        assert locked is not None
        state = locked["node_state"]
        if locked["error_code"] == FAILURE_NOT_PROVEN:
            raise Conflict(
                f"node {node_key} was resolved FAILED and waits for the chain to show its "
                "cancel consumed the nonce; the chain decides it now",
                code="FAILURE_PROOF_PENDING",
                detail={"node_key": node_key, "current_state": state},
            )
        if not (state == N.UNKNOWN or (state == N.SUBMITTING and locked["past_grace"])):
            raise Conflict(
                f"node {node_key} is {state}; only an UNKNOWN node, or a SUBMITTING one past "
                "its grace, can be resolved by hand",
                code="ILLEGAL_NODE_STATE",
                detail={"node_key": node_key, "current_state": state},
            )
        node["node_state"] = state  # as locked: the snapshot read may predate a commit
        open_ = await tx.fetchrow(SQL.open_resolution, {"node_id": node["id"]})
        if open_ is not None and (
            open_["attempt_no"] != locked["attempt_no"]
            or open_["node_state"] != state
            or open_["proposed_at"] < locked["state_entered_at"]
        ):
            # proposed for an earlier attempt or state episode: it proves nothing now
            await tx.execute(SQL.supersede_resolution, {"id": open_["id"]})
            open_ = None
        detail = {"node_key": node_key, "outcome": str(wanted), "evidence": evidence_text}
        if open_ is None:
            row = await tx.fetchrow(
                SQL.insert_resolution,
                {
                    "request_id": rid,
                    "node_id": node["id"],
                    "node_key": node_key,
                    "attempt_no": locked["attempt_no"],
                    "node_state": state,
                    "outcome": str(wanted),
                    "evidence": evidence_text,
                    "provider_refs": Jsonb(refs),
                    "actor": actor,
                },
            )
            assert row is not None
            await record_audit(
                tx, actor=actor, action="movement.node_resolution_proposed",
                object_type="movement", object_id=rid,
                detail={**detail, "resolution_id": row["id"], "provider_refs": refs},
            )  # fmt: skip
            movement = await read_movement(tx, rid)
            return {"resolution": _resolution_out(row), "movement": movement}, False
        if open_["proposed_by"] == actor:
            raise Forbidden(
                "four-eyes: the principal who proposed a resolution cannot confirm it",
                code="FOUR_EYES",
                detail={"proposed_by": open_["proposed_by"], "node_key": node_key},
            )
        if open_["outcome"] != wanted or (refs and refs != dict(open_["provider_refs"])):
            raise Conflict(
                "this resolution does not match the one proposed; confirm the same outcome "
                "(and provider_refs), or have the proposal corrected",
                code="RESOLUTION_MISMATCH",
                detail={
                    "node_key": node_key,
                    "proposed_outcome": open_["outcome"],
                    "proposed_by": open_["proposed_by"],
                    "proposed_provider_refs": dict(open_["provider_refs"]),
                    "outcome": str(wanted),
                    "current_state": state,
                },
            )
        live = []
        if wanted == N.FAILED:
            live = await tx.fetch(
                SQL.live_signed, {"node_id": node["id"], "attempt_no": locked["attempt_no"]}
            )
        proven_by_provider = wanted == N.FAILED and node["action_type"] in PROVIDER_PROVEN_FAILURES
        if live or proven_by_provider:
            # Saying so does not make it so (issue 43 item 3): what this attempt signed
            # could still be mined. The node waits, undecided, for the chain: the reaper
            # replaces those bytes at the same nonce and decides from what consumed it.
            # A provider-proven node (issue 46) signed nothing, but an earlier node's money
            # may still arrive: its provider cancels and proves (evm_cancels routes it).
            row = await tx.fetchrow(
                SQL.confirm_resolution,
                {"id": open_["id"], "actor": actor, "evidence": evidence_text,
                 "apply": False, "proof": None},
            )  # fmt: skip
            assert row is not None
            nonces = [
                {"chain_id": r["chain_id"], "nonce": r["nonce"], "tx_hash": r["tx_hash"]}
                for r in live
            ]
            detail_text = (
                "resolved FAILED by operators; the money may still arrive, so its provider "
                f"cancels ({node['action_type']}): FAILED once the chain shows the refund"
                if proven_by_provider
                else "resolved FAILED by operators; what this attempt signed could still be "
                "mined, so a same-nonce cancel replaces it: FAILED once the chain shows the "
                "cancel consumed "
                + ", ".join(f"nonce {n['nonce']} on chain {n['chain_id']}" for n in nonces)
            )
            await tx.execute(
                SQL.await_failure_proof, {"node_id": node["id"], "detail": detail_text}
            )
            # the reaper's cancel step, now (on this commit), not at its next interval
            await tx.fetchrow(SQL.wake_reaper, {})
            await record_audit(
                tx, actor=actor, action="movement.node_resolution_awaits_chain",
                object_type="movement", object_id=rid,
                detail={**detail, "resolution_id": row["id"], "proposed_by": open_["proposed_by"],
                        "from_state": state, "signed": nonces},
            )  # fmt: skip
            movement = await read_movement(tx, rid)
            return {"resolution": _resolution_out(row), "movement": movement}, False
        proof = None
        if wanted == N.FAILED and not await tx.fetchval(
            SQL.signed_any, {"node_id": node["id"], "attempt_no": locked["attempt_no"]}
        ):
            proof = {"kind": "nothing_signed", "note": "this attempt kept no signed chain "
                     "transaction, and bytes are kept before any broadcast"}  # fmt: skip
        # else FAILED over transactions the chain consumed (mined, maybe by this attempt):
        # applied as the operators say, without proof, so it cannot be retried
        row = await tx.fetchrow(
            SQL.confirm_resolution,
            {"id": open_["id"], "actor": actor, "evidence": evidence_text,
             "apply": True, "proof": Jsonb(proof) if proof is not None else None},
        )  # fmt: skip
        assert row is not None
        if snap.request["request_state"] == R.MANUAL_INTERVENTION:
            # as a resume: the DAG runs on from the chosen outcome (the derived
            # state, e.g. MANUAL_INTERVENTION again after a side effect, follows)
            await progress.set_request_state(tx, snap, R.EXECUTING)
        applied = dict(open_["provider_refs"])
        if wanted == N.COMPLETED:
            await progress.complete_node(
                tx, snap, node, applied,
                {"resolved_by": [open_["proposed_by"], actor], "resolution_id": row["id"]},
            )  # fmt: skip
        else:
            await progress.node_finished_badly(
                tx, snap, node, N.FAILED, RESOLVED_FAILED,
                f"settled FAILED by {open_['proposed_by']} and {actor}: {open_['evidence']}",
            )  # fmt: skip
        await record_audit(
            tx, actor=actor, action="movement.node_resolved",
            object_type="movement", object_id=rid,
            detail={**detail, "resolution_id": row["id"], "proposed_by": open_["proposed_by"],
                    "provider_refs": applied, "from_state": state},
        )  # fmt: skip
        movement = await read_movement(tx, rid)
        return {"resolution": _resolution_out(row), "movement": movement}, True


# ------------------------------------------------------------ the chain's verdict


async def settle_awaiting_proof(
    db: Database,
    resolution_id: int,
    *,
    verdict: str,
    proof: Mapping[str, Any],
    provider_refs: Mapping[str, Any] | None = None,
) -> bool:
    """Apply the chain's verdict on a FAILED resolution that waited for it (issue 43 item 3);
    True when applied here. `verdict`:

    - "failed": a transaction qtg signed to replace the attempt's (a same-nonce cancel)
      consumed the nonce, or the attempt's own transaction was mined and reverted — no
      money moved, and `proof` says which transaction shows it: the node is FAILED
      (RESOLVED_FAILED_BY_OPERATORS, now proven, so retry is allowed);
    - "paid": the attempt's own payment consumed the nonce: the operators were wrong. The
      node goes back to SUBMITTED with `provider_refs` naming that transaction, and the
      observer decides it (depth, effect) like any payment; a critical page says so.

    The movement goes back to EXECUTING from MANUAL_INTERVENTION, as a resume would.
    """
    async with db.transaction() as tx:
        res = await tx.fetchrow(SQL.lock_awaiting_proof, {"id": resolution_id})
        if res is None:
            return False  # applied already, or another runtime is applying it
        await tx.fetchrow(SQL.lock_request_for_resolve, {"request_id": res["request_id"]})
        snap = await progress.load_snapshot(tx, res["request_id"])
        node = snap.node(res["node_key"])
        if node["attempt_no"] != res["attempt_no"] or node["node_state"] != N.UNKNOWN:
            return False  # not reachable: nothing else moves a FAILURE_NOT_PROVEN node
        await tx.execute(SQL.apply_resolution, {"id": res["id"], "proof": Jsonb(dict(proof))})
        if snap.request["request_state"] == R.MANUAL_INTERVENTION:
            await progress.set_request_state(tx, snap, R.EXECUTING)
        by = f"{res['proposed_by']} and {res['confirmed_by']}"
        rid = res["request_id"]
        if verdict == "failed":
            await progress.node_finished_badly(
                tx, snap, node, N.FAILED, RESOLVED_FAILED,
                f"settled FAILED by {by}: {res['evidence']}; proven by the chain: "
                f"{proof.get('kind')} {proof.get('tx_hash')} in block {proof.get('block')}",
            )  # fmt: skip
            action = "movement.node_failure_proven"
        else:
            moved = await tx.fetchrow(
                SQL.hand_back_paid,
                {"node_id": node["id"], "provider_refs": Jsonb(dict(provider_refs or {}))},
            )
            assert moved is not None
            await notifications.raise_notification(
                tx, kind="failure_overruled", severity="critical",
                dedupe_key=f"failure_overruled:{node['id']}:{res['attempt_no']}",
                subject=f"node {res['node_key']} resolved FAILED, but its payment was mined",
                body=f"Operators {by} resolved the node FAILED; the chain shows the attempt's "
                f"own transaction {proof.get('tx_hash')} consumed its nonce. The node is "
                "observed again from that transaction; it was never FAILED.",
                links={"request_id": str(rid), "node_key": res["node_key"]},
                request_id=rid, node_key=res["node_key"],
            )  # fmt: skip
            action = "movement.node_failure_overruled"
        await notifications.resolve_notification(
            tx, f"failure_not_proven:{node['id']}:{res['attempt_no']}"
        )
        await record_audit(
            tx, actor="evm_nonce_reaper", action=action, object_type="movement", object_id=rid,
            detail={"node_key": res["node_key"], "resolution_id": res["id"],
                    "proof": dict(proof)},
        )  # fmt: skip
        return True
