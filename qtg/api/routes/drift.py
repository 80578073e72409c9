"""GET /v3/drift (viewer): verify_drift's findings (issue 11, reference §13).

Its schemas live here rather than in qtg/api/schemas.py: they belong to the
chain side alone.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from qtg.api import schemas as s
from qtg.api.routing import Call, Endpoint
from qtg.services import drift


class DriftQuery(s.QueryParams):
    open: bool = False  # only findings not cleared yet
    limit: s.Limit = 50


class DriftFinding(s.Out):
    id: int
    chain_id: int
    subject: str
    check_name: str
    expected: str
    observed: str
    evidence: dict[str, Any]
    found_at: datetime
    cleared_at: datetime | None


class DriftList(s.Out):
    items: list[DriftFinding]


async def list_drift(call: Call) -> Any:
    q: DriftQuery = call.query
    return {"items": await drift.list_findings(call.ctx.db, open_only=q.open, limit=q.limit)}


ENDPOINTS = [
    Endpoint(
        "GET",
        "/v3/drift",
        list_drift,
        "On-chain drift findings (verify_drift): open first, newest first",
        "operations",
        DriftList,
        query_model=DriftQuery,
    ),
]
