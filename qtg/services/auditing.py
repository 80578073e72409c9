"""Writing audit_outbox rows: who did what to which object, in the caller's transaction.

The promoter (qtg/services/audit.py) later copies them into the append-only,
hash-chained audit_events. Writing in the same transaction as the mutation
means there is no mutation without its audit row, and no audit row for a
mutation that rolled back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qtg.db import Jsonb, Tx, sql_family

SQL = sql_family("auditing", "record")


async def record_audit(
    tx: Tx,
    *,
    actor: str,
    action: str,
    object_type: str,
    object_id: object,
    detail: Mapping[str, Any] | None = None,
) -> None:
    """Queue the audit row; it is sent with the transaction's next statement or
    its commit (no round trip of its own), and an error in it rolls back the
    whole transaction all the same."""
    tx.defer(
        SQL.record,
        {
            "actor": actor,
            "action": action,
            "object_type": object_type,
            "object_id": str(object_id),
            "detail": Jsonb(dict(detail or {})),
        },
    )
