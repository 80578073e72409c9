"""Liveness and readiness (no auth: load balancers and orchestrators call them)."""

from __future__ import annotations

from typing import Any

import psycopg
import trio

from qtg.api import schemas as s
from qtg.api.routing import Call, Endpoint, Reply
from qtg.db import sql_family
from qtg.db.migrate import MigrationError, check
from qtg.domain.durability import required
from qtg.services.durability import read_durability

SQL = sql_family("db", "ping")

#: A readiness probe must answer even when the database hangs.
CHECK_TIMEOUT_SECONDS = 3.0


async def healthz(call: Call) -> Any:
    return {"status": "ok"}


async def readyz(call: Call) -> Any:
    checks: dict[str, bool] = {}
    reasons: list[str] = []

    checks["database"] = False
    with trio.move_on_after(CHECK_TIMEOUT_SECONDS):
        try:
            await call.ctx.db.fetchval(SQL.ping)
            checks["database"] = True
        except psycopg.Error as exc:
            reasons.append(f"database: {type(exc).__name__}")
    if not checks["database"] and not reasons:
        reasons.append(f"database: no answer within {CHECK_TIMEOUT_SECONDS:g} s")

    checks["migrations"] = False
    if checks["database"]:
        try:
            status = await trio.to_thread.run_sync(check, call.ctx.db.dsn)
            checks["migrations"] = status.current
            if status.pending:
                reasons.append(f"migrations pending: {', '.join(status.pending)}")
        except (MigrationError, psycopg.Error) as exc:
            reasons.append(f"migrations: {str(exc).strip().splitlines()[0]}")
    else:
        reasons.append("migrations: not checked (database unreachable)")

    checks["listen"] = call.hub.connected
    if not call.hub.connected:
        reasons.append("listen: the LISTEN connection is down (reconnecting)")

    durability = None
    if checks["database"]:
        watch = call.ctx.durability
        with trio.move_on_after(CHECK_TIMEOUT_SECONDS):
            try:
                state = await (watch.check(call.ctx.db) if watch else read_durability(call.ctx.db))
                durability = {
                    **state.as_dict(),
                    "required": required(state, call.ctx.settings.require_synchronous_replication),
                    "held": bool(watch and watch.holding),
                }
            except psycopg.Error:
                durability = None

    ready = all(checks.values())
    body = {
        "status": "ready" if ready else "not_ready",
        "checks": checks,
        "reasons": reasons,
        "durability": durability,
    }
    return Reply(body, 200 if ready else 503)


ENDPOINTS = [
    Endpoint(
        "GET", "/healthz", healthz, "Liveness: the process is up", "health", s.Health, role=None
    ),
    Endpoint(
        "GET",
        "/readyz",
        readyz,
        "Readiness: database reachable, migrations current, LISTEN connected (503 if not)",
        "health",
        s.Readiness,
        role=None,
        errors=(503,),
    ),
]
