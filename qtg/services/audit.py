"""The audit outbox (reference §9) and its hash-chained log (DESIGN §2, beyond).

A mutation writes its audit fact with `qtg.services.auditing.record_audit`
in its own transaction, so the fact exists exactly when the change does. The
audit_outbox_promoter (`promote_audit_outbox`) then moves facts into
`audit_events`, oldest outbox id first, chaining each row to the previous one
(qtg/domain/audit_chain.py).

Why promoted outbox rows are *deleted* rather than marked: the audit_events
row is the durable record (it keeps `outbox_id`, UNIQUE, so a fact can never
be promoted twice); keeping the outbox row would duplicate it and grow a
queue that every pass scans. Deleting in the promoting transaction also means
the promoter keeps no cursor, so a fact whose transaction commits after a
later id was promoted is not skipped (DESIGN §9) — it is promoted by the next
pass and lands later in the chain. The chain's order is therefore promotion
order: outbox id order among the facts visible at each pass.

One writer at a time: the pass takes a transaction-level advisory lock and a
runtime that does not get it returns 0 at once, so two runtimes can never
interleave prev_hash values.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import secrets
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from qtg.config import AuditKeys as AuditKeys  # re-exported: the services' callers use them here
from qtg.config import audit_keys as audit_keys
from qtg.db import Database, sql_family
from qtg.domain import audit_chain
from qtg.services.auditing import record_audit
from qtg.services.context import ServiceContext

if TYPE_CHECKING:
    from qtg.config import Settings

log = logging.getLogger(__name__)

SQL = sql_family(
    "audit",
    "try_lock",
    "chain_head",
    "pending",
    "promote_one",
    "delete_promoted",
    "chain_page",
    "checkpoint_head",
    "latest_anchor",
)

#: Outbox rows promoted per pass; the runtime goes round again at once after a
#: pass that promoted something, so a burst drains in a few passes.
PROMOTE_BATCH_SIZE = 500
#: audit_events rows read per verification page (bounded memory on any size of log).
VERIFY_PAGE_SIZE = 1000
#: How often, and how far apart, `qtg audit adopt` tries to take the chain's lock.
ADOPT_ATTEMPTS = 200
ADOPT_RETRY_SECONDS = 0.05


#: File, under MG_EMBEDDED_DATA_DIR, holding the generated audit key (embedded database only).
EMBEDDED_KEY_FILE_NAME = "audit_hmac_key"


def with_embedded_key(settings: Settings, *, create: bool) -> Settings:
    """`settings` keyed by MG_EMBEDDED_DATA_DIR/audit_hmac_key when they use the
    embedded database and configure no key (issue 26): the default is keyed.

    The runtime creates the key (0600, atomically) on first start; commands
    (`create=False`) only use one that exists. An external database, or any
    key setting, leaves `settings` as they are: the operator decides there.
    """
    if settings.database_url is not None or settings.audit_hmac_key or settings.audit_hmac_key_file:
        return settings
    path = Path(settings.embedded_data_dir) / EMBEDDED_KEY_FILE_NAME
    if not path.exists():
        if not create:
            return settings
        _create_key_file(path)
    return settings.replace(audit_hmac_key_file=str(path))


def _create_key_file(path: Path) -> None:
    """Write a new random key (mode 0600); if another process won the race, keep theirs."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".audit_hmac_key.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(secrets.token_hex(32) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)  # atomic, and never replaces an existing key
        except FileExistsError:
            return
    finally:
        os.unlink(tmp)
    log.info("generated an audit HMAC key", extra={"path": str(path)})


@functools.lru_cache(maxsize=4)
def _keys_once(key: str | None, key_file: str | None, previous: str | None) -> AuditKeys | None:
    """`audit_keys` read once per process (the key file is not re-read on every pass)."""
    from qtg.config import Settings

    return audit_keys(
        Settings(
            audit_hmac_key=key, audit_hmac_key_file=key_file, audit_hmac_previous_keys=previous
        )
    )


class UnkeyedChainError(RuntimeError):
    """A key is configured but the chain's newest row is not keyed (issue 26), or
    the other way round: no key configured and the newest row is keyed.

    Nothing tells a legacy chain written before the key from one an attacker
    re-hashed as legacy (or whose keyed rows they deleted): only a keyed row
    proves the key holder wrote it. So a keyed promoter never continues such a
    chain on its own; an operator who has checked it runs `qtg audit adopt`.
    """


def unkeyed_head_problem(head: Mapping[str, Any] | None) -> str | None:
    """Why a keyed promoter may not extend a chain whose newest row is `head`, or None."""
    if head is None or head["chain_version"] != audit_chain.LEGACY_VERSION:
        return None
    return (
        f"an audit HMAC key is configured but the audit chain's newest row (audit_events id "
        f"{head['id']}) is unkeyed: the chain has no keyed row after it, so it may have been "
        "rewritten without the key (re-hashed as legacy rows, or its keyed rows deleted). "
        "Check it (`qtg audit verify --checkpoint FILE` against a checkpoint you kept), then "
        "run `qtg audit adopt` to continue it keyed"
    )


def keyed_head_problem(head: Mapping[str, Any] | None) -> str | None:
    """Why an unkeyed promoter may not extend a chain whose newest row is `head`, or None.

    The downgrade the other way: a runtime started without the key (a lost setting,
    a copied unit file) would append legacy rows after keyed ones, which nobody can
    tell from rows written by someone who never had the key.
    """
    if head is None or head["chain_version"] == audit_chain.LEGACY_VERSION:
        return None
    return (
        f"the audit chain is keyed (its newest row, audit_events id {head['id']}, is keyed "
        f"with key id {head['key_id']!r}) but no audit HMAC key is configured: set "
        "MG_AUDIT_HMAC_KEY or MG_AUDIT_HMAC_KEY_FILE to the key it was written with; an "
        "unkeyed runtime would append rows nobody can tell from forged ones"
    )


def head_problem(head: Mapping[str, Any] | None, keys: AuditKeys | None) -> str | None:
    """Why a promoter keyed (or not) as `keys` may not extend a chain headed by `head`."""
    return keyed_head_problem(head) if keys is None else unkeyed_head_problem(head)


async def check_chain_extendable(db: Database, keys: AuditKeys | None) -> None:
    """UnkeyedChainError when this runtime's promoter may not extend the chain: keyed on
    an unkeyed head, or unkeyed on a keyed one (the start-up check)."""
    problem = head_problem(await db.fetchrow(SQL.chain_head), keys)
    if problem is not None:
        raise UnkeyedChainError(problem)


async def promote_pending(
    db: Database,
    *,
    limit: int = PROMOTE_BATCH_SIZE,
    keys: AuditKeys | None = None,
    adopt_unkeyed: bool = False,
) -> int:
    """Promote up to `limit` outbox rows in one transaction, keyed when `keys` is given.

    Returns 0 at once when another promoter holds the chain. With `keys`, an
    unkeyed head is refused (UnkeyedChainError) unless `adopt_unkeyed` (the
    operator's `qtg audit adopt`).
    """
    async with db.transaction() as tx:
        if not await tx.fetchval(SQL.try_lock):
            return 0
        rows = await tx.fetch(SQL.pending, {"limit": limit})
        if not rows:
            return 0
        head_row = await tx.fetchrow(SQL.chain_head)
        if not (keys is not None and adopt_unkeyed):
            problem = head_problem(head_row, keys)
            if problem is not None:
                raise UnkeyedChainError(problem)
        head = head_row["row_hash"] if head_row is not None else audit_chain.GENESIS_HASH
        if keys is None:
            hashes = audit_chain.chain(head, rows)
            version, kid = audit_chain.LEGACY_VERSION, None
        else:
            hashes = audit_chain.chain(head, rows, keys.current)
            version, kid = audit_chain.KEYED_VERSION, keys.current_id
        # sent pipelined, in this order, with the commit
        for row, (prev, current) in zip(rows, hashes, strict=True):
            tx.defer(
                SQL.promote_one,
                {
                    "outbox_id": row["outbox_id"],
                    "prev_hash": prev,
                    "row_hash": current,
                    "chain_version": version,
                    "key_id": kid,
                },
            )
        tx.defer(SQL.delete_promoted, {"ids": [row["outbox_id"] for row in rows]})
        return len(rows)


async def adopt_unkeyed_chain(db: Database, keys: AuditKeys, *, actor: str) -> int | None:
    """Continue an unkeyed chain with keyed rows: the operator vouches for its past.

    Writes an `audit.chain_adopted` fact naming the unkeyed head it adopts and
    promotes it (with anything else pending) keyed, so from here on the chain
    has a keyed row and verification requires one. Returns the adopted head id,
    or None when there was nothing to adopt (empty, or already keyed).
    """
    head = await db.fetchrow(SQL.chain_head)
    if unkeyed_head_problem(head) is None:
        return None
    assert head is not None
    async with db.transaction() as tx:
        await record_audit(
            tx,
            actor=actor,
            action="audit.chain_adopted",
            object_type="audit_chain",
            object_id=head["id"],
            detail={
                "unkeyed_head_id": head["id"],
                "unkeyed_head_hash": head["row_hash"],
                "key_id": keys.current_id,
            },
        )
    # A keyed runtime's promoter refuses the unkeyed head and lets go of the
    # lock at once, so a bounded number of tries is enough.
    for _ in range(ADOPT_ATTEMPTS):
        if await promote_pending(db, keys=keys, adopt_unkeyed=True):
            break
        await trio.sleep(ADOPT_RETRY_SECONDS)
    if unkeyed_head_problem(await db.fetchrow(SQL.chain_head)) is not None:
        raise UnkeyedChainError(
            "could not promote the adoption keyed: another promoter holds the audit chain "
            "(stop runtimes that run without MG_AUDIT_HMAC_KEY and try again)"
        )
    return int(head["id"])


async def promote_audit_outbox(ctx: ServiceContext) -> int:
    """The audit_outbox_promoter pass (reference §9)."""
    keys = _keys_once(
        ctx.settings.audit_hmac_key,
        ctx.settings.audit_hmac_key_file,
        ctx.settings.audit_hmac_previous_keys,
    )
    global _warned_unkeyed
    if keys is None and not _warned_unkeyed:
        _warned_unkeyed = True
        log.warning(
            "audit chain is UNKEYED: set MG_AUDIT_HMAC_KEY or MG_AUDIT_HMAC_KEY_FILE; without "
            "a key, anyone with SQL access can rewrite audit_events undetectably"
        )
    promoted = await promote_pending(ctx.db, keys=keys)
    if keys is not None:
        await publish_checkpoint_if_due(ctx.db, ctx.settings, keys)
    return promoted


_warned_unkeyed = False
#: trio.current_time() of this process's last published checkpoint (None: never).
_last_checkpoint_at: float | None = None
#: The file under MG_AUDIT_CHECKPOINT_DIR that checkpoints are appended to.
CHECKPOINT_FILE_NAME = "audit-checkpoints.jsonl"


async def publish_checkpoint_if_due(db: Database, settings: Settings, keys: AuditKeys) -> bool:
    """Publish a checkpoint outside the database if the interval has passed (True if so).

    Why here and not in a worker of its own: the promoter is the one writer of
    the chain, so its pass is where the head moves; the worker registry keeps
    mirroring the reference. A log line (and an appended file line) is out of
    the database's reach, so `qtg audit verify --checkpoint` can later be fed
    any published line. Per process: each runtime publishes its own.
    """
    global _last_checkpoint_at
    interval = settings.audit_checkpoint_interval_seconds
    now = trio.current_time()
    if interval <= 0 or (_last_checkpoint_at is not None and now - _last_checkpoint_at < interval):
        return False
    _last_checkpoint_at = now
    checkpoint = await take_checkpoint(db, keys)
    line = json.dumps(checkpoint, sort_keys=True)
    log.info("audit checkpoint %s", line, extra={"audit_checkpoint": checkpoint})
    if settings.audit_checkpoint_dir:
        path = Path(settings.audit_checkpoint_dir) / CHECKPOINT_FILE_NAME
        await trio.to_thread.run_sync(_append_line, path, line)
    return True


def _append_line(path: Path, line: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        out.write(line + "\n")


@dataclass(frozen=True, slots=True)
class VerifyResult:
    ok: bool
    checked: int  # rows that verified before the first break (all rows when ok)
    first_broken_id: int | None = None
    reason: str | None = None
    archived: int = 0  # rows before the archive anchor verification started from


async def latest_anchor(db: Database) -> Mapping[str, Any] | None:
    """The newest audit archive anchor (`qtg prune`, migration 0024), or None."""
    return await db.fetchrow(SQL.latest_anchor)


async def verify_audit_chain(
    db: Database,
    *,
    page_size: int = VERIFY_PAGE_SIZE,
    keys: AuditKeys | None = None,
    checkpoint: Mapping[str, Any] | None = None,
) -> VerifyResult:
    """Recompute the chain from the genesis hash, or from the newest archive anchor
    once `qtg prune` archived its oldest rows; name the first row that breaks it.

    With a `checkpoint` (see `take_checkpoint`), also prove the table still
    holds its head and extends it: a truncated or rewritten table fails.
    `checked` counts the rows in the table (after the anchor), not archived ones.
    """
    by_id = keys.by_id if keys is not None else {}
    if checkpoint is not None:
        problem = audit_chain.check_checkpoint(checkpoint, by_id)
        if problem is not None:
            return VerifyResult(ok=False, checked=0, first_broken_id=None, reason=problem)
    anchor = await latest_anchor(db)
    started = audit_chain.verifier_from_anchor(
        None if anchor is None else anchor["checkpoint"],
        anchor["head_chain_version"] if anchor is not None else audit_chain.LEGACY_VERSION,
        keys=by_id,
        checkpoint=checkpoint,
        require_keyed=keys is not None,
    )
    if isinstance(started, audit_chain.ChainBreak):
        return VerifyResult(
            ok=False, checked=0, first_broken_id=started.row_id or None, reason=started.reason
        )
    verifier = started
    if anchor is not None and (
        anchor["checkpoint"]["head_id"] != anchor["head_id"]
        or anchor["checkpoint"]["head_hash"] != anchor["head_hash"]
        or anchor["checkpoint"]["count"] != anchor["count"]
    ):
        return VerifyResult(
            ok=False,
            checked=0,
            first_broken_id=anchor["head_id"],
            reason="archive anchor: its columns disagree with its checkpoint (edited)",
        )
    after_id = verifier.last_id
    while True:
        rows = await db.fetch(SQL.chain_page, {"after_id": after_id, "limit": page_size})
        if not rows or not verifier.feed(rows):
            break
        after_id = rows[-1]["id"]
    broken = verifier.finish()
    if broken is not None:
        return VerifyResult(
            ok=False,
            checked=verifier.checked,
            first_broken_id=broken.row_id or None,
            reason=broken.reason,
            archived=verifier.base_count,
        )
    return VerifyResult(ok=True, checked=verifier.checked, archived=verifier.base_count)


async def take_checkpoint(db: Database, keys: AuditKeys) -> dict[str, Any]:
    """A signed {head_id, head_hash, count, key_id, created_at, mac} of the chain as it is now.

    Kept outside the database (a file, a log line), it lets `verify_audit_chain`
    detect that rows up to the head were deleted or rewritten.
    """
    head = await db.fetchrow(SQL.checkpoint_head)
    assert head is not None
    return audit_chain.make_checkpoint(
        keys.current,
        head_id=head["head_id"] or 0,
        head_hash=head["head_hash"] or audit_chain.GENESIS_HASH,
        count=head["count"],
        created_at=datetime.now(UTC),
    )
