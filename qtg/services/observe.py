"""node_observer (reference §2): poll SUBMITTED/OBSERVING nodes until they finish.

No lock is held across a provider call (issue 25; the reference: "a slow
provider observation on one node never holds a lock that blocks the rest of
the batch"). Every observation goes through three steps:

1. **Claim and lease** (one short transaction): the due nodes are claimed with
   their requests, FOR NO KEY UPDATE ... SKIP LOCKED; each gets the claim's
   token in `observe_lease` and a next_observe_at past the observation
   (MG_NODE_OBSERVE_LEASE_SECONDS), and the transaction COMMITS. The rows are
   free again — the dispatcher's settle, an API operation, another worker can
   take them — but no other observer claims them: they are not due.
2. **Observe** with no transaction open: the provider calls, side by side, each
   cut off at half the lease.
3. **Re-lock and write** (one short transaction): the requests are locked
   again (waiting, in id order), then the nodes whose lease still holds the
   claim's token, in the same attempt, still SUBMITTED/OBSERVING; only their
   outcomes are written (and the successors they make READY, the frontier, the
   request state), on a snapshot read under those locks. A node whose lease
   ran out and was claimed again, or that someone else moved on, is skipped:
   what this observer saw is discarded, never written over a newer claim's.

With MG_NODE_OBSERVE_BATCH_CLAIM (the default, issue 15) step 1 claims up to
MG_NODE_OBSERVE_BATCH_SIZE nodes in one statement, and MG_NODE_OBSERVE_CONCURRENCY
such claims run side by side (issue 29 item 3: waiting work is bound by round
trips); a claimed batch goes to the providers in a task of its own, up to
MG_NODE_OBSERVE_BATCHES_IN_FLIGHT at once, while its lane claims the next
(issue 47 item 3: a slow provider's batch does not hold the claims). Step 3
writes the outcomes of each provider's part of a batch in one transaction, as
soon as that provider has answered; when every node is still pending — the
common case of waiting work — that is ONE statement
(sql/observe/record_pending_batch.sql: its own lease check, the requests locked
first, one commit) with no snapshot read. Each provider has at most
MG_NODE_OBSERVE_PROVIDER_CONCURRENCY observations in flight across the batches.
With batch claims off, the reference's two phases: an unlocked snapshot of up
to MG_NODE_OBSERVE_BATCH_SIZE due ids, then each node claimed under a miss-only
savepoint and taken through the three steps on its own.

Both paths share everything after the claim: `_lease_params` (step 1's stamp),
`_observe_leased` (steps 2 and 3), `_look` (the provider call, no writes) and
`_record` / `_pending_params` (the writes).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
import trio

from qtg.db import Jsonb, Tx, sql_family
from qtg.domain.execution import build_execution_context
from qtg.domain.observe_policy import (
    MAX_BACKOFF_SECONDS,
    observation_timed_out,
    observe_interval,
)
from qtg.domain.refs import ConfigRefResolutionError
from qtg.domain.states import NodeState, RequestState
from qtg.providers.answers import clean_object, clean_optional_text, clean_text
from qtg.providers.base import ObserveStatus
from qtg.providers.registry import UnknownExecutorError
from qtg.services import progress
from qtg.services.batch import run_each
from qtg.services.context import ServiceContext

log = logging.getLogger("qtg.services.observe")

SQL = sql_family(
    "observe",
    "list_due",
    "claim_node",
    "claim_batch",
    "record_pending_batch",
    "next_due",
    "take_lease",
    "relock_requests",
    "check_leases",
)

N, R = NodeState, RequestState
#: Observations of one pass that run at the same time (each holds a pooled connection).
CONCURRENCY = 5


async def observe_active_nodes(ctx: ServiceContext) -> int:
    """One pass: observe due nodes; returns how many were observed."""
    if ctx.settings.node_observe_batch_claim:
        return await observe_batches(ctx)
    due = await ctx.db.fetch(
        SQL.list_due,
        {
            "limit": ctx.settings.node_observe_batch_size,
            "network_class": ctx.settings.network_class,
        },
    )
    if not due:
        return 0
    return await run_each(lambda row: _observe_one(ctx, row["id"]), due, CONCURRENCY)


#: Batches one lane of a pass takes in turn before the pass ends (the loop then
#: goes round at once while there is work): a pass that ends now and then feeds
#: the worker's heartbeat and metrics.
LANE_BATCHES = 8


async def observe_batches(ctx: ServiceContext) -> int:
    """Up to MG_NODE_OBSERVE_CONCURRENCY lanes side by side (issue 29 item 3),
    each claiming batches in turn while its claims come back full, and up to
    MG_NODE_OBSERVE_BATCHES_IN_FLIGHT claimed batches out at the providers
    (issue 47 item 3).

    Waiting work is bound by round trips: one batch is a claim transaction,
    the provider calls and a write. A lane hands each batch it claimed to a
    task of its own (`_observe_by_provider`) and claims the next at once, so a
    batch waiting on a slow provider holds one in-flight slot, not the lane:
    the other providers' nodes due meanwhile are claimed, asked and written.
    A slot is taken before the claim (a batch is never leased that could not
    be asked at once: its lease would run while it waited). A pass starts
    with one lane; a claim that comes back full (there may be more due work)
    starts another, up to the setting — so a pass with little to do costs one
    claim, as before, not one per lane. The lanes cannot claim each other's
    nodes: a claim leases its nodes (next_observe_at moves past the
    observation) in the transaction that locked them. One lane's or batch's
    failure does not cancel the others' calls in flight (their leases would
    hold their nodes for MG_NODE_OBSERVE_LEASE_SECONDS); it is raised once
    every one has stopped.
    """
    most = ctx.settings.node_observe_concurrency
    size = ctx.settings.node_observe_batch_size
    in_flight = ctx.observe_batch_limit(ctx.settings.node_observe_batches_in_flight)
    observed = 0
    started = 1
    failures: list[Exception] = []

    async def asked(lease: Lease, slot: object) -> None:
        try:
            await _observe_by_provider(ctx, lease)
        except Exception as exc:  # the other batches finish: raised below
            failures.append(exc)
        finally:
            in_flight.release_on_behalf_of(slot)

    async def lane(nursery: trio.Nursery) -> None:
        nonlocal observed, started

        def full() -> None:  # a full claim: another lane, if the setting allows
            nonlocal started
            if started < most:
                started += 1
                nursery.start_soon(lane, nursery)

        try:
            for _turn in range(LANE_BATCHES):
                await ctx.give_way()
                slot = object()
                await in_flight.acquire_on_behalf_of(slot)
                try:
                    lease = await _claim_batch(ctx, on_full=full)
                except BaseException:
                    in_flight.release_on_behalf_of(slot)
                    raise
                nursery.start_soon(asked, lease, slot)
                observed += len(lease.claimed)
                if len(lease.claimed) < size:
                    return
        except Exception as exc:  # the other lanes finish their batches: raised below
            failures.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lane, nursery)
    if failures:
        raise failures[0]
    return observed


async def observe_batch(ctx: ServiceContext, on_full: Callable[[], None] | None = None) -> int:
    """Claim and lease up to MG_NODE_OBSERVE_BATCH_SIZE due nodes in one
    statement and commit; observe them side by side with no lock held; write
    the outcomes whose lease still holds, per provider (`_observe_by_provider`).
    `on_full` is called once the claim has committed, if it took a whole batch."""
    lease = await _claim_batch(ctx, on_full)
    await _observe_by_provider(ctx, lease)
    return len(lease.claimed)


async def _claim_batch(ctx: ServiceContext, on_full: Callable[[], None] | None = None) -> Lease:
    """One short transaction: claim and lease up to MG_NODE_OBSERVE_BATCH_SIZE due
    nodes, and commit. `on_full` is called once it has committed, if it took a
    whole batch."""
    limit = ctx.settings.node_observe_batch_size
    token = uuid.uuid4()
    async with ctx.db.transaction() as tx:
        # BEGIN, the claim, the load of its requests' nodes, the lease of the
        # claimed nodes (their ids from the claim's qtg.claimed_nodes) and the
        # COMMIT: one round trip
        rows, snaps = await progress.claim_with_nodes(
            tx,
            SQL.claim_batch,
            {"limit": limit, "network_class": ctx.settings.network_class},
            commit_with=(SQL.take_lease, _lease_params(ctx, token, None)),
        )
    if on_full is not None and len(rows) >= limit:
        on_full()
    # committed: the rows are unlocked, and leased to this pass
    return _leased(token, rows, snaps)


def _by_provider(lease: Lease) -> list[Lease]:
    """`lease` split by provider (action type and executor key), each part under
    the same token: what one provider answers is written without waiting for
    another's. A request's claimed nodes stay together, in the part of its first
    one (its outcomes are written on one snapshot, each rule seeing the ones
    written before it)."""
    part_of: dict[Any, tuple[str, Any]] = {}
    parts: dict[tuple[str, Any], list[Claimed]] = {}
    for c in lease.claimed:
        provider = part_of.setdefault(
            c.row["request_id"], (c.node["action_type"], c.node["executor_key"])
        )
        parts.setdefault(provider, []).append(c)
    return [Lease(lease.token, claimed, lease.claimed_at) for claimed in parts.values()]


async def _observe_by_provider(ctx: ServiceContext, lease: Lease) -> None:
    """`_observe_leased` for each provider's part of `lease`, side by side. One
    part's failure (its write) does not cancel the others' calls: raised once
    all have stopped."""
    parts = _by_provider(lease)
    if len(parts) <= 1:
        await _observe_leased(ctx, lease)
        return
    failures: list[Exception] = []

    async def part(one: Lease) -> None:
        try:
            await _observe_leased(ctx, one)
        except Exception as exc:
            failures.append(exc)

    async with trio.open_nursery() as nursery:
        for one in parts:
            nursery.start_soon(part, one)
    if failures:
        raise failures[0]


@dataclass(slots=True)
class Done:
    """What a committed observation transaction did, for what follows its commit."""

    #: An outcome released a successor: READY work for a dispatcher.
    released: bool = False
    #: (state, seconds in it at the claim) of every node an outcome moved on.
    left: list[tuple[str, float]] = field(default_factory=list)
    #: trio.current_time() at the claim.
    claimed_at: float = 0.0


def _committed(ctx: ServiceContext, done: Done) -> None:
    """After the commit: wake this process's dispatcher at once when successors
    became READY (the NOTIFY still tells the other processes), and record how
    long each node moved on was in its state."""
    if done.released and ctx.wake is not None:
        ctx.wake("qtg_dispatch")
    since_claim = trio.current_time() - done.claimed_at
    for state, seconds in done.left:
        ctx.node_left_state(state, seconds + since_claim)


async def next_observe_due(ctx: ServiceContext) -> datetime | None:
    """The earliest next_observe_at of an observable node (None: nothing to observe)."""
    # timestamptz or NULL
    value: datetime | None = await ctx.db.fetchval(
        SQL.next_due, {"network_class": ctx.settings.network_class}
    )
    return value


async def _observe_one(ctx: ServiceContext, node_id: Any) -> int:
    async with ctx.db.transaction() as tx:
        row = await tx.claim(
            SQL.claim_node, {"node_id": node_id, "network_class": ctx.settings.network_class}
        )
        if row is None:
            return 0
        snaps = await progress.load_snapshots(tx, [row["request_id"]])
        token = uuid.uuid4()
        tx.defer(SQL.take_lease, _lease_params(ctx, token, [row["id"]]))
    await _observe_leased(ctx, _leased(token, [row], snaps))
    return 1


@dataclass(frozen=True, slots=True)
class Claimed:
    """One claimed node: its claim row (node_state, in_state_seconds, db_now),
    and its request's snapshot and its own row as read under the claim."""

    row: dict[str, Any]
    snap: progress.Snapshot
    node: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Lease:
    """The nodes one claim transaction leased, under one token."""

    token: uuid.UUID
    claimed: list[Claimed]
    #: trio.current_time() at the claim.
    claimed_at: float


def _lease_params(
    ctx: ServiceContext, token: uuid.UUID, node_ids: list[Any] | None
) -> dict[str, Any]:
    """sql/observe/take_lease.sql's parameters: stamp the claimed nodes (`node_ids`,
    or None: those the batch claim recorded) with `token` and a next_observe_at
    past the observation. Written in the claim's transaction, which holds the
    rows: no wait."""
    return {
        "lease": token,
        "lease_seconds": ctx.settings.node_observe_lease_seconds,
        "node_ids": node_ids,
    }


def _leased(
    token: uuid.UUID, rows: list[dict[str, Any]], snaps: dict[Any, progress.Snapshot]
) -> Lease:
    """The Lease of the claimed `rows`, each with its request's snapshot and its own row."""
    claimed = [
        Claimed(row, snaps[row["request_id"]], snaps[row["request_id"]].node_by_id(row["id"]))
        for row in rows
    ]
    return Lease(token, claimed, trio.current_time())


@dataclass(frozen=True, slots=True)
class Observed:
    """What one observation found, before anything is written.

    `status` is the provider's ObserveStatus, or TIMED_OUT (not observed: the
    node is past timeout_policy.observe_seconds)."""

    status: str
    error_code: str | None = None
    detail: str | None = None
    retry_after: float | None = None
    refs: dict[str, Any] | None = None
    artifacts: dict[str, Any] | None = None
    #: The provider could not be asked or did not answer (it raised, timed out,
    #: the executor is gone): "still pending", counted on the node (issue 44).
    failed: bool = False


TIMED_OUT = "TIMED_OUT"


async def _observe_leased(ctx: ServiceContext, lease: Lease) -> None:
    """Observe the leased nodes side by side with no transaction open, then, in
    one short transaction, write the outcomes of those whose lease still holds.
    Nodes of one request share its snapshot, so each outcome's rules see the
    ones written before it."""
    done = Done(claimed_at=lease.claimed_at)
    claimed = lease.claimed
    if not claimed:
        return
    found: list[Observed | None] = [None] * len(claimed)
    limit = ctx.settings.node_observe_lease_seconds / 2

    async def look(i: int) -> None:
        c = claimed[i]
        with trio.move_on_after(limit):
            found[i] = await _look(ctx, c.snap, c.node, c.row["db_now"])
            return
        # cut off well inside the lease: nobody else observes the node meanwhile
        found[i] = Observed(
            ObserveStatus.PENDING, detail=f"observe took longer than {limit:g} s", failed=True
        )

    if len(claimed) == 1:
        await look(0)
    else:
        async with trio.open_nursery() as nursery:
            for i in range(len(claimed)):
                nursery.start_soon(look, i)

    pending = [
        (c, observed)
        for c, observed in zip(claimed, found, strict=True)
        if observed is not None and observed.status == ObserveStatus.PENDING
    ]
    if len(pending) == len(claimed):
        # The common case of waiting work: every node still in flight. One
        # statement, its own lease check, locks and commit (no snapshot: no rule
        # runs on "still pending").
        try:
            rows = await ctx.db.fetch(
                SQL.record_pending_batch, _pending_params(lease.token, pending)
            )
        except Exception as exc:  # a value of one node (unstorable, unencodable)
            if not _node_may_be_the_cause(exc):
                raise
            # One node's row must not cost the batch its write (issue 44 item 2):
            # each node alone; one whose write still fails is recorded as failing.
            rows = await _record_pending_one_by_one(ctx, lease.token, pending, exc)
        written = {r["id"] for r in rows}
        done.left.extend(
            (c.row["node_state"], float(c.row["in_state_seconds"]))
            for c in claimed
            if c.node["id"] in written and c.row["node_state"] != N.OBSERVING
        )
        kept = len(written)
    else:
        try:
            kept = await _record_mixed(ctx, lease, found, done)
        except Exception as exc:  # a rule or a value of one node: the others still written
            if not _node_may_be_the_cause(exc):
                raise
            kept = await _record_mixed_one_by_one(ctx, lease, found, done, exc)
    if kept < len(claimed):
        log.info(
            "observations discarded: lease lost or node moved on",
            extra={"discarded": len(claimed) - kept, "observed": len(claimed)},
        )
    _committed(ctx, done)


def _pending_params(
    token: uuid.UUID, pending: Sequence[tuple[Claimed, Observed]]
) -> dict[str, Any]:
    """sql/observe/record_pending_batch.sql's parameters: "still pending, next at
    T" for these observations, under the lease `token`; a failed observation
    counted as such (its next one spaced out, up to MAX_BACKOFF_SECONDS)."""
    return {
        "lease": token,
        "request_ids": sorted({c.row["request_id"] for c, _ in pending}),
        "node_ids": [c.node["id"] for c, _ in pending],
        "attempts": [c.node["attempt_no"] for c, _ in pending],
        "intervals": [observe_interval(c.node["action_type"], o.retry_after) for c, o in pending],
        "details": [clean_optional_text(o.detail) for _, o in pending],
        "refs": [Jsonb(clean_object(o.refs)) for _, o in pending],
        "artifacts": [Jsonb(clean_object(o.artifacts)) for _, o in pending],
        "failed": [o.failed for _, o in pending],
        "max_backoff": float(MAX_BACKOFF_SECONDS),
    }


def _node_may_be_the_cause(exc: Exception) -> bool:
    """Whether a failed outcome write may be one node's doing (a value the
    database refuses, a rule that raised on it), so that writing the nodes one
    by one saves the others — not a lost connection or a timeout, which the
    next pass meets anyway (and the leases then run out as before)."""
    return not isinstance(exc, psycopg.OperationalError) or isinstance(
        exc, psycopg.errors.ProgramLimitExceeded
    )


async def _record_pending_one_by_one(
    ctx: ServiceContext,
    token: uuid.UUID,
    pending: Sequence[tuple[Claimed, Observed]],
    batch_error: Exception,
) -> list[dict[str, Any]]:
    """The batch's "still pending" write failed: write each node's alone; a node
    whose own write fails is recorded as failing (`_record_write_failure`)."""
    log.warning(
        "observer batch write failed; writing its nodes one by one",
        extra={"nodes": len(pending), "error": _error_text(batch_error)},
    )
    rows: list[dict[str, Any]] = []
    for c, observed in pending:
        try:
            rows.extend(
                await ctx.db.fetch(
                    SQL.record_pending_batch, _pending_params(token, [(c, observed)])
                )
            )
        except Exception as exc:
            if not _node_may_be_the_cause(exc):
                raise
            await _record_write_failure(ctx, token, c, exc)
    return rows


async def _record_mixed_one_by_one(
    ctx: ServiceContext,
    lease: Lease,
    found: Sequence[Observed | None],
    done: Done,
    batch_error: Exception,
) -> int:
    """The batch's outcome transaction failed: each node's outcome in a
    transaction of its own (`_record_mixed` of one); a node whose own write
    fails is recorded as failing."""
    log.warning(
        "observer outcome write failed; writing its nodes one by one",
        extra={"nodes": len(lease.claimed), "error": _error_text(batch_error)},
    )
    kept = 0
    for c, observed in zip(lease.claimed, found, strict=True):
        try:
            kept += await _record_mixed(
                ctx, Lease(lease.token, [c], lease.claimed_at), [observed], done
            )
        except Exception as exc:
            if not _node_may_be_the_cause(exc):
                raise
            await _record_write_failure(ctx, lease.token, c, exc)
    return kept


def _error_text(exc: BaseException) -> str:
    return clean_text(f"{type(exc).__name__}: {exc}")


async def _record_write_failure(
    ctx: ServiceContext, token: uuid.UUID, c: Claimed, exc: Exception
) -> None:
    """What the provider answered for this node could not be written: record
    that on the node as a failed observation (no refs, no artifacts: nothing
    of the answer), under the lease, so it is counted, spaced out and paged
    like any other failure — and the answer is asked for again later."""
    log.error(
        "an observation of this node could not be written; recorded as a failed observation",
        extra={"node_key": c.node["node_key"], "error": _error_text(exc)},
    )
    await ctx.db.fetch(
        SQL.record_pending_batch,
        _pending_params(
            token,
            [
                (
                    c,
                    Observed(
                        ObserveStatus.PENDING,
                        detail=f"the observation could not be stored: {_error_text(exc)}",
                        failed=True,
                    ),
                )
            ],
        ),
    )


async def _record_mixed(
    ctx: ServiceContext, lease: Lease, found: Sequence[Observed | None], done: Done
) -> int:
    """Some observation moved its node on: in one short transaction, re-lock the
    requests, keep the nodes whose lease still holds, and write every outcome
    on a snapshot read under those locks (the PENDING ones in one statement).
    Nodes of one request share its snapshot, so each outcome's rules see the
    ones written before it. Returns how many outcomes were written."""
    claimed = lease.claimed
    request_ids = sorted({c.row["request_id"] for c in claimed})
    async with ctx.db.transaction() as tx:
        requests = await tx.fetch(SQL.relock_requests, {"request_ids": request_ids})
        executing = {r["request_id"] for r in requests}
        held = {
            r["id"]
            for r in await tx.fetch(
                SQL.check_leases,
                {
                    "lease": lease.token,
                    "node_ids": [c.node["id"] for c in claimed],
                    "attempts": [c.node["attempt_no"] for c in claimed],
                },
            )
        }
        kept = [
            (c, observed)
            for c, observed in zip(claimed, found, strict=True)
            if observed is not None and c.node["id"] in held and c.row["request_id"] in executing
        ]
        if not kept:
            return 0
        needed = {c.row["request_id"] for c, _ in kept}
        snaps = await progress.snapshots_from_claim(
            tx, [r for r in requests if r["request_id"] in needed]
        )
        ready_before = {
            n["id"] for snap in snaps.values() for n in snap.nodes if n["node_state"] == N.READY
        }
        pending: list[tuple[Claimed, Observed]] = []
        for c, observed in kept:
            snap = snaps[c.row["request_id"]]
            node = snap.node_by_id(c.node["id"])
            if observed.status == ObserveStatus.PENDING:
                pending.append((c, observed))
                node["node_state"] = N.OBSERVING  # mirrored, as progress does for its changes
            else:
                await _record(tx, snap, node, observed)
            if node["node_state"] != c.row["node_state"]:
                done.left.append((c.row["node_state"], float(c.row["in_state_seconds"])))
        if pending:  # under this transaction's locks and lease check: every one is written
            tx.defer(SQL.record_pending_batch, _pending_params(lease.token, pending))
        done.released = any(
            n["node_state"] == N.READY and n["id"] not in ready_before
            for snap in snaps.values()
            for n in snap.nodes
        )
    return len(kept)


async def _look(
    ctx: ServiceContext, snap: progress.Snapshot, node: dict[str, Any], db_now: datetime
) -> Observed:
    """The provider's answer for one node (no database access; never raises but
    for cancellation: an observation that fails is observed again later)."""
    if ctx.settings.observe_timeout_enforcement_enabled and observation_timed_out(
        node["timeout_policy"], node["started_at"], db_now, enforcement_enabled=True
    ):
        return Observed(TIMED_OUT)
    try:
        context = build_execution_context(snap.request, node, snap.nodes, in_flight=True)
        executor = ctx.providers.executor_for(node["action_type"], node["executor_key"])
        limit = ctx.provider_limit(executor.key, ctx.settings.node_observe_provider_concurrency)
        async with limit:
            await ctx.give_way()
            result = await executor.observe(context)
    except (ConfigRefResolutionError, UnknownExecutorError) as exc:
        # The side effect (if any) is out there: keep watching, and say why we can't.
        log.error("cannot observe node", extra={"node_key": node["node_key"], "error": str(exc)})
        return Observed(ObserveStatus.PENDING, detail=f"cannot observe: {exc}", failed=True)
    except Exception as exc:
        # Still pending (the side effect may be out there), but counted on the
        # node: spaced out, and paged past the bound (issue 44 item 2).
        log.warning(
            "observe raised; will observe again",
            extra={"node_key": node["node_key"], "error": _error_text(exc)},
        )
        return Observed(
            ObserveStatus.PENDING, detail=f"observe raised {_error_text(exc)}", failed=True
        )
    if result.status == ObserveStatus.PENDING:
        return Observed(
            ObserveStatus.PENDING,
            retry_after=result.retry_after_seconds,
            refs=result.provider_refs,
            artifacts=result.artifacts,
        )
    return Observed(
        result.status,
        error_code=result.error_code,
        detail=result.error_detail,
        refs=result.provider_refs,
        artifacts=result.artifacts,
    )


async def _record(
    tx: Tx, snap: progress.Snapshot, node: dict[str, Any], observed: Observed
) -> None:
    """Write one outcome that moves its node on (deferred: sent with the commit);
    "still pending" is written for the whole batch at once (`_pending_params`)."""
    if observed.status == TIMED_OUT:
        # Never FAILED: the side effect may still land; an operator decides (reference §2).
        # The timeout is a paging signal: the derivation (waits_for_operator)
        # moves the request to MANUAL_INTERVENTION once nothing is in flight —
        # now, or when the last sibling settles.
        await progress.node_finished_badly(
            tx,
            snap,
            node,
            N.UNKNOWN,
            "OBSERVATION_TIMEOUT",
            "not finished within timeout_policy.observe_seconds="
            f"{node['timeout_policy'].get('observe_seconds')}",
        )
    elif observed.status == ObserveStatus.COMPLETED:
        await progress.complete_node(tx, snap, node, observed.refs, observed.artifacts)
    elif observed.status == ObserveStatus.FAILED:
        await progress.node_finished_badly(
            tx, snap, node, N.FAILED, observed.error_code or "OBSERVED_FAILED", observed.detail
        )
    else:
        await progress.node_finished_badly(
            tx, snap, node, N.UNKNOWN, observed.error_code or "OBSERVED_UNKNOWN", observed.detail
        )
