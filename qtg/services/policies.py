"""Treasury policies and the address book (issue 45): storage, four-eyes changes,
and the three places a movement is evaluated.

The rules themselves are pure (qtg/domain/policy.py). Here:

- **Changes are four-eyes by admins.** A policy version or an address-book
  entry is proposed by one admin and decided by another (the proposer may
  reject, i.e. withdraw); each step writes its audit row in its transaction.
  An approved entry is usable only from `usable_at`, its approval plus
  MG_ADDRESS_BOOK_COOLING_OFF_SECONDS.
- **At creation** (`decide_at_creation`): the active policy decides; a block is
  a 403 naming the rule and nothing is stored; otherwise the movement records
  the version, the rule, the approvals it needs and its delay.
- **At each approval** (`approve_under_policy`): the active policy decides again;
  the approval is recorded, and the movement is APPROVED only once the rule's
  count of distinct eligible principals (never the creator) is in.
- **At dispatch** (`check_at_dispatch`, called from the dispatch path before
  anything is prepared): under one advisory lock held until the write-ahead
  commits, the active policy decides a third time with the sums charged so
  far; a movement that would cross a limit (or is blocked now) waits and pages
  (a RetryLater: READY, backing off), else its charge is written in the same
  transaction as its write-ahead. Two runtimes can therefore never together
  pass an accumulation limit.

No ACTIVE policy version: nothing here applies and movements behave as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from qtg.config import Settings
from qtg.db import Database, Jsonb, Tx, sql_family
from qtg.domain import policy as P
from qtg.domain.plan import Plan
from qtg.providers.base import RetryLater
from qtg.services.auditing import record_audit
from qtg.services.errors import Conflict, Forbidden, InvalidInput, NotFound, uuid_or_not_found

SQL = sql_family(
    "policies",
    "insert_policy",
    "lock_policy",
    "get_policy",
    "list_policies",
    "active_policy",
    "supersede_active",
    "decide_policy",
    "insert_entry",
    "lock_entry",
    "list_entries",
    "decide_entry",
    "retire_entry",
    "entries_for",
    "sum_charges",
    "lock_charges",
    "charged",
    "insert_charge",
    "hold_charge",
    "drop_holds",
    "request_facts",
    "record_policy",
    "insert_approval",
    "list_approvals",
    "delay_roots",
    "delay_left",
    "version_document",
    "lock_changes",
    "active_label",
)

MAX_PAGE = 200
#: How long a movement that would cross a limit at dispatch waits before it looks again.
LIMIT_RETRY_SECONDS = 30.0
POLICY_OBJECT = "policy"
ENTRY_OBJECT = "address_book_entry"


def _policy_error(exc: P.PolicyError) -> InvalidInput:
    return InvalidInput(
        f"policy is not valid: {exc.path}: {exc.message}",
        code="INVALID_POLICY",
        detail={"field": f"document.{exc.path}", "path": exc.path},
    )


def _version(value: object) -> int:
    try:
        out = int(str(value))
    except ValueError:
        raise NotFound(
            f"policy version {value!r} not found", detail={"version": str(value)}
        ) from None
    if not 1 <= out < 2**62:
        raise NotFound(f"policy version {value!r} not found", detail={"version": str(value)})
    return out


def _note(note: Any) -> str | None:
    if note is not None and (not isinstance(note, str) or len(note) > 2000):
        raise InvalidInput(
            "note must be a string of at most 2000 characters", detail={"field": "note"}
        )
    return note


# ------------------------------------------------------------------ policy versions


async def propose_policy(
    db: Database, *, document: Any, actor: str, note: str | None = None
) -> dict[str, Any]:
    """A PROPOSED version of `document`, validated now so that a reviewer never
    reviews a policy that cannot be used."""
    try:
        P.parse_policy(document)
    except P.PolicyError as exc:
        raise _policy_error(exc) from None
    async with db.transaction() as tx:
        row = await tx.fetchrow(
            SQL.insert_policy,
            {
                "document": Jsonb(document),
                "document_hash": P.document_hash(document),
                "actor": actor,
                "note": _note(note),
            },
        )
        assert row is not None
        await record_audit(
            tx,
            actor=actor,
            action="policy.proposed",
            object_type=POLICY_OBJECT,
            object_id=row["version"],
            detail={"document_hash": row["document_hash"]},
        )
        return row


def _still_proposed(row: Mapping[str, Any], what: str, verb: str) -> None:
    """Only a PROPOSED policy version or address-book entry is decided: 409 otherwise.
    One check for both kinds of change, so both refuse in the same words."""
    if row["state"] != "PROPOSED":
        raise Conflict(
            f"cannot {verb} {what} that is {row['state']}",
            code="ILLEGAL_STATE",
            detail={"current_state": row["state"], "allowed_states": ["PROPOSED"]},
        )


def _not_its_proposer(row: Mapping[str, Any], actor: str, what: str) -> None:
    """Four-eyes for both kinds of change: the admin who proposed `what` cannot approve it."""
    if row["proposed_by"] == actor:
        raise Forbidden(
            f"four-eyes: the admin who proposed {what} cannot approve it",
            code="FOUR_EYES",
            detail={"proposed_by": row["proposed_by"]},
        )


async def _proposed(tx: Tx, version: object, verb: str) -> dict[str, Any]:
    v = _version(version)
    row = await tx.fetchrow(SQL.lock_policy, {"version": v})
    if row is None:
        raise NotFound(f"policy version {v} not found", detail={"version": v})
    _still_proposed(row, "a policy version", verb)
    return row


async def approve_policy(db: Database, version: object, *, actor: str) -> dict[str, Any]:
    """PROPOSED → ACTIVE, the active one before it SUPERSEDED; not by its proposer."""
    async with db.transaction() as tx:
        await tx.fetchval(SQL.lock_changes, {})
        row = await _proposed(tx, version, "approve")
        _not_its_proposer(row, actor, "a policy")
        superseded = await tx.fetchval(SQL.supersede_active, {})
        decided = await tx.fetchrow(
            SQL.decide_policy,
            {"version": row["version"], "state": "ACTIVE", "actor": actor, "note": None},
        )
        assert decided is not None
        await record_audit(
            tx,
            actor=actor,
            action="policy.approved",
            object_type=POLICY_OBJECT,
            object_id=row["version"],
            detail={
                "document_hash": row["document_hash"],
                "proposed_by": row["proposed_by"],
                "superseded": superseded,
            },
        )
        return decided


async def reject_policy(
    db: Database, version: object, *, actor: str, note: str | None = None
) -> dict[str, Any]:
    async with db.transaction() as tx:
        row = await _proposed(tx, version, "reject")
        decided = await tx.fetchrow(
            SQL.decide_policy,
            {"version": row["version"], "state": "REJECTED", "actor": actor, "note": _note(note)},
        )
        await record_audit(
            tx,
            actor=actor,
            action="policy.rejected",
            object_type=POLICY_OBJECT,
            object_id=row["version"],
            detail={"document_hash": row["document_hash"], "note": note},
        )
        assert decided is not None
        return decided


async def get_policy(db: Database, version: object) -> dict[str, Any]:
    v = _version(version)
    row = await db.fetchrow(SQL.get_policy, {"version": v})
    if row is None:
        raise NotFound(f"policy version {v} not found", detail={"version": v})
    return row


async def list_policies(db: Database, *, limit: int = 50) -> dict[str, Any]:
    """The active version (or null) and the newest versions, proposals included."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}", detail={"field": "limit"})
    rows = await db.fetch(SQL.list_policies, {"limit": limit})
    active = await db.fetchrow(SQL.active_policy, {})
    return {
        "active_version": None if active is None else active["version"],
        "items": rows,
    }


# ------------------------------------------------------------------ address book


def _text(value: Any, field: str, longest: int = 200) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > longest:
        raise InvalidInput(
            f"{field} must be a non-empty string of at most {longest} characters",
            detail={"field": field},
        )
    return value.strip()


def _tags(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > 50:
        raise InvalidInput("tags must be a list of at most 50 strings", detail={"field": "tags"})
    return sorted({_text(t, "tags", 100) for t in value})


def _label_taken(label: str, holder: object) -> Conflict:
    return Conflict(
        f"an active address-book entry is labelled {label!r}; propose a change of it instead",
        code="LABEL_TAKEN",
        detail={"field": "label", "entry_id": str(holder)},
    )


async def propose_entry(
    db: Database,
    *,
    chain: Any,
    asset: Any,
    address: Any,
    label: Any,
    tags: Any = None,
    replaces: object = None,
    actor: str,
) -> dict[str, Any]:
    """A PROPOSED entry (or a change of the ACTIVE entry `replaces`)."""
    params: dict[str, Any] = {
        "chain": _text(chain, "chain"),
        "asset": _text(asset, "asset"),
        "address": _text(address, "address"),
        "label": _text(label, "label"),
        "tags": _tags(tags),
        "replaces": None,
        "actor": actor,
    }
    async with db.transaction() as tx:
        if replaces is not None:
            rid = uuid_or_not_found(replaces, what="address-book entry", key="replaces")
            old = await tx.fetchrow(SQL.lock_entry, {"entry_id": rid})
            if old is None or old["state"] != "ACTIVE":
                raise NotFound(f"no active address-book entry {rid}", detail={"field": "replaces"})
            params["replaces"] = rid
        holder = await tx.fetchval(SQL.active_label, {"label": params["label"]})
        if holder is not None and holder != params["replaces"]:
            raise _label_taken(params["label"], holder)
        row = await tx.fetchrow(SQL.insert_entry, params)
        assert row is not None
        await record_audit(
            tx,
            actor=actor,
            action="address_book.proposed",
            object_type=ENTRY_OBJECT,
            object_id=row["id"],
            detail={k: params[k] for k in ("chain", "asset", "address", "label", "tags")}
            | {"replaces": None if replaces is None else str(params["replaces"])},
        )
        return row


async def decide_entry(
    db: Database, settings: Settings, entry_id: object, *, actor: str, approve: bool
) -> dict[str, Any]:
    """Approve (four-eyes: not its proposer; usable after the cooling-off time)
    or reject a PROPOSED entry. A change that keeps the chain, asset and address
    keeps the replaced entry's usable_at (a new label or tag does not restart
    the wait); one that changes them waits the whole cooling-off time."""
    eid = uuid_or_not_found(entry_id, what="address-book entry", key="entry_id")
    verb = "approve" if approve else "reject"
    async with db.transaction() as tx:
        await tx.fetchval(SQL.lock_changes, {})
        row = await tx.fetchrow(SQL.lock_entry, {"entry_id": eid})
        if row is None:
            raise NotFound(f"address-book entry {eid} not found", detail={"entry_id": str(eid)})
        _still_proposed(row, "an address-book entry", verb)
        usable_at = None
        if approve:
            _not_its_proposer(row, actor, "an address-book entry")
            if row["replaces"] is not None:
                old = await tx.fetchrow(SQL.lock_entry, {"entry_id": row["replaces"]})
                if old is None or old["state"] != "ACTIVE":
                    raise Conflict(
                        "the entry this change replaces is no longer active",
                        code="ILLEGAL_STATE",
                        detail={"replaces": str(row["replaces"])},
                    )
                if all(old[k] == row[k] for k in ("chain", "asset", "address")):
                    usable_at = old["usable_at"]
                await tx.fetch(SQL.retire_entry, {"entry_id": old["id"]})
            holder = await tx.fetchval(SQL.active_label, {"label": row["label"]})
            if holder is not None:
                raise _label_taken(row["label"], holder)
        decided = await tx.fetchrow(
            SQL.decide_entry,
            {
                "entry_id": eid,
                "state": "ACTIVE" if approve else "REJECTED",
                "actor": actor,
                "usable_at": usable_at,
                "cooling_off_seconds": settings.address_book_cooling_off_seconds,
            },
        )
        assert decided is not None
        await record_audit(
            tx,
            actor=actor,
            action=f"address_book.{'approved' if approve else 'rejected'}",
            object_type=ENTRY_OBJECT,
            object_id=eid,
            detail={
                "address": row["address"],
                "label": row["label"],
                "usable_at": None
                if decided["usable_at"] is None
                else decided["usable_at"].isoformat(),
            },
        )
        return decided


async def list_entries(
    db: Database, *, state: str | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    if state is not None and state not in ("PROPOSED", "ACTIVE", "REJECTED", "REMOVED"):
        raise InvalidInput(f"unknown entry state {state!r}", detail={"field": "state"})
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}", detail={"field": "limit"})
    return await db.fetch(SQL.list_entries, {"state": state, "limit": limit})


# ------------------------------------------------------------------ evaluation


@dataclass(frozen=True, slots=True)
class Active:
    version: int
    policy: P.Policy


async def active_policy(tx: Tx) -> Active | None:
    row = await tx.fetchrow(SQL.active_policy, {})
    if row is None:
        return None
    # validated when proposed; a stored document that no longer parses is a bug
    return Active(row["version"], P.parse_policy(row["document"]))


def _chain(intent: Mapping[str, Any], input_params: Mapping[str, Any]) -> str | None:
    for source in (intent, input_params):
        value = source.get("chain")
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)
    return None


async def facts(
    tx: Tx,
    *,
    template_key: str,
    action_types: Iterable[str],
    venues: Iterable[str],
    network_class: str,
    intent: Mapping[str, Any],
    input_params: Mapping[str, Any],
    initiator: str,
) -> P.Facts:
    """The movement as rules see it, with the address-book entries of its destination.
    An entry counts for this movement when its asset and chain agree with the
    intent's (an entry's asset or chain `*` matches any; an intent without a
    chain matches any entry's chain)."""
    destination = str(intent["destination"])
    asset = str(intent["asset"])
    chain = _chain(intent, input_params)
    rows = await tx.fetch(SQL.entries_for, {"address": destination})
    entries = tuple(
        P.BookEntry(
            r["label"], r["chain"], r["asset"], r["address"], frozenset(r["tags"]), r["usable"]
        )
        for r in rows
        if r["asset"] in (asset, "*") and (chain is None or r["chain"] in (chain, "*"))
    )
    source = intent.get("source")
    sources = set(venues) | ({source} if isinstance(source, str) else set())
    return P.Facts(
        template=template_key,
        action_types=frozenset(action_types),
        network_class=network_class,
        sources=frozenset(sources),
        asset=asset,
        amount=Decimal(str(intent["amount"])),
        destination=destination,
        chain=chain,
        initiator=initiator,
        entries=entries,
    )


async def used_amounts(
    tx: Tx, policy: P.Policy, f: P.Facts, request_id: object = None
) -> dict[str, Decimal]:
    """Per accumulating rule, what its window and scope already hold: charged, or
    held for a movement being prepared now (migrations/0081) — but the hold of
    `request_id`, the movement being decided (None: one not created yet)."""
    out: dict[str, Decimal] = {}
    for rule in policy.accumulating():
        assert rule.accumulation is not None
        assets = rule.lists.get("asset")
        out[rule.name] = Decimal(
            await tx.fetchval(
                SQL.sum_charges,
                {
                    "window_seconds": rule.accumulation.window_seconds,
                    "assets": None if assets is None else sorted(assets),
                    "request_id": request_id,
                    **P.accumulation_in_scope(rule.accumulation.scope, f),
                },
            )
        )
    return out


async def decide(tx: Tx, active: Active, f: P.Facts, request_id: object = None) -> P.Decision:
    return P.evaluate(active.policy, f, await used_amounts(tx, active.policy, f, request_id))


def blocked_error(active: Active, decision: P.Decision) -> Forbidden:
    return Forbidden(
        f"policy version {active.version} blocks this movement: rule {decision.rule!r}",
        code="POLICY_BLOCKED",
        detail={"rule": decision.rule, "policy_version": active.version, **decision.detail},
    )


def _record_params(request_id: object, active: Active, d: P.Decision) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "policy_version": active.version,
        "policy_rule": d.rule,
        "policy_approvals": Jsonb(d.approvals.as_json()),
        "policy_delay_seconds": d.delay_seconds,
    }


async def decide_at_creation(
    tx: Tx,
    *,
    template_key: str,
    plan: Plan,
    network_class: str,
    intent: Mapping[str, Any],
    input_params: Mapping[str, Any],
    initiator: str,
) -> tuple[Active, P.Decision] | None:
    """The active policy's decision for a movement about to be created; None when
    no policy is active. A block raises (403 POLICY_BLOCKED naming the rule):
    the caller's transaction rolls back and nothing is stored."""
    active = await active_policy(tx)
    if active is None:
        return None
    action_nodes = [n for n in plan.nodes if n.kind == "action"]
    venues = [n.config["venue"] for n in action_nodes if isinstance(n.config.get("venue"), str)]
    f = await facts(
        tx,
        template_key=template_key,
        action_types=[n.action_type for n in action_nodes],
        venues=venues,
        network_class=network_class,
        intent=intent,
        input_params=input_params,
        initiator=initiator,
    )
    decision = await decide(tx, active, f)
    if decision.blocked:
        raise blocked_error(active, decision)
    return active, decision


def record_decision(tx: Tx, request_id: object, active: Active, decision: P.Decision) -> None:
    """Store the version, the rule, the approvals and the delay on the movement."""
    tx.defer(SQL.record_policy, _record_params(request_id, active, decision))


async def _facts_of_request(tx: Tx, request_id: object) -> tuple[dict[str, Any], P.Facts]:
    row = await tx.fetchrow(SQL.request_facts, {"request_id": request_id})
    assert row is not None
    return row, await facts(
        tx,
        template_key=row["template_key"],
        action_types=row["action_types"],
        venues=row["venues"],
        network_class=row["network_class"],
        intent=row["intent"],
        input_params=row["input_params"],
        initiator=row["created_by"],
    )


@dataclass(frozen=True, slots=True)
class ApprovalStep:
    """Where a policy-governed approval left the movement."""

    complete: bool
    approvers: list[str]
    required: int
    delay_seconds: int


async def approve_under_policy(
    tx: Tx, row: Mapping[str, Any], *, actor: str, actor_role: str
) -> ApprovalStep:
    """Record `actor`'s approval of the locked PENDING_APPROVAL movement `row`
    under the policy active now (its decision is recorded on the movement
    again). Raises 403 POLICY_BLOCKED when that policy blocks the movement now,
    403 NOT_AN_APPROVER when `actor` does not count for the rule, 409
    ALREADY_APPROVED for a second approval by the same principal."""
    active = await active_policy(tx)
    if active is None:
        # The policy was withdrawn (no version active): as before issue 45.
        return ApprovalStep(True, [actor], 1, 0)
    _, f = await _facts_of_request(tx, row["id"])
    decision = await decide(tx, active, f, row["id"])
    if decision.blocked:
        raise blocked_error(active, decision)
    tx.defer(SQL.record_policy, _record_params(row["id"], active, decision))
    if not P.may_approve(decision.approvals, active.policy.groups, actor, actor_role):
        raise Forbidden(
            f"{actor} does not count as an approver for rule {decision.rule!r}",
            code="NOT_AN_APPROVER",
            detail={"rule": decision.rule, "approvals": decision.approvals.as_json()},
        )
    inserted = await tx.fetchval(
        SQL.insert_approval,
        {
            "request_id": row["id"],
            "principal": actor,
            "principal_role": actor_role,
            "policy_version": active.version,
            "policy_rule": decision.rule,
        },
    )
    if inserted is None:
        raise Conflict(
            f"{actor} has already approved this movement",
            code="ALREADY_APPROVED",
            detail={"current_state": row["request_state"], "principal": actor},
        )
    given = await tx.fetch(SQL.list_approvals, {"request_id": row["id"]})
    approvers = P.eligible_approvers(
        decision.approvals,
        active.policy.groups,
        [(g["principal"], g["principal_role"]) for g in given],
        row["created_by"],
    )
    return ApprovalStep(
        len(approvers) >= decision.approvals.count,
        approvers,
        decision.approvals.count,
        decision.delay_seconds,
    )


def delay_roots(tx: Tx, request_id: object, delay_seconds: int) -> None:
    """Hold the roots an approval just made READY for the rule's delay (deferred
    after the approval's own writes)."""
    if delay_seconds > 0:
        tx.defer(SQL.delay_roots, {"request_id": request_id, "delay_seconds": delay_seconds})


# ------------------------------------------------------------------ dispatch


async def lock_for_dispatch(tx: Tx, requests: Iterable[Mapping[str, Any]]) -> None:
    """Take the accumulation ledger's lock before anything of a batch is prepared,
    when one of its requests is policy-governed: a batch must never wait for
    this lock while holding another a prepare took (an EVM account's)."""
    if any(r.get("policy_version") is not None for r in requests):
        await tx.fetchval(SQL.lock_charges, {})


@dataclass(frozen=True, slots=True)
class DispatchCheck:
    """The policy's word on one action node about to be prepared: `wait` (do not
    send; the node waits) or, for a movement not charged yet, the `charge` to
    write once its write-ahead is built (`charge`)."""

    wait: RetryLater | None = None
    charge: Mapping[str, Any] | None = None


NOT_GOVERNED = DispatchCheck()


async def check_at_dispatch(
    tx: Tx, request: Mapping[str, Any], node: Mapping[str, Any]
) -> DispatchCheck:
    """Before a policy-governed movement's action node is prepared (in the claim,
    which then holds its charge: `hold`) and again at its write-ahead: the
    active policy decides again, under the ledger's lock (held until this
    transaction commits: the claim's, or the write-ahead's with the charge).
    Blocked (a limit it would cross, an entry removed): `wait` is a RetryLater
    for the caller to wait on — the node stays READY and pages past
    MG_NODE_TRANSIENT_ATTENTION_SECONDS; an operator may cancel it. Allowed:
    the `charge` the caller writes with `charge` once the node's write-ahead
    is built — not before, so a node that fails or waits in prepare charges
    nothing. The nodes of one transaction are decided one after the other, so
    each one's sum includes the charges and holds of those before it (its own
    hold aside). A movement created with no policy active, or already charged
    (an earlier node or attempt), is not decided again."""
    if request.get("policy_version") is None or node["node_kind"] != "action":
        return NOT_GOVERNED
    await tx.fetchval(SQL.lock_charges, {})
    if await tx.fetchrow(SQL.charged, {"request_id": request["id"]}) is not None:
        return NOT_GOVERNED  # charged by an earlier node or attempt of this movement
    active = await active_policy(tx)
    if active is None:
        return NOT_GOVERNED  # policy withdrawn since: as before issue 45
    _, f = await _facts_of_request(tx, request["id"])
    decision = await decide(tx, active, f, request["id"])
    if decision.blocked:
        detail = ", ".join(f"{k}={v}" for k, v in sorted(decision.detail.items()))
        return DispatchCheck(
            wait=RetryLater(
                f"policy version {active.version} rule {decision.rule!r} blocks dispatch now"
                + (f" ({detail})" if detail else ""),
                code="POLICY_LIMIT",
                retry_after_seconds=LIMIT_RETRY_SECONDS,
            )
        )
    return DispatchCheck(
        charge={
            "request_id": request["id"],
            "asset": f.asset,
            "destination": f.destination.lower(),
            "initiator": f.initiator,
            "amount": f.amount,
            "policy_version": active.version,
            "policy_rule": decision.rule,
        }
    )


async def charge(tx: Tx, check: DispatchCheck) -> None:
    """Write the movement's charge (once per movement), in the transaction of
    its write-ahead and still under the ledger's lock."""
    if check.charge is not None:
        await tx.execute(SQL.insert_charge, check.charge)


async def hold(tx: Tx, check: DispatchCheck, lease: object, lease_seconds: float) -> None:
    """Hold an allowed movement's charge while its node is prepared with no lock
    held (issue 44 item 3), for as long as its dispatch `lease`: in the claim's
    transaction, under the ledger's lock, so every later decision counts it
    until the write-ahead writes the charge (`charge`) and drops the hold
    (`drop_holds`), or the lease expires."""
    if check.charge is not None:
        held = {k: check.charge[k] for k in ("request_id", "asset", "destination", "initiator")}
        await tx.execute(
            SQL.hold_charge,
            {
                **held,
                "amount": check.charge["amount"],
                "lease": lease,
                "lease_seconds": lease_seconds,
            },
        )


def drop_holds(tx: Tx, lease: object, request_ids: list[Any]) -> None:
    """Defer the end of `lease`'s holds on `request_ids` (committed with the
    write-ahead transaction: the charge written, or the attempt discarded)."""
    if request_ids:
        tx.defer(SQL.drop_holds, {"lease": lease, "request_ids": request_ids})


# ------------------------------------------------------------------ what a person sees


async def policy_view(tx: Tx, movement: Mapping[str, Any]) -> dict[str, Any] | None:
    """For a policy-governed movement: the version and rule that matched, the
    approvals given and still needed, the accumulation used in each window that
    applies to it (as its version's rules count it), what it was charged at
    dispatch, and the delay before dispatch still to run. None when no policy
    governs it."""
    version = movement.get("policy_version")
    if version is None:
        return None
    rid = movement["id"]
    stored = await tx.fetchrow(SQL.version_document, {"version": version})
    assert stored is not None  # a foreign key
    policy = P.parse_policy(stored["document"])
    approvals = P.Approvals(**(movement.get("policy_approvals") or {"count": 1}))
    given = await tx.fetch(SQL.list_approvals, {"request_id": rid})
    counted = P.eligible_approvers(
        approvals,
        policy.groups,
        [(g["principal"], g["principal_role"]) for g in given],
        movement["created_by"],
    )
    if movement["request_state"] != "PENDING_APPROVAL" and not given:
        counted = [movement["approved_by"]] if movement.get("approved_by") else []
    _, f = await _facts_of_request(tx, rid)
    used = await used_amounts(tx, policy, f, rid)
    accumulation = []
    for rule in policy.accumulating():
        assert rule.accumulation is not None
        assets = rule.lists.get("asset")
        if assets is not None and f.asset not in assets:
            continue
        limit = rule.accumulation.range.limit()
        accumulation.append(
            {
                "rule": rule.name,
                "scope": rule.accumulation.scope,
                "window_seconds": rule.accumulation.window_seconds,
                "used": str(used[rule.name]),
                "limit": None if limit is None else str(limit),
            }
        )
    charge = await tx.fetchrow(SQL.charged, {"request_id": rid})
    delay_left = await tx.fetchval(SQL.delay_left, {"request_id": rid})
    delay = int(movement.get("policy_delay_seconds") or 0)
    if movement["request_state"] == "PENDING_APPROVAL":
        delay_left = float(delay)
    return {
        "version": version,
        "rule": movement.get("policy_rule"),
        "approvals": approvals.as_json(),
        "approvals_given": [
            {
                "principal": g["principal"],
                "role": g["principal_role"],
                "counted": g["principal"] in counted,
                "approved_at": g["approved_at"],
            }
            for g in given
        ],
        "approvals_needed": max(0, approvals.count - len(counted)),
        "accumulation": accumulation,
        "charged": None if charge is None else str(charge["amount"]),
        "delay_seconds": delay,
        "delay_left_seconds": float(delay_left or 0.0),
    }
