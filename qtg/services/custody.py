"""The signing path's custody checks (issue 45 item 5): the one place a dispatched
node's payload reaches its signer.

`sign_approved` is handed the approved movement (the snapshot the dispatcher's
claim read under its locks; the dispatcher signs with no lock held, issue 44
item 3, and its write-ahead re-checks the plan hash under the locks again) and,
before the signer sees anything:

- the signer's identity: the address it signs as must be the one an admin
  enrolled (`PUT /v3/signers/{key}/expected-identity`); unenrolled signers sign
  (the roster shows them `unenrolled`);
- the approval seal: the movement's rows must still hash to the seal its
  approval wrote (qtg.domain.custody.seal_problem);
- the transaction: for an `evm_transfer`, chain, asset, destination and amount
  must be the approved ones (qtg.domain.custody.transfer_mismatch).

A refusal signs nothing: the node stays READY and waits (`CustodyRefused` is a
RetryLater, so the dispatcher defers it and MG_NODE_TRANSIENT_ATTENTION_SECONDS
later the transient-attention sweep moves the movement to MANUAL_INTERVENTION),
and a critical `custody_refusal` notification pages at once. The operator's way
out: fix the cause (enrol the right identity, or restore the edited row) and the
next retry signs, or cancel the movement.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from qtg.db import Database, Jsonb, Tx, sql_family
from qtg.domain.context import ExecutionContext
from qtg.domain.custody import (
    COMPARED_ACTIONS,
    IDENTITY_MISMATCH,
    SEAL_MISMATCH,
    SEAL_MISSING,
    TX_MISMATCH,
    approved_transfer,
    identity_mismatch,
    seal_problem,
    transfer_mismatch,
)
from qtg.domain.execution import build_sign_request
from qtg.providers.base import PreparedAction, RetryLater, Signer
from qtg.services.progress import Snapshot

log = logging.getLogger("qtg.services.custody")

SQL = sql_family("custody", "signing_facts", "raise_refusal", "resolve_refusal")

#: The codes a refusal leaves on the waiting node (its error_code until it signs).
REFUSAL_CODES = frozenset({IDENTITY_MISMATCH, SEAL_MISMATCH, SEAL_MISSING, TX_MISMATCH})

#: First wait of a refused node before the dispatcher looks again (it doubles with
#: each refusal in a row, up to MG_NODE_TRANSIENT_RETRY_MAX_SECONDS). Short: a look
#: costs one read and signs nothing, and once the operator has fixed the cause
#: (enrolled the right identity) the movement goes on within seconds.
REFUSED_RETRY_SECONDS = 5.0


class CustodyRefused(RetryLater):
    """The signer side refused to sign: nothing was signed or sent; the node waits."""


def signer_identity(signer: Signer) -> str | None:
    """The address a signer signs as, as it reports itself (EVM signers: `address`;
    the sandbox signer: `signer_address`)."""
    for name in ("address", "signer_address"):
        value = getattr(signer, name, None)
        if isinstance(value, str) and value:
            return value
    return None


async def sign_approved(
    db: Database,
    signer: Signer,
    snap: Snapshot,
    node: dict[str, Any],
    context: ExecutionContext,
    prepared: PreparedAction,
) -> str:
    """The signature of `prepared`, after the custody checks against the approved
    movement `snap`; raises CustodyRefused (after paging) when one fails. Each
    read and write is a statement of its own: no transaction is open while the
    signer (a PKCS#11 token, a remote signer) is asked."""
    facts = await db.fetchrow(
        SQL.signing_facts, {"request_id": snap.request["id"], "signer_key": signer.key}
    )
    facts = facts or {}
    problem = _problem(facts, signer, snap, context, prepared)
    if problem is not None:
        code, why = problem
        await _page(db, snap, node, signer.key, code, why)
        raise CustodyRefused(why, code=code, retry_after_seconds=REFUSED_RETRY_SECONDS)
    signature = await signer.sign(build_sign_request(context, prepared))
    if node.get("error_code") in REFUSAL_CODES:  # refused before, signed now: unpage
        key = _dedupe_key(node, node["error_code"])
        await db.fetchrow(SQL.resolve_refusal, {"dedupe_key": key})
    return signature


async def seal_holds(
    tx: Tx, signer_key: str, snap: Snapshot, node: dict[str, Any]
) -> CustodyRefused | None:
    """The seal check of `sign_approved` again, in the dispatcher's write-ahead
    transaction on the rows as they are stored now (`snap`, read under its locks):
    the signature was made with no lock held, so rows edited since would go out
    under a seal that no longer matches them. None when it holds; else the
    refusal (paged), for the caller to wait on: the signature is never written."""
    facts = await tx.fetchrow(
        SQL.signing_facts, {"request_id": snap.request["id"], "signer_key": signer_key}
    )
    sealed = seal_problem(
        {**snap.request, "approval_seal": (facts or {}).get("approval_seal")}, snap.nodes
    )
    if sealed is None:
        return None
    code, why = sealed
    await _page(tx, snap, node, signer_key, code, why)
    return CustodyRefused(why, code=code, retry_after_seconds=REFUSED_RETRY_SECONDS)


def _dedupe_key(node: dict[str, Any], code: str) -> str:
    return f"custody:{node['id']}:{code}"


def _problem(
    facts: dict[str, Any],
    signer: Signer,
    snap: Snapshot,
    context: ExecutionContext,
    prepared: PreparedAction,
) -> tuple[str, str] | None:
    why = identity_mismatch(facts.get("expected_signer_address"), signer_identity(signer))
    if why is not None:
        return IDENTITY_MISMATCH, why
    sealed = seal_problem({**snap.request, "approval_seal": facts.get("approval_seal")}, snap.nodes)
    if sealed is not None:
        return sealed
    if (signer.key, prepared.action_type) in COMPARED_ACTIONS:
        approved = approved_transfer(context.intent, context.node_config)
        if isinstance(approved, str):
            return TX_MISMATCH, f"the approved movement defines no transfer: {approved}"
        try:
            payload = json.loads(prepared.payload)
        except ValueError:
            return TX_MISMATCH, "the prepared transaction is not JSON"
        why = transfer_mismatch(payload, approved)
        if why is not None:
            return TX_MISMATCH, f"the transaction is not the approved transfer: {why}"
    return None


async def _page(
    db: Database | Tx, snap: Snapshot, node: dict[str, Any], signer_key: str, code: str, why: str
) -> None:
    request_id = snap.request["id"]
    log.error(
        "custody: signature refused; the node waits and pages",
        extra={
            "request_id": str(request_id),
            "node_key": node["node_key"],
            "signer_key": signer_key,
            "error_code": code,
        },
    )
    await db.fetchrow(
        SQL.raise_refusal,
        {
            "dedupe_key": _dedupe_key(node, code),
            "subject": f"signature refused ({code}) for movement {request_id}",
            "body": f"node {node['node_key']} (signer {signer_key}): {why}",
            "links": Jsonb(
                {"request_id": str(request_id), "node_key": node["node_key"], "error_code": code}
            ),
            "request_id": request_id,
            "node_key": node["node_key"],
        },
    )
