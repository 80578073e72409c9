"""`qtg audit verify` and `qtg audit checkpoint`: the tamper-evident audit log.

`verify` recomputes the chain from the start (keyed rows with the keys from
MG_AUDIT_HMAC_KEY / _FILE / _PREVIOUS_KEYS, legacy rows with plain sha256).
Exit 0 and `OK` when every row follows from the one before it; exit 1 and the
id of the first row that does not, and why, so a cron job or a deploy script
can alert on it.

`checkpoint` writes a signed {head_id, head_hash, count, key_id, created_at,
mac} JSON document. Kept somewhere the database cannot rewrite (a file on
another host, a ticket, a log line), `verify --checkpoint FILE` proves the
table still contains that head and extends it: deleting the tail, deleting
everything, or rewriting and re-hashing history all fail.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import trio

from qtg.cli.common import CommandError, add_database_option, describe_dsn, schema_ready_url
from qtg.config import ConfigError, Settings
from qtg.db import Database
from qtg.domain import audit_chain
from qtg.services.audit import (
    AuditKeys,
    UnkeyedChainError,
    VerifyResult,
    adopt_unkeyed_chain,
    audit_keys,
    take_checkpoint,
    verify_audit_chain,
    with_embedded_key,
)
from qtg.services.retention import verify_archive_files


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="the tamper-evident audit log",
        description="Work with the hash-chained audit_events log.",
    )
    actions = parser.add_subparsers(title="actions", dest="audit_action", metavar="ACTION")
    actions.required = True
    verify = actions.add_parser(
        "verify",
        help="recompute the hash chain; exit 1 naming the first broken row",
        description="Recompute every audit_events row hash from the genesis hash. "
        "Exit 0 if the chain is intact, 1 if a row was edited, removed or forged. "
        "With --checkpoint, also prove the table still extends that checkpoint.",
    )
    add_database_option(verify)
    verify.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="a JSON checkpoint written by `qtg audit checkpoint` ('-' for stdin)",
    )
    verify.set_defaults(run=run_verify)
    checkpoint = actions.add_parser(
        "checkpoint",
        help="write a signed checkpoint of the chain's head (needs MG_AUDIT_HMAC_KEY)",
        description="Write {head_id, head_hash, count, key_id, created_at, mac} as JSON. "
        "Keep it outside the database; `qtg audit verify --checkpoint FILE` checks against it.",
    )
    add_database_option(checkpoint)
    checkpoint.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    checkpoint.set_defaults(run=run_checkpoint)
    adopt = actions.add_parser(
        "adopt",
        help="continue an unkeyed (legacy) chain with keyed rows (needs MG_AUDIT_HMAC_KEY)",
        description="With a key configured, the runtime refuses to extend a chain whose "
        "newest row is unkeyed, and `verify` fails a chain with no keyed row: an unkeyed "
        "chain may have been rewritten by anyone with SQL access. After checking the chain "
        "(against a checkpoint or an export you trust), `adopt` appends a keyed "
        "audit.chain_adopted row naming the unkeyed head, and the keyed chain goes on from it.",
    )
    add_database_option(adopt)
    adopt.set_defaults(run=run_adopt)
    archive = actions.add_parser(
        "verify-archive",
        help="re-check audit archive files written by `qtg prune` (no database)",
        description="Recompute the hash chain of one or more archive files, oldest first: "
        "every row chains to the one before it (across files too) and each file's anchor "
        "names its last row (signed when MG_AUDIT_HMAC_KEY is set). Exit 0 OK, 1 broken.",
    )
    archive.add_argument("files", nargs="+", metavar="FILE")
    archive.set_defaults(run=run_verify_archive)


def _load_checkpoint(path: str) -> dict[str, Any]:
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        # a JSON-lines file (MG_AUDIT_CHECKPOINT_DIR): the newest checkpoint is the last line
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) < 2:
            raise
        data = json.loads(lines[-1])
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _settings(args: argparse.Namespace) -> Settings:
    """The settings, with the embedded data folder's generated key when that is the database."""
    settings = Settings.from_env()
    if getattr(args, "database_url", None):
        return settings
    return with_embedded_key(settings, create=False)


def run_verify(args: argparse.Namespace) -> int:
    settings = _settings(args)
    keys = audit_keys(settings)
    checkpoint = None
    if args.checkpoint:
        try:
            checkpoint = _load_checkpoint(args.checkpoint)
        except (OSError, ValueError) as exc:
            print(f"--checkpoint {args.checkpoint}: cannot read a checkpoint ({exc})")
            return 2
    with schema_ready_url(args, settings) as dsn:
        where = describe_dsn(dsn)
        result = trio.run(_verify, dsn, keys, checkpoint)
    if result.ok:
        against = f", extending checkpoint head id {checkpoint['head_id']}" if checkpoint else ""
        archived = (
            f" (after the archive anchor: {result.archived} earlier events archived)"
            if result.archived
            else ""
        )
        print(f"{where}: OK, {result.checked} audit events verified{against}{archived}")
        if result.checked == 0 and checkpoint is None:
            print(
                "WARNING: the audit log is empty; without a checkpoint, an emptied "
                "table cannot be told from a new one",
                file=sys.stderr,
            )
        if keys is None:
            print(
                "WARNING: no MG_AUDIT_HMAC_KEY configured; only the unkeyed chain was checked",
                file=sys.stderr,
            )
        return 0
    at = f"audit_events id {result.first_broken_id}" if result.first_broken_id else "the table"
    print(f"{where}: BROKEN at {at}: {result.reason} ({result.checked} events before it verified)")
    return 1


def run_verify_archive(args: argparse.Namespace) -> int:
    keys = audit_keys(Settings.from_env())
    paths = [Path(name) for name in args.files]
    try:
        check = verify_archive_files(paths, keys)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"archive: BROKEN: cannot read it ({type(exc).__name__}: {exc})")
        return 1
    if check.broken is not None:
        at = f"audit_events id {check.broken.row_id}" if check.broken.row_id else "the file"
        print(f"archive: BROKEN at {at}: {check.broken.reason} ({check.rows} rows before it)")
        return 1
    start = (
        "the genesis hash"
        if check.first_prev_hash == audit_chain.GENESIS_HASH
        else f"hash {check.first_prev_hash} (an earlier archive's head)"
    )
    print(
        f"archive: OK, {check.rows} audit events verified from {start} up to id "
        f"{check.head_id} (head hash {check.head_hash}, {check.count} events in the chain)"
    )
    if keys is None:
        print(
            "WARNING: no MG_AUDIT_HMAC_KEY configured; keyed rows and anchors were not checked",
            file=sys.stderr,
        )
    return 0


def run_checkpoint(args: argparse.Namespace) -> int:
    settings = _settings(args)
    keys = audit_keys(settings)
    if keys is None:
        raise ConfigError(
            "qtg audit checkpoint: set MG_AUDIT_HMAC_KEY or MG_AUDIT_HMAC_KEY_FILE "
            "(an unsigned checkpoint could be forged)"
        )
    with schema_ready_url(args, settings) as dsn:
        checkpoint = trio.run(_checkpoint, dsn, keys)
    text = json.dumps(checkpoint, sort_keys=True) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(
            f"checkpoint: head id {checkpoint['head_id']}, {checkpoint['count']} events "
            f"-> {args.out}",
            file=sys.stderr,
        )
    else:
        sys.stdout.write(text)
    return 0


def run_adopt(args: argparse.Namespace) -> int:
    settings = _settings(args)
    keys = audit_keys(settings)
    if keys is None:
        raise ConfigError(
            "qtg audit adopt: set MG_AUDIT_HMAC_KEY or MG_AUDIT_HMAC_KEY_FILE "
            "(adopting means continuing the chain keyed)"
        )
    with schema_ready_url(args, settings) as dsn:
        where = describe_dsn(dsn)
        try:
            adopted = trio.run(_adopt, dsn, keys)
        except UnkeyedChainError as exc:
            raise CommandError(f"qtg audit adopt: {exc}") from None
    if adopted is None:
        print(f"{where}: nothing to adopt (the chain is empty or its newest row is keyed)")
    else:
        print(
            f"{where}: adopted the unkeyed chain up to audit_events id {adopted}; "
            f"it goes on keyed (key id {keys.current_id})"
        )
    return 0


async def _adopt(dsn: str, keys: AuditKeys) -> int | None:
    async with Database(dsn, min_size=1, max_size=2, application_name="qtg-audit-adopt") as db:
        return await adopt_unkeyed_chain(db, keys, actor="cli:qtg audit adopt")


async def _verify(
    dsn: str, keys: AuditKeys | None, checkpoint: dict[str, Any] | None
) -> VerifyResult:
    async with Database(dsn, min_size=1, max_size=1, application_name="qtg-audit-verify") as db:
        return await verify_audit_chain(db, keys=keys, checkpoint=checkpoint)


async def _checkpoint(dsn: str, keys: AuditKeys) -> dict[str, Any]:
    async with Database(dsn, min_size=1, max_size=1, application_name="qtg-audit-checkpoint") as db:
        return await take_checkpoint(db, keys)
