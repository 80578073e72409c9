"""node_dispatcher (reference §1): feed READY nodes into the execution pipeline.

With MG_NODE_DISPATCH_BATCH_SIZE=1, one node per pass (the reference): the
claim walks unlocked FIFO candidates and claims each under a miss-only
savepoint. Above 1 (issue 15), `dispatch_batch` claims up to that many nodes
in one statement (an index walk in FIFO order) and keeps the first per request
(the others wait, READY, for the next pass); everything below then holds for
each node of the batch.

No lock is held across a provider call (issue 44 item 3; the observer's and
recovery's lease pattern). In the claim's transaction, holding node and
request: the request to EXECUTING, plan-hash drift check → ExecutionContext
(with `$ref` resolution) → the plan's risk controls → the policy's word; then
the node is leased — still READY, with the pass's token in dispatch_lease and
a dispatch_not_before past the prepare's cut-off, so no claim walk takes it —
and the claim commits. Then, with no transaction open: preflight → prepare →
sign, cut off at half MG_NODE_OBSERVE_LEASE_SECONDS, in groups side by side
(`drive_leased`: the executors with nonce lanes together, any other executor
alone). Then the write-ahead step (DESIGN §4),
one transaction per group: request and node locked again, the node goes on
only if the lease still holds the token, it is READY in the same attempt and
the request APPROVED or EXECUTING (a request goes EXECUTING with its first
write-ahead: a claim that only leased commits asynchronously,
`commit_lease_asynchronously`); the drift check runs again on what is stored now, the
policy decides again and charges under its ledger's lock; the node becomes
SUBMITTING with its prepared action and idempotency key, and that is
COMMITTED before the executor's submit is called. A crash after that commit
leaves SUBMITTING, which node_recovery resolves through recover() — submit is
never called twice for one attempt. A crash before it leaves the node READY
under a lease that expires (sql/dispatch/release_due.sql clears it like any
due wait) and the node is claimed again: nothing was sent.

Nothing before the write-ahead commit has a side effect, so any failure there
is a safe FAILED (an operator may retry), written by the write-ahead
transaction under the lease — except a `RetryLater` (issue 24
item 5: an RPC that does not answer, a fee above its cap): the node stays
READY and is not claimed before its `dispatch_not_before`, a backoff capped
by MG_NODE_TRANSIENT_RETRY_MAX_SECONDS, and pages past
MG_NODE_TRANSIENT_ATTENTION_SECONDS (qtg.services.node_attention). After
the write-ahead commit, only the executor's own `SubmitRejected` (or
`RetryLater`) means "nothing happened"; any other error is UNKNOWN — except a
dead database connection (psycopg.OperationalError), which says nothing about
the provider: the node is left SUBMITTING, for recovery to find out.

Lock order (relied on by `submit_all`): the claim and the write-ahead take a
request, then its node (the write-ahead: its requests in id order, waiting),
then the policy ledger's lock; prepare and sign hold none. While the submits run and while their
outcomes are written, `submit_all` holds only its batch's SUBMITTING node rows
(taken in one statement, in id order) and waits for no other lock. The request
is locked afterwards, in a transaction of its own, to move the request on. The
observer, recovery and the API operations do hold a request and then touch its
nodes (the API paths take the request with a plain, waiting FOR UPDATE) — but
none of them waits for a SUBMITTING node's row: claims skip locked rows, and
the API's node updates are filtered to BLOCKED/READY/FAILED nodes. So no cycle
can form, and a submit's outcome is never lost behind an observer's provider
call (issue 10). Every claim and lock of a request or node row is FOR NO KEY
UPDATE, not FOR UPDATE: as exclusive among the workers and the API, but not in
conflict with the foreign-key checks (FOR KEY SHARE) of the movement_events
rows that the outcome's UPDATE writes — with FOR UPDATE those would wait for
the request.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import msgspec
import psycopg
import trio

from qtg.db import Jsonb, PoolTimeout, Tx, sql_family
from qtg.domain.context import ExecutionContext
from qtg.domain.execution import (
    build_execution_context,
    idempotency_key,
    plan_hash_drifted,
    risk_control_violation,
)
from qtg.domain.faults import (
    CLAIM_TRIES_PER_PASS,
    CLAIM_TRIES_PER_TRANSACTION,
    transient_retry_seconds,
)
from qtg.domain.plan import PlanError
from qtg.domain.refs import ConfigRefResolutionError
from qtg.domain.states import NodeState, RequestState
from qtg.providers.answers import contains_nul
from qtg.providers.base import (
    Executor,
    PreparedAction,
    ProviderError,
    RetryLater,
    SubmitRejected,
    SubmitResult,
)
from qtg.providers.registry import UnknownExecutorError, UnknownSignerError
from qtg.services import custody, policies, progress
from qtg.services.batch import run_each_isolated
from qtg.services.context import ServiceContext

log = logging.getLogger("qtg.services.dispatch")

SQL = sql_family(
    "dispatch",
    "list_candidates",
    "claim_candidate",
    "claim_batch",
    "write_ahead",
    "start_observing",
    "lock_submitting",
    "lock_request",
    "record_submitted",
    "notify_recover",
    "release_due",
    "next_due",
    "defer_node",
    "back_to_ready",
    "take_lease",
    "lease_commit",
    "relock",
    "end_lease",
    "end_policy_waits",
)

N, R = NodeState, RequestState

#: How many unlocked candidate ids one listing returns.
CANDIDATE_PAGE = 10
#: How many waiting nodes one pass puts back into the claim's walk (issue 24 item 5).
RELEASE_DUE_LIMIT = 256
#: `drive_leased`'s group of the nodes whose executors have nonce lanes (`lane_key`).
NONCE_LANES = "nonce lanes"
#: The error code of a node sent back to READY because an earlier submit of its
#: nonce lane was refused or ambiguous in the same batch (issue 24 item 8).
LANE_STOPPED = "LANE_STOPPED"


@dataclass(frozen=True, slots=True)
class Submission:
    """A node committed as SUBMITTING, to be submitted outside the claim transaction."""

    request_id: Any
    node_id: Any
    attempt_no: int
    idempotency_key: str
    context: ExecutionContext
    prepared: PreparedAction
    signature: str | None
    executor: Executor


async def dispatch_ready_nodes(ctx: ServiceContext) -> int:
    """One pass: claim READY nodes and drive them as far as submit.

    With MG_NODE_DISPATCH_BATCH_SIZE = 1 a pass claims at most one node (the
    reference's walk, `dispatch_one_node`); above 1, `dispatch_batch`.

    With MG_NODE_DISPATCH_CONCURRENCY = n > 1 a pass runs n such single-node
    dispatches side by side, each its own claim and transactions — as n
    runtime processes would, so one that fails does not cancel the others'
    submits (the first failure is raised once all have finished). The
    default is 1 unit of MG_NODE_DISPATCH_BATCH_SIZE (16) nodes; the
    reference's serial dispatcher is concurrency 1 with batch size 1 (docs/engine.md,
    "The default dispatcher and observer"). Returns how many nodes were
    dispatched.
    """
    if ctx.durability is not None and await ctx.durability.holds_submits(ctx):
        await release_due_waits(ctx)
        return 0  # MG_REQUIRE_SYNCHRONOUS_REPLICATION: nodes stay READY, paged
    concurrency = ctx.settings.node_dispatch_concurrency
    release = release_may_be_due(ctx)
    if ctx.settings.node_dispatch_batch_size > 1 and concurrency == 1:
        # the release travels, committed on its own, in the claim's round trip
        return await dispatch_batch(ctx, release_due=release)
    if release:
        await release_due_waits(ctx)
    unit = dispatch_one_node if ctx.settings.node_dispatch_batch_size == 1 else dispatch_batch
    if concurrency == 1:
        return await unit(ctx)
    return await run_each_isolated(lambda _: unit(ctx), range(concurrency), concurrency)


#: sql/dispatch/release_due.sql's parameters.
RELEASE_DUE_PARAMS = {"limit": RELEASE_DUE_LIMIT}


async def release_due_waits(ctx: ServiceContext) -> int:
    """READY nodes whose transient wait (dispatch_not_before) is over go back into
    the claim's walk; how many. One statement, an index walk of the waiting nodes,
    in a transaction of its own (a single statement: one round trip).
    `dispatch_batch(release_due=True)` sends the same transaction ahead of its
    claim's BEGIN instead, in the claim's round trip."""
    return len(await ctx.db.fetch(SQL.release_due, RELEASE_DUE_PARAMS))


def release_may_be_due(ctx: ServiceContext) -> bool:
    """Whether this pass must release due waits: unless the dispatcher's last
    reading of them (`next_dispatch_due`), younger than twice its interval, says
    none is due (qtg.services.known_waits says why, and why the bound)."""
    return ctx.dispatch_waits.release_needed(
        at=trio.current_time(), max_age=2 * ctx.settings.node_dispatch_interval_seconds
    )


async def next_dispatch_due(ctx: ServiceContext) -> Any:
    """When the earliest waiting READY node may be claimed (None: none waits), so the
    dispatcher sleeps exactly until then, not a whole interval; kept, as seconds
    left by the database's clock, as the reading `release_may_be_due` goes by."""
    at = trio.current_time()
    row = await ctx.db.fetchrow(SQL.next_due, {})
    ctx.dispatch_waits.read(None if row is None else row["seconds_left"], at)
    return None if row is None else row["due"]


async def dispatch_one_node(ctx: ServiceContext) -> int:
    """Claim at most one READY node and drive it as far as submit. Returns 0 or 1."""
    walk = ClaimWalk(ctx.settings.network_class)
    while not walk.finished:
        lease = uuid.uuid4()
        leases: list[Leased] = []
        with ctx.right_of_way.dispatching():  # the observer gives way until the commit
            async with ctx.db.transaction() as tx:
                claimed = await walk.step(tx)
                if claimed is None:
                    continue  # nothing claimed: this transaction did nothing
                if await _lease(ctx, tx, lease, *claimed, leases):
                    commit_lease_asynchronously(tx)
                defer_lease(ctx, tx, lease, leases)
        # the claim and its lease committed when the transaction above closed
        if walk.last is not None:
            ctx.node_left_state(N.READY, walk.last["in_state_seconds"])
        await drive_leased(ctx, lease, leases)
        return 1
    if not walk.exhausted:
        log.warning(
            "dispatch claim walk stopped at its bound; the rest waits for the next pass",
            extra={"tries": walk.tries, "locked_requests": len(walk.missed_requests)},
        )
    return 0


async def dispatch_batch(ctx: ServiceContext, *, release_due: bool = False) -> int:
    """Claim up to MG_NODE_DISPATCH_BATCH_SIZE READY nodes in one statement and
    lease them (one commit); prepare and sign them with no transaction open;
    write their write-ahead SUBMITTING rows, then submit them. Returns how many
    nodes were dispatched (the batch, without the rows left out of it).

    Round trips up to the lease's commit (issue 29 item 5): two. The first
    carries `release_due_waits`'s transaction when `release_due` (a wait may
    be due: `release_may_be_due`; committed on its own before the claim's
    BEGIN, as if sent alone), the BEGIN, the claim
    and the load of the claimed requests' nodes; the second the deferred
    writes (the lease among them) and the COMMIT.

    Every check of the single-node path runs per node, on the same locks (node
    and request, FOR NO KEY UPDATE) in the claim (`_lease`) and again in the
    write-ahead (`_write_ahead`): at most one node per request is in a batch —
    the claim picks the oldest READY node of each of the oldest ready requests
    (migrations/0021), so every ready request gets its turn at each pass,
    whatever the width of an older one (issue 25). Nothing before a
    write-ahead commit has a side effect. The leased nodes are prepared in
    groups side by side (`drive_leased`): one for every executor with nonce
    lanes (`lane_key`: evm, contract calls, CCIP; a lane may span several of
    them), one per other executor. A group's nodes are prepared one after the
    other in claim order — so the nodes of one nonce lane reserve their nonces
    in claim order — then the group's write-ahead rows go in one commit, then
    `submit_all` submits each lane in that order. A slow provider call delays
    its own group only, and holds no lock. One failing group does not cancel
    the others (its error is raised once all finished and their outcomes are
    committed).
    """
    lease = uuid.uuid4()
    leases: list[Leased] = []
    with ctx.right_of_way.dispatching():  # the observer gives way until the commit
        async with ctx.db.transaction() as tx:
            if release_due:
                tx.defer_before(SQL.release_due, RELEASE_DUE_PARAMS)
            # BEGIN, the claim and the load of its requests' nodes: one round trip
            rows, snaps = await progress.claim_with_nodes(
                tx,
                SQL.claim_batch,
                {
                    "network_class": ctx.settings.network_class,
                    "limit": ctx.settings.node_dispatch_batch_size,
                },
            )
            batch = first_per_request(rows)
            await policies.lock_for_dispatch(tx, (snap.request for snap in snaps.values()))
            only_leases = True
            for row in batch:
                leased = await _lease(ctx, tx, lease, row["id"], snaps[row["request_id"]], leases)
                only_leases = only_leases and leased
            defer_lease(ctx, tx, lease, leases)  # the whole batch's, in one statement
            if leases and only_leases:
                commit_lease_asynchronously(tx)
    # the claim and its leases committed when the block above closed; it also
    # released the rows left out of the batch, still READY
    for row in batch:
        ctx.node_left_state(N.READY, row["in_state_seconds"])
    await drive_leased(ctx, lease, leases)
    # How many nodes this pass dispatched (a left-out row is not counted: it
    # is dispatched, and counted, by a later pass). Never 0 when rows were
    # left out, so the loop's drain runs the next pass at once to take them.
    return len(batch)


def first_per_request(rows: list[Any]) -> list[Any]:
    """The batch of a claim: its first row per request, in claim order.

    The claim (sql/dispatch/claim_batch.sql) already returns one node per
    request (a skip scan over the requests, migrations/0021); this keeps the
    batch's invariant explicit should a claim ever return more. A row left out
    would stay locked and READY until this transaction ends, then the next
    pass would take it — exactly as if the claim had skipped it.
    """
    seen: set[Any] = set()
    out = []
    for row in rows:
        if row["request_id"] not in seen:
            seen.add(row["request_id"])
            out.append(row)
    return out


def lane_key(sub: Submission) -> str | None:
    """The nonce lane of a submission: the executor's `lane_key(prepared)` if it
    has one (evm: chain and sender), else None — no ordering constraint."""
    key_of = getattr(sub.executor, "lane_key", None)
    return None if key_of is None else key_of(sub.prepared)


def lanes(submissions: list[Submission]) -> list[list[Submission]]:
    """Group submissions into sequences that must run in order: one per nonce
    lane (in claim order), one of its own for each lane-less submission."""
    grouped: dict[str, list[Submission]] = {}
    out: list[list[Submission]] = []
    for sub in submissions:
        key = lane_key(sub)
        if key is None:
            out.append([sub])
        elif key in grouped:
            grouped[key].append(sub)
        else:
            grouped[key] = [sub]
            out.append(grouped[key])
    return out


async def submit_all(ctx: ServiceContext, submissions: list[Submission]) -> None:
    """Submit a committed write-ahead batch and record every outcome in ONE
    transaction, which holds all the batch's SUBMITTING rows (one statement)
    while the submits run: every lane side by side, each lane's submissions in
    order. Recovery skips held rows, so it can never recover an attempt whose
    submit is in flight; a crash, a cancellation (shutdown) or a lost
    connection rolls back and leaves the nodes SUBMITTING for recovery, exactly
    as for one node.

    A refused (FAILED) or ambiguous (UNKNOWN) submit stops the rest of its
    lane in this batch (issue 24 item 8): those nodes were never submitted and
    go back to READY (`LANE_STOPPED`, a new attempt follows) with their
    unsigned nonce reservations released, so no later nonce of the lane is
    broadcast behind a released or doubtful one. A submit that raises
    `RetryLater` (refused before any side effect, may clear by itself) goes
    back to READY too, waiting its `retry_after_seconds`.

    A lane's error (a lost database connection in submit) ends that lane — the
    rest of it stays SUBMITTING, and no later nonce jumps a failed one — but
    not its siblings: their outcomes are still committed, then the error is
    raised. A FAILED/UNKNOWN outcome is written on the held node row alone;
    each such request then moves on under its own lock, in a transaction of
    its own (see the module docstring on lock order).
    """
    if not submissions:
        return
    submitted: list[Submission] = []
    results: list[SubmitResult] = []  # of `submitted`, in the same order
    bad: list[Submission] = []  # FAILED/UNKNOWN outcomes
    unknown: set[Any] = set()  # requests with an UNKNOWN outcome
    #: refused before any side effect, may clear by itself: back to READY, waiting
    retry: list[tuple[Submission, RetryLater]] = []
    #: never submitted: an earlier submit of their lane was refused or ambiguous
    stopped: list[Submission] = []
    failure: Exception | None = None
    async with ctx.db.transaction() as tx:
        held = {
            row["id"]: row["in_state_seconds"]
            for row in await tx.fetch(
                SQL.lock_submitting,
                {
                    "node_ids": [s.node_id for s in submissions],
                    "attempt_nos": [s.attempt_no for s in submissions],
                },
            )
        }
        locked_at = trio.current_time()
        for sub in submissions:
            if sub.node_id not in held:
                log.warning(
                    "SUBMITTING node moved before submit; not submitting",
                    extra={"node_id": str(sub.node_id)},
                )

        async def run_lane(lane: list[Submission]) -> int:
            for i, sub in enumerate(lane):
                outcome, result, wait = await _submit_held(tx, sub)
                if result is not None:
                    submitted.append(sub)
                    results.append(result)
                    continue
                if wait is not None:
                    retry.append((sub, wait))
                else:
                    bad.append(sub)
                    if outcome == N.UNKNOWN:
                        unknown.add(sub.request_id)
                # Issue 24 item 8: the later nonces of this lane must not go out
                # behind a refused (released) or ambiguous one in this batch: they
                # go back to READY, their unsigned reservations released.
                if i + 1 < len(lane):
                    stopped.extend(lane[i + 1 :])
                    log.warning(
                        "nonce lane stopped after a refused or ambiguous submit",
                        extra={
                            "node_id": str(sub.node_id),
                            "lane": lane_key(sub),
                            "stopped": len(lane) - i - 1,
                        },
                    )
                break
            return len(lane)

        groups = lanes([s for s in submissions if s.node_id in held])
        try:
            await run_each_isolated(run_lane, groups, len(groups))
        except Exception as exc:  # one lane's error: the others' outcomes still commit
            failure = exc
        if submitted:  # every SUBMITTED outcome of the batch, one statement
            tx.defer(
                SQL.record_submitted,
                {
                    "node_ids": [sub.node_id for sub in submitted],
                    "provider_refs": [Jsonb(r.provider_refs) for r in results],
                    "artifacts": [Jsonb(r.artifacts) for r in results],
                },
            )
        for sub, why in retry:
            await _back_to_ready(ctx, tx, [sub], why.code, why.detail, why.retry_after_seconds)
        if stopped:
            await _back_to_ready(
                ctx,
                tx,
                stopped,
                LANE_STOPPED,
                "not submitted: an earlier transaction of its nonce lane was refused or "
                "its outcome is unknown; a new attempt follows",
                0.0,
            )

    if submitted and ctx.wake is not None:
        ctx.wake("qtg_observe")  # SUBMITTED is due now: this process's observer, at once
    committed_after = trio.current_time() - locked_at
    for sub in (*submitted, *bad, *(s for s, _ in retry), *stopped):
        ctx.node_left_state(N.SUBMITTING, float(held[sub.node_id]) + committed_after)
    # Then each request with a failed node follows, under its lock; we hold nothing now.
    for request_id in dict.fromkeys(sub.request_id for sub in bad):
        async with ctx.db.transaction() as tx:
            await tx.fetchrow(SQL.lock_request, {"request_id": request_id})
            snap = await progress.load_snapshot(tx, request_id)
            await progress.refresh_frontier(tx, snap)
            await progress.settle_request_state(tx, snap)
            if request_id in unknown:
                # The UNKNOWN commit's qtg_recover came while this transaction was
                # about to hold the request: a recovery pass then skipped the node
                # (and found no due time) and would sleep its whole interval. Say
                # it again once the request is free, i.e. at this commit.
                tx.defer(SQL.notify_recover)
    if failure is not None:
        raise failure


@dataclass(slots=True)
class ClaimWalk:
    """The reference's per-candidate claim walk (§1), bounded.

    Each step runs in one transaction: walk unlocked
    FIFO candidates and claim each under a miss-only savepoint — a miss rolls
    back only that savepoint, releasing any partial lock. Beyond the reference
    (issue 10), a miss excludes the candidate's whole request from the rest of
    the walk (its READY nodes all miss while someone holds it), a step makes
    at most CLAIM_TRIES_PER_TRANSACTION claims (each is a subtransaction), and
    the walk stops after CLAIM_TRIES_PER_PASS claims in all.
    """

    network_class: str
    missed_requests: list[Any] = field(default_factory=list)
    tries: int = 0
    exhausted: bool = False
    #: The last row claimed (for the pickup histogram, once its commit happened).
    last: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.exhausted or self.tries >= CLAIM_TRIES_PER_PASS

    async def claim(self, tx: Tx) -> dict[str, Any] | None:
        """One transaction's share of the walk: the claimed row (node and request
        locked), or None — then `exhausted` says whether anything is left."""
        budget = min(CLAIM_TRIES_PER_TRANSACTION, CLAIM_TRIES_PER_PASS - self.tries)
        while budget > 0:
            candidates = await tx.fetch(
                SQL.list_candidates,
                {
                    "tried": self.missed_requests,
                    "network_class": self.network_class,
                    "limit": CANDIDATE_PAGE,
                },
            )
            if not candidates:
                self.exhausted = True
                return None
            for candidate in candidates:
                if candidate["request_id"] in self.missed_requests:
                    continue  # a sibling of this page already missed on it
                if budget == 0:
                    return None
                budget -= 1
                self.tries += 1
                row = await tx.claim(
                    SQL.claim_candidate,
                    {"candidate_id": candidate["id"], "network_class": self.network_class},
                )
                if row is not None:
                    self.last = row
                    return row
                self.missed_requests.append(candidate["request_id"])
        return None

    async def step(self, tx: Tx) -> tuple[Any, progress.Snapshot] | None:
        """`claim`, then read the claimed node's request."""
        row = await self.claim(tx)
        if row is None:
            return None
        return row["id"], await progress.load_snapshot(tx, row["request_id"], plan_edges=True)


async def claim_ready_node(tx: Tx, network_class: str) -> dict[str, Any] | None:
    """Claim one READY node (node and request locked) within `tx`'s share of the
    walk; its id and request id."""
    return await ClaimWalk(network_class).claim(tx)


@dataclass(slots=True)
class Leased:
    """A READY node under this pass's committed dispatch lease (issue 44 item 3),
    with what its claim read; prepared and signed with no transaction open
    (`prepare_leased`), then written ahead only if the lease still holds
    (`_write_ahead`). Exactly one of `prepared`, `failure` and `wait` is set
    once it is prepared."""

    snap: progress.Snapshot
    node: dict[str, Any]
    context: ExecutionContext
    executor: Executor | None = None
    prepared: PreparedAction | None = None
    signature: str | None = None
    #: a safe FAILED (nothing was signed for broadcast): code and detail
    failure: tuple[str, str] | None = None
    #: a transient fault: the node stays READY and waits (issue 24 item 5)
    wait: RetryLater | None = None
    #: the claim held the movement's policy charge for the lease (`policies.hold`)
    held: bool = False

    @property
    def request_id(self) -> Any:
        return self.snap.request["id"]

    @property
    def node_id(self) -> Any:
        return self.node["id"]


def plan_drift(snap: progress.Snapshot) -> str | None:
    """Why the movement's plan no longer matches the hash it was approved under, if
    it does not (checked at the claim and again, under the locks, at the write-ahead)."""
    try:
        drifted = plan_hash_drifted(snap.request, snap.nodes, snap.plan_edges)
    except PlanError as exc:
        return f"stored plan no longer compiles: {exc}"
    return (
        "plan, intent or input_params changed since the movement was created" if drifted else None
    )


async def _fail(
    tx: Tx, snap: progress.Snapshot, node: dict[str, Any], code: str, detail: str
) -> None:
    """A held node FAILED before any side effect (an operator may retry)."""
    log.warning(
        "node failed before submit",
        extra={
            "request_id": str(snap.request["id"]),
            "node_key": node["node_key"],
            "error_code": code,
        },
    )
    await progress.node_finished_badly(tx, snap, node, N.FAILED, code, detail)


async def _lease(
    ctx: ServiceContext,
    tx: Tx,
    lease: uuid.UUID,
    node_id: Any,
    snap: progress.Snapshot,
    leases: list[Leased],
) -> bool:
    """The claim transaction's share of one claimed node, everything that needs
    no provider: the plan-hash drift check, the ExecutionContext, an observe
    node to OBSERVING, the risk controls and the policy's word (a blocked node
    waits). A node that passes them all is added to `leases`: the caller stamps
    its lease (`defer_lease`) in this transaction. Returns whether the node was
    leased and nothing else written (its request goes EXECUTING with the
    write-ahead then: `_executing`)."""
    node = snap.node_by_id(node_id)
    why = plan_drift(snap)
    if why is not None:
        await _executing(tx, snap)
        await _fail(tx, snap, node, "PLAN_HASH_DRIFT", why)
        return False

    try:
        context = build_execution_context(snap.request, node, snap.nodes)
    except ConfigRefResolutionError as exc:
        await _executing(tx, snap)
        await _fail(tx, snap, node, "CONFIG_REF_UNRESOLVED", str(exc))
        return False

    if node["node_kind"] == "observe":
        await _executing(tx, snap)
        tx.defer_row(
            SQL.start_observing,
            {"node_ids": node["id"], "attempt_nos": context.attempt_no},
            unit=snap.request["id"],
            row_id=node["id"],
        )
        return False

    violation = risk_control_violation(snap.request["risk_controls"], snap.request["intent"])
    if violation is not None:
        await _executing(tx, snap)
        await _fail(tx, snap, node, "RISK_CONTROL_VIOLATION", violation)
        return False

    # Issue 45: a policy that blocks the movement now keeps it from being prepared
    # at all. Allowed, its charge is held while it prepares with no lock held, so
    # no other movement is let out on the same room meanwhile; the write-ahead
    # transaction decides again and writes the charge with the write-ahead.
    policy = await policies.check_at_dispatch(tx, snap.request, node)
    if policy.wait is not None:
        await _executing(tx, snap)
        await defer(ctx, tx, node, policy.wait)
        return False
    await policies.hold(tx, policy, lease, lease_seconds(ctx))
    leases.append(Leased(snap, node, context, held=policy.charge is not None))
    return True


async def _executing(tx: Tx, snap: progress.Snapshot) -> None:
    """APPROVED → EXECUTING, in the transaction that first changes one of its
    nodes: a claim that fails, defers or starts observing a node, or the
    write-ahead of a leased one (not the lease itself, which changes no state)."""
    if snap.request["request_state"] == R.APPROVED:
        await progress.set_request_state(tx, snap, R.EXECUTING)


def commit_lease_asynchronously(tx: Tx) -> None:
    """A claim transaction that wrote nothing but leases (and their policy holds)
    commits without waiting for its WAL flush (`SET LOCAL synchronous_commit TO
    off`, sql/dispatch/lease_commit.sql): one fsync less on every pickup.

    Safe because a lease is no state and no side effect: nothing is sent before
    the write-ahead, whose own commit is synchronous and, the WAL being one
    sequence, flushes the lease's record before its own. A lease lost to a crash
    (or a failover) leaves the node READY and unleased, as if never claimed; the
    runtime that prepared under it finds its token gone at the write-ahead
    (sql/dispatch/relock.sql) and discards. A claim that changed a state (a node
    failed, deferred or observing, a request EXECUTING) commits synchronously:
    the stream and the callbacks never show a state the database could forget."""
    tx.defer(SQL.lease_commit, {})


def lease_seconds(ctx: ServiceContext) -> float:
    """How long a dispatch lease holds: MG_NODE_OBSERVE_LEASE_SECONDS, the observer's
    and recovery's lease; prepare and sign are cut off at half of it."""
    return float(ctx.settings.node_observe_lease_seconds)


def defer_lease(ctx: ServiceContext, tx: Tx, lease: uuid.UUID, leases: list[Leased]) -> None:
    """Defer the dispatch lease of `leases` (sql/dispatch/take_lease.sql), one
    statement for all, committed with the claim."""
    if leases:
        tx.defer(
            SQL.take_lease,
            {
                "lease": lease,
                "lease_seconds": lease_seconds(ctx),
                "node_ids": [leased.node_id for leased in leases],
            },
        )


async def drive_leased(ctx: ServiceContext, lease: uuid.UUID, leases: list[Leased]) -> None:
    """Prepare, write ahead and submit the leased nodes of a committed claim, in
    groups side by side (see `dispatch_batch`)."""
    groups: dict[Any, list[Leased]] = {}
    for leased in leases:
        node = leased.node
        try:
            executor = ctx.providers.executor_for(node["action_type"], node["executor_key"])
        except (UnknownExecutorError, UnknownSignerError):
            key: Any = node["id"]  # it fails alone, in `prepare_leased`
        else:
            # Every executor with nonce lanes in one group: a lane (one sender on one
            # chain) may be shared by several (an EVM transfer, a CCIP send), and its
            # nonces must be reserved and submitted in claim order (issue 15, 24 item 8)
            key = NONCE_LANES if hasattr(executor, "lane_key") else id(executor)
        groups.setdefault(key, []).append(leased)

    # One cut-off for the whole pass, half the lease after its claim: a group's nodes
    # are prepared one after the other, and a per-node cut-off would let a slow group
    # outlive its lease (another claim then signs the same attempt beside it).
    cut_off_at = trio.current_time() + lease_seconds(ctx) / 2

    async def run_group(group: list[Leased]) -> int:
        with ctx.right_of_way.dispatching():  # the observer gives way until the commit
            for leased in group:
                await prepare_leased(ctx, leased, cut_off_at)
            submissions = await _write_ahead(ctx, lease, group)
        await submit_all(ctx, submissions)
        return len(group)

    await run_each_isolated(run_group, list(groups.values()), len(groups))


async def prepare_leased(ctx: ServiceContext, leased: Leased, cut_off_at: float) -> None:
    """Preflight, prepare and sign one leased node, with no transaction open and no
    row held (issue 44 item 3), cut off at `cut_off_at` (trio's clock; half the
    lease after the claim): past it the node waits like any transient fault
    (nothing was signed for broadcast). Sets the outcome on `leased`."""
    with trio.move_on_at(cut_off_at) as scope:
        await _prepare_and_sign(ctx, leased)
    if scope.cancelled_caught:
        leased.prepared = leased.signature = leased.failure = None
        leased.wait = RetryLater(
            f"prepare and sign did not finish within {lease_seconds(ctx) / 2:g} s of the "
            "claim (half the dispatch lease)",
            code="PREPARE_TIMEOUT",
        )


async def _prepare_and_sign(ctx: ServiceContext, leased: Leased) -> None:
    node, context = leased.node, leased.context
    try:
        executor = ctx.providers.executor_for(node["action_type"], node["executor_key"])
        await executor.preflight(context)
        prepared = await executor.prepare(context)
        leased.executor = executor
        if hashlib.sha256(prepared.payload.encode()).hexdigest() != prepared.payload_hash:
            leased.failure = (
                "PAYLOAD_HASH_MISMATCH",
                "prepared payload does not hash to its payload_hash",
            )
            return
        if contains_nul(msgspec.to_builtins(prepared)):
            # One node's unstorable write-ahead row would fail the batch's one
            # write-ahead statement for every node of it, pass after pass (issue 44
            # item 2). Nothing was signed or sent: a safe FAILED for this node alone.
            leased.failure = (
                "PREPARED_ACTION_UNSTORABLE",
                "the prepared action holds a NUL character, which the database cannot store",
            )
            return
        signature = None
        if prepared.needs_signature:
            if not prepared.signer_key:
                leased.failure = (
                    "SIGNER_NOT_NAMED",
                    "the prepared action needs a signature but names no signer",
                )
                return
            signer = ctx.providers.signer(prepared.signer_key)
            # the signer side checks the payload against the approved movement first
            signature = await custody.sign_approved(
                ctx.db, signer, leased.snap, node, context, prepared
            )
    except (UnknownExecutorError, UnknownSignerError) as exc:
        leased.failure = ("EXECUTOR_NOT_FOUND", str(exc))
    except RetryLater as exc:
        # Transient (issue 24 item 5): nothing was sent and the cause may clear by
        # itself. The node stays READY, waits, and pages past the attention threshold.
        leased.wait = exc
    except (psycopg.OperationalError, PoolTimeout) as exc:
        # The database, not the payment: a connection refused or lost inside prepare
        # (the nonce reservation) says nothing about the movement (issue 43 item 6).
        # Nothing was signed for broadcast; the node waits like any transient fault.
        # (Should the database stay away, the write-ahead transaction fails too, and
        # the node is claimed again once its lease expires.)
        leased.wait = RetryLater(
            f"the database did not answer during prepare: {type(exc).__name__}",
            code="DATABASE_UNAVAILABLE",
            retry_after_seconds=2.0,
        )
    except ProviderError as exc:
        leased.failure = (exc.code, exc.detail)
    except Exception as exc:  # no side effect yet: a safe FAILED, not a stuck queue head
        log.exception("preparing a node raised", extra={"node_key": node["node_key"]})
        leased.failure = ("PREPARE_ERROR", f"{type(exc).__name__}: {exc}")
    else:
        leased.prepared, leased.signature = prepared, signature


async def _write_ahead(
    ctx: ServiceContext, lease: uuid.UUID, group: list[Leased]
) -> list[Submission]:
    """The write-ahead transaction of prepared leased nodes (DESIGN §4): each
    request and node locked again (sql/dispatch/relock.sql); a node goes on only
    if the lease still holds this pass's token, the node is READY in the attempt
    it was leased in and the request APPROVED (it goes EXECUTING here) or
    EXECUTING; then, on a snapshot read under
    those locks, the plan-hash drift check again, the failures and waits of
    `prepare_leased`, and the policy's decision and charge under the accumulation
    ledger's lock (a charge commits with its write-ahead or not at all; the hold
    the claim took for it ends in the same commit). The
    write-ahead rows of the group are deferred in one statement, committed when
    the transaction closes; their Submissions, in claim order, are returned.

    A node that did not go on is discarded, its prepared action never written
    nor submitted. If the lease is still ours and the node left READY or its
    attempt (cancelled, failed, resolved meanwhile), nobody can use that
    attempt's nonce reservation again: it is released here, under the locks,
    as a lane stop releases one (`release_unsubmitted`: only reservations with
    no signed bytes kept, and bytes are kept only by submit). A lost lease
    releases nothing: the claim that took it prepares the same attempt and gets
    the same reservation back (qtg.providers.evm.nonces.reserve_run is
    idempotent per attempt), so releasing it could hand its nonce to another
    node. Still READY under a live lease whose request moved on (paged,
    cancelled), the lease ends at once (sql/dispatch/end_lease.sql)."""
    if not group:
        return []
    submissions: list[Submission] = []
    locked = sorted(group, key=lambda leased: str(leased.request_id))  # the lock order
    async with ctx.db.transaction() as tx:
        # the re-lock, then the snapshots read under its locks: one round trip
        rows, snaps = await progress.lock_and_load(
            tx,
            (
                SQL.relock,
                {
                    "lease": lease,
                    "request_ids": [leased.request_id for leased in locked],
                    "node_ids": [leased.node_id for leased in locked],
                },
            ),
            [leased.request_id for leased in group],
            plan_edges=True,
        )
        held = {row["id"]: row for row in rows}
        live: list[Leased] = []
        ended: list[Any] = []
        for leased in group:
            row = held.get(leased.node_id)
            if row is not None and _goes_on(leased, row):
                live.append(leased)
                continue
            log.info(
                "prepared action discarded: dispatch lease lost, or node or request moved on",
                extra={"node_id": str(leased.node_id), "lease_held": bool(row and row["ours"])},
            )
            if row is None or not row["ours"]:
                continue
            if row["node_state"] == N.READY and row["attempt_no"] == leased.node["attempt_no"]:
                ended.append(leased.node_id)
            elif leased.prepared is not None:  # as for a stopped lane
                await release_unsubmitted(leased.executor, leased.context, leased.node_id)
        if ended:
            tx.defer(SQL.end_lease, {"lease": lease, "node_ids": ended})
        await policies.lock_for_dispatch(tx, (snaps[leased.request_id].request for leased in live))
        for leased in live:
            snap = snaps[leased.request_id]
            node = snap.node_by_id(leased.node_id)
            await _executing(tx, snap)  # the lease left its request APPROVED
            why = plan_drift(snap)
            if why is not None:
                await _fail(tx, snap, node, "PLAN_HASH_DRIFT", why)
            elif leased.failure is not None:
                await _fail(tx, snap, node, *leased.failure)
            elif leased.wait is not None:
                await defer(ctx, tx, node, leased.wait)
            else:
                submission = await _charged(ctx, tx, snap, node, leased)
                if submission is not None:
                    submissions.append(submission)
                else:  # it waits: its nonce goes to the next reservation, not into a gap
                    await release_unsubmitted(leased.executor, leased.context, leased.node_id)
        defer_write_ahead(tx, submissions, owner=ctx.instance_id)
        # the lease's policy holds end here: charged with their write-ahead, or not
        policies.drop_holds(tx, lease, [leased.request_id for leased in group])
        written = {sub.node_id for sub in submissions}
        if any(leased.held and leased.node_id not in written for leased in group):
            # a hold dropped without its charge gives its room back to the nodes
            # that wait on a policy limit: they are decided again at once
            tx.defer(SQL.end_policy_waits, RELEASE_DUE_PARAMS)
    return submissions


def _goes_on(leased: Leased, row: dict[str, Any]) -> bool:
    """Whether a relocked node may be written ahead: the lease still ours, the
    node READY in the attempt it was leased in, the request APPROVED or EXECUTING."""
    return bool(
        row["ours"]
        and row["node_state"] == N.READY
        and row["attempt_no"] == leased.node["attempt_no"]
        and row["request_state"] in (R.APPROVED, R.EXECUTING)
    )


async def _charged(
    ctx: ServiceContext, tx: Tx, snap: progress.Snapshot, node: dict[str, Any], leased: Leased
) -> Submission | None:
    """The approval seal checked again for a signed node (`custody.seal_holds`),
    the policy's decision under the ledger's lock, and the charge with the
    write-ahead; the node's Submission, or None (refused or blocked now: it waits)."""
    assert leased.prepared is not None and leased.executor is not None
    if leased.signature is not None and leased.prepared.signer_key:
        refused = await custody.seal_holds(tx, leased.prepared.signer_key, snap, node)
        if refused is not None:
            await defer(ctx, tx, node, refused)
            return None
    policy = await policies.check_at_dispatch(tx, snap.request, node)
    if policy.wait is not None:
        await defer(ctx, tx, node, policy.wait)
        return None
    await policies.charge(tx, policy)  # it goes out: its charge, with its write-ahead
    key = idempotency_key(node["id"], leased.context.attempt_no)
    return Submission(
        request_id=snap.request["id"],
        node_id=node["id"],
        attempt_no=leased.context.attempt_no,
        idempotency_key=key,
        context=msgspec.structs.replace(leased.context, idempotency_key=key),
        prepared=leased.prepared,
        signature=leased.signature,
        executor=leased.executor,
    )


async def release_unsubmitted(
    executor: Executor | None, context: ExecutionContext, node_id: Any
) -> None:
    """Give back what an attempt that will never be submitted took in prepare: the
    executor's `release_unsubmitted(ctx)` (evm: a nonce reservation with no signed
    bytes kept; bytes kept mean maybe broadcast, and those are never released). A
    release that fails is logged: evm_nonce_reaper reclaims what is left."""
    release = getattr(executor, "release_unsubmitted", None)
    if release is None:
        return
    try:
        await release(context)
    except Exception as exc:
        log.warning(
            "releasing an unsubmitted attempt failed; the reaper reclaims it",
            extra={"node_id": str(node_id), "error": f"{type(exc).__name__}: {exc}"},
        )


async def defer(ctx: ServiceContext, tx: Tx, node: dict[str, Any], exc: RetryLater) -> None:
    """Leave a claimed READY node READY, not to be claimed for a backoff that grows
    with its transient faults in a row (capped at MG_NODE_TRANSIENT_RETRY_MAX_SECONDS)."""
    wait = transient_retry_seconds(
        int(node.get("transient_tries") or 0),
        exc.retry_after_seconds,
        ctx.settings.node_transient_retry_max_seconds,
    )
    ctx.dispatch_waits.forget()  # a wait the last reading did not see
    await tx.fetchrow(
        SQL.defer_node,
        {
            "node_id": node["id"],
            "wait_seconds": wait,
            "error_code": exc.code,
            "error_detail": exc.detail,
        },
    )
    log.warning(
        "node waits out a transient fault; not failed",
        extra={
            "node_key": node["node_key"],
            "node_id": str(node["id"]),
            "error_code": exc.code,
            "error": exc.detail,
            "wait_seconds": round(wait, 1),
        },
    )


def defer_write_ahead(tx: Tx, subs: list[Submission], *, owner: str | None = None) -> None:
    """Defer the write-ahead UPDATE of `subs` (SUBMITTING with their attempt,
    idempotency key and prepared action), one statement for all: committed
    with the state changes before it when the transaction closes. `owner`: this
    runtime process's instance id, so that recovery takes the nodes at once if
    the process dies (issue 43 item 7; None: after the SUBMITTING grace)."""
    if not subs:
        return
    tx.defer(
        SQL.write_ahead,
        {
            "node_ids": [s.node_id for s in subs],
            "attempt_nos": [s.attempt_no for s in subs],
            "idempotency_keys": [s.idempotency_key for s in subs],
            "prepared_actions": [
                Jsonb({**msgspec.to_builtins(s.prepared), "signature": s.signature}) for s in subs
            ],
            "owner": owner,
        },
    )


async def _submit(ctx: ServiceContext, sub: Submission) -> None:
    """Submit one committed write-ahead node (`submit_all` of one)."""
    await submit_all(ctx, [sub])


async def _back_to_ready(
    ctx: ServiceContext,
    tx: Tx,
    subs: list[Submission],
    code: str,
    detail: str,
    wait_seconds: float,
) -> None:
    """Send held SUBMITTING nodes whose submit did nothing back to READY (a new
    attempt follows), after giving back what their prepare took
    (`release_unsubmitted`)."""
    for sub in subs:
        await release_unsubmitted(sub.executor, sub.context, sub.node_id)
    if wait_seconds > 0:
        ctx.dispatch_waits.forget()  # a wait the last reading did not see
    await tx.fetch(
        SQL.back_to_ready,
        {
            "node_ids": [s.node_id for s in subs],
            "error_code": code,
            "error_detail": detail,
            "wait_seconds": wait_seconds,
        },
    )


async def _submit_held(
    tx: Tx, sub: Submission
) -> tuple[NodeState, SubmitResult | None, RetryLater | None]:
    """Call submit on a node `tx` holds SUBMITTING: SUBMITTED with the
    provider's result (the caller records it, with the batch's others), or
    FAILED/UNKNOWN, queued in `tx` here (then its request must move on), or
    READY with the provider's RetryLater: refused before any side effect for a
    cause that may clear (the caller sends it back to READY, waiting).

    A dead database connection (psycopg.OperationalError) is not the
    provider's answer: nothing is written — writing anything would guess —
    and the error is raised; recovery asks recover() after the grace."""
    try:
        result = await sub.executor.submit(
            sub.context, sub.prepared, sub.signature, sub.idempotency_key
        )
    except RetryLater as exc:
        log.warning(
            "submit refused before any side effect; the node waits and tries again",
            extra={"node_id": str(sub.node_id), "error_code": exc.code, "error": exc.detail},
        )
        return N.READY, None, exc
    except SubmitRejected as exc:
        outcome = (N.FAILED, exc.code, exc.detail)
    except psycopg.OperationalError as exc:
        log.warning(
            "database connection lost around submit; leaving SUBMITTING for recovery",
            extra={"node_id": str(sub.node_id), "error": type(exc).__name__},
        )
        raise
    except Exception as exc:
        log.warning(
            "submit outcome unknown",
            extra={"node_id": str(sub.node_id), "error": f"{type(exc).__name__}: {exc}"},
        )
        outcome = (N.UNKNOWN, "SUBMIT_OUTCOME_UNKNOWN", f"{type(exc).__name__}: {exc}")
    else:
        return N.SUBMITTED, result, None
    # The outcome on the one row we hold: committed without waiting behind
    # whoever holds the request (an observer's provider call).
    progress.record_node_error(tx, sub.request_id, sub.node_id, *outcome)
    return outcome[0], None, None
