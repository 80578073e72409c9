"""The treasury view: GET /v3/balances (latest, `stale`, `fresh=true`) and its history."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from qtg.api import schemas as s
from qtg.api.errors import ApiError
from qtg.api.routing import Call, Endpoint, decode_cursor, encode_cursor
from qtg.services import balance_history_rollup, balance_snapshot
from qtg.services.tokens import Role


async def list_balances(call: Call) -> Any:
    q: s.BalanceQuery = call.query
    outcomes = None
    if q.fresh:
        assert call.principal is not None
        if not call.principal.may(Role.operator):
            raise ApiError(
                403,
                "FORBIDDEN",
                f"fresh=true needs the operator role; {call.principal.name} is "
                f"{call.principal.role.name}",
                {"field": "fresh", "required_role": "operator", "role": call.principal.role.name},
            )
        done = await balance_snapshot.fresh_fetch(call.ctx, venue_key=q.venue_key)
        outcomes = [o.as_dict() for o in done]
    view = await balance_snapshot.latest_balances(
        call.ctx.db,
        threshold_seconds=call.ctx.settings.balance_stale_threshold_seconds,
        venue_key=q.venue_key,
        account=q.account,
        asset=q.asset,
    )
    return {**view, "fresh": outcomes}


def _history_cursor(cursor: str | None) -> tuple[datetime, str, str, str] | None:
    text = decode_cursor(cursor)
    if text is None:
        return None
    try:
        start, venue, account, asset = json.loads(text)
        return datetime.fromisoformat(start), str(venue), str(account), str(asset)
    except (ValueError, TypeError):
        raise ApiError(
            422, "VALIDATION_FAILED", "cursor: not a cursor this API returned", {"field": "cursor"}
        ) from None


async def balance_history(call: Call) -> Any:
    q: s.BalanceHistoryQuery = call.query
    rows, key = await balance_history_rollup.history_page(
        call.ctx.db,
        bucket=q.bucket,
        venue_key=q.venue_key,
        account=q.account,
        asset=q.asset,
        since=q.since,
        until=q.until,
        after=_history_cursor(q.cursor),
        limit=q.limit,
    )
    cursor = None
    if key is not None:
        cursor = encode_cursor(json.dumps([key[0].isoformat(), *key[1:]]))
    return {"items": rows, "next_cursor": cursor}


ENDPOINTS = [
    Endpoint(
        "GET",
        "/v3/balances",
        list_balances,
        "Latest balance per venue, account and asset, with stale flags (fresh=true fetches now)",
        "treasury",
        s.BalanceList,
        query_model=s.BalanceQuery,
        errors=(429,),
    ),
    Endpoint(
        "GET",
        "/v3/balances/history",
        balance_history,
        "Hourly or daily balance history (first, last, min, max, samples), newest first",
        "treasury",
        s.BalanceHistoryPage,
        query_model=s.BalanceHistoryQuery,
    ),
]
