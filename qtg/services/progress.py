"""Moving a request forward: the state changes shared by dispatch, observe,
recover and the human operations.

Everything here runs inside the caller's transaction, on a `Snapshot` of the
request and its nodes loaded (and locked by the caller's claim) at the start.
Each change is written to the database and mirrored into the snapshot, so
the next rule (derive_request_state, the frontier) sees the new state without
reloading. Events and callback rows are written by triggers on the same
UPDATEs (migrations/0002_triggers.sql).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from qtg.db import Jsonb, Query, Tx, sql_family
from qtg.domain.derive import NodeView, derive_request_state
from qtg.domain.execution import frontier_keys, releasable_successors
from qtg.domain.states import NodeState, RequestState, request_transition_allowed
from qtg.providers.answers import clean_object, clean_optional_text, clean_text

SQL = sql_family(
    "progress",
    "name_requests",
    "load_request",
    "load_nodes",
    "load_plan_edges",
    "set_request_state",
    "set_frontier",
    "release_nodes",
    "set_node_error",
    "complete_node",
)

N, R = NodeState, RequestState


@dataclass(slots=True)
class Snapshot:
    request: dict[str, Any]
    nodes: list[dict[str, Any]]
    plan_edges: list[dict[str, Any]]

    def node(self, key: str) -> dict[str, Any]:
        for node in self.nodes:
            if node["node_key"] == key:
                return node
        raise KeyError(f"request {self.request['id']} has no node {key!r}")

    def node_by_id(self, node_id: object) -> dict[str, Any]:
        for node in self.nodes:
            if node["id"] == node_id:
                return node
        raise KeyError(f"request {self.request['id']} has no node {node_id}")


async def load_snapshot(tx: Tx, request_id: object, *, plan_edges: bool = False) -> Snapshot:
    """The request and its nodes (and, for drift checks, the plan's edges as
    stored now), read after the caller's claim locked them."""
    snaps = await load_snapshots(tx, [request_id], plan_edges=plan_edges)
    return next(iter(snaps.values()))


async def load_snapshots(
    tx: Tx, request_ids: Sequence[object], *, plan_edges: bool = False
) -> dict[Any, Snapshot]:
    """`load_snapshot` for several requests in three (four with edges) statements
    in all, not per request, sent in one round trip: a batch claim reads its
    whole batch at once. The first names the requests for the loads, which
    take no parameter (sql/progress/name_requests.sql says why)."""
    _, snaps = await lock_and_load(tx, None, request_ids, plan_edges=plan_edges)
    return snaps


async def lock_and_load(
    tx: Tx,
    lock: tuple[Query, Mapping[str, Any]] | None,
    request_ids: Sequence[object],
    *,
    plan_edges: bool = False,
) -> tuple[list[dict[str, Any]], dict[Any, Snapshot]]:
    """`lock`'s rows (a statement that locks the requests, run first) and the
    snapshots of `request_ids` read after it, in ONE round trip: each statement
    of a pipeline takes its snapshot once the one before it has finished, so the
    loads see the rows as they are under those locks (the dispatcher's
    write-ahead re-lock, issue 44 item 3)."""
    ids = list(dict.fromkeys(i if isinstance(i, UUID) else UUID(str(i)) for i in request_ids))
    if not ids:
        return (await tx.fetch(*lock) if lock is not None else []), {}
    statements: list[tuple[Query, Any]] = [] if lock is None else [lock]
    statements += [
        (SQL.name_requests, {"request_ids": ids}),
        (SQL.load_request, None),
        (SQL.load_nodes, None),
    ]
    if plan_edges:
        statements.append((SQL.load_plan_edges, None))
    results = await tx.fetch_each(*statements)
    locked = results.pop(0) if lock is not None else []
    _, request_rows, node_rows, *edge_rows = results
    requests = {r["id"]: r for r in request_rows}
    missing = [i for i in ids if i not in requests]
    if missing:
        raise LookupError(f"movement request {missing[0]} not found")
    out = {i: Snapshot(requests[i], [], []) for i in ids}
    _attach_nodes(out, node_rows)
    for rows in edge_rows:
        for row in rows:
            out[row["request_id"]].plan_edges.append(row)
    return locked, out


#: The request columns a batch claim returns beside each node row, named as
#: sql/progress/load_request.sql names them (but `request_id` and
#: `request_created_at`): the claim has joined and locked the request anyway,
#: so reading it again would only cost a round trip.
CLAIMED_REQUEST_COLUMNS = (
    "request_state", "compiled_plan_hash", "intent", "input_params", "current_frontier",
    "template_version_id", "template_key", "template_version", "risk_controls",
)  # fmt: skip


async def snapshots_from_claim(
    tx: Tx,
    rows: Sequence[Mapping[str, Any]],
    nodes: Sequence[dict[str, Any]] | None = None,
) -> dict[Any, Snapshot]:
    """`load_snapshots` for the rows of a batch claim that returned its requests'
    columns (and, when it returned `plan_edges`, the plan's edges as stored
    now): only the nodes are read, in one round trip — or taken from `nodes`,
    when the caller read them with the claim (`claim_with_nodes`)."""
    out = _claimed_snapshots(rows)
    if nodes is None and out:
        _, nodes = await tx.fetch_each(
            (SQL.name_requests, {"request_ids": list(out)}), (SQL.load_nodes, None)
        )
    _attach_nodes(out, nodes or [])
    return out


async def claim_with_nodes(
    tx: Tx,
    claim: Query,
    params: Mapping[str, Any],
    *,
    commit_with: tuple[Query, Mapping[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], dict[Any, Snapshot]]:
    """Run a batch claim that records its request ids in the transaction-local
    setting qtg.claimed_requests (sql/dispatch/claim_batch.sql,
    sql/observe/claim_batch.sql) and the node load of those requests in ONE
    round trip (issue 29 item 5); the claimed rows and their snapshots. The
    load is the next statement of the pipeline, so its snapshot is taken after
    the claim's locks, as when it was sent alone.

    `commit_with`: a write that needs nothing from Python (the observer's lease,
    which reads the claimed ids from a setting of the claim), sent after the
    load with the COMMIT in the same round trip: the transaction ends here."""
    # A claim that locks no row writes no qtg.claimed_requests: the load then
    # reads what an earlier name_requests of this transaction named, if any —
    # rows that no snapshot of this claim takes (_attach_nodes keeps only the
    # claimed requests' nodes).
    statements = [(claim, params), (SQL.load_nodes, None)]
    if commit_with is not None:
        statements.append(commit_with)
    rows, nodes, *_ = await tx.fetch_each(*statements, commit=commit_with is not None)
    return rows, await snapshots_from_claim(tx, rows, nodes)


def _claimed_snapshots(rows: Sequence[Mapping[str, Any]]) -> dict[Any, Snapshot]:
    """A node-less Snapshot per request of a claim's rows, from its request columns."""
    out: dict[Any, Snapshot] = {}
    for row in rows:
        if row["request_id"] in out:
            continue
        request = {k: row[k] for k in CLAIMED_REQUEST_COLUMNS}
        # issue 45: whether a policy governs it (the dispatch claim reads it)
        request["policy_version"] = row.get("policy_version")
        request["id"], request["created_at"] = row["request_id"], row["request_created_at"]
        out[row["request_id"]] = Snapshot(request, [], list(row.get("plan_edges") or []))
    return out


def _attach_nodes(snaps: dict[Any, Snapshot], nodes: Sequence[dict[str, Any]]) -> None:
    """Append each node row (sql/progress/load_nodes.sql, in plan order) to its
    request's snapshot."""
    for row in nodes:
        snap = snaps.get(row["request_id"])
        if snap is not None:
            snap.nodes.append(row)


async def claim_and_read(
    tx: Tx, claim: Query, params: dict[str, Any]
) -> tuple[Any, Snapshot] | None:
    """Claim one node (miss-only savepoint) and read its request.
    Returns the claimed node's id and the snapshot, or None on a miss."""
    row = await tx.claim(claim, params)
    if row is None:
        return None
    return row["id"], await load_snapshot(tx, row["request_id"])


async def set_request_state(tx: Tx, snap: Snapshot, state: RequestState) -> None:
    if snap.request["request_state"] == state:
        return
    request_id = snap.request["id"]
    tx.defer_row(
        SQL.set_request_state,
        {"request_ids": request_id, "request_states": state},
        unit=request_id,
        row_id=request_id,
    )
    snap.request["request_state"] = state


async def settle_request_state(tx: Tx, snap: Snapshot) -> RequestState | None:
    """The reference's apply_request_state_from_nodes(): derive, then move if allowed.

    derive_request_state() returning None means "no change", with one
    exception: a request WAITING_MANUAL_ACTION whose manual node is done goes
    back to EXECUTING. A derived state that is not an allowed move from the
    current one (e.g. FAILED while MANUAL_INTERVENTION) is left alone: the
    current state is the more cautious one.
    """
    current = RequestState(snap.request["request_state"])
    derived = derive_request_state(
        [
            NodeView(
                n["node_key"], n["node_kind"], n["action_type"], n["node_state"], n["error_code"]
            )
            for n in snap.nodes
        ]
    )
    if derived is None and current == R.WAITING_MANUAL_ACTION:
        derived = R.EXECUTING
    if derived is None or derived == current or not request_transition_allowed(current, derived):
        return None
    await set_request_state(tx, snap, derived)
    return derived


async def refresh_frontier(tx: Tx, snap: Snapshot) -> None:
    frontier = frontier_keys(snap.nodes)
    if list(snap.request["current_frontier"]) != frontier:
        request_id = snap.request["id"]
        tx.defer_row(
            SQL.set_frontier,
            {"request_ids": request_id, "frontiers": Jsonb(frontier)},
            unit=request_id,
            row_id=request_id,
        )
        snap.request["current_frontier"] = frontier


def record_node_error(
    tx: Tx,
    request_id: object,
    node_id: object,
    state: NodeState,
    error_code: str,
    error_detail: str | None,
) -> None:
    """Write a node's FAILED/UNKNOWN outcome, and nothing else: the caller moves
    the request on (node_finished_badly), now or in a later transaction."""
    assert state in (N.FAILED, N.UNKNOWN)
    tx.defer_row(
        SQL.set_node_error,
        {
            "node_ids": node_id,
            "node_states": state,
            # an exception's text may carry a provider's bytes (a NUL fails the
            # commit of every outcome deferred with this one): cleaned (issue 44)
            "error_codes": clean_text(error_code, 100),
            "error_details": clean_optional_text(error_detail or None),
        },
        unit=request_id,
        row_id=node_id,
    )


async def node_finished_badly(
    tx: Tx,
    snap: Snapshot,
    node: dict[str, Any],
    state: NodeState,
    error_code: str,
    error_detail: str | None = None,
) -> None:
    """A node ends FAILED or UNKNOWN; the request state follows from the nodes."""
    record_node_error(tx, snap.request["id"], node["id"], state, error_code, error_detail)
    node["node_state"] = state
    node["error_code"] = error_code
    await refresh_frontier(tx, snap)
    await settle_request_state(tx, snap)


async def complete_node(
    tx: Tx,
    snap: Snapshot,
    node: dict[str, Any],
    provider_refs: Mapping[str, Any] | None = None,
    artifacts: Mapping[str, Any] | None = None,
) -> None:
    provider_refs, artifacts = clean_object(provider_refs), clean_object(artifacts)
    tx.defer_row(
        SQL.complete_node,
        {
            "node_ids": node["id"],
            "provider_refs": Jsonb(provider_refs),
            "artifacts": Jsonb(artifacts),
        },
        unit=snap.request["id"],
        row_id=node["id"],
    )
    node["node_state"] = N.COMPLETED
    node["provider_refs"] = {**node["provider_refs"], **(provider_refs or {})}
    node["artifacts"] = {**node["artifacts"], **(artifacts or {})}
    await advance_after_completion(tx, snap, node)


async def advance_after_completion(tx: Tx, snap: Snapshot, completed: dict[str, Any]) -> None:
    """The reference's advance_after_completion(): release successors, move the
    frontier (the trigger writes frontier_advanced and its callback), then let
    the request state follow (COMPLETED after the last node)."""
    released = releasable_successors(completed["node_key"], snap.nodes)
    if released:
        request_id = snap.request["id"]
        for key in released:
            tx.defer_row(
                SQL.release_nodes,
                {"request_ids": request_id, "node_keys": key},
                unit=request_id,
                row_id=key,
            )
            snap.node(key)["node_state"] = N.READY
    await refresh_frontier(tx, snap)
    await settle_request_state(tx, snap)
