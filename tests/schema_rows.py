"""Minimal rows for schema-level tests, written with plain SQL on a sync psycopg connection.

Schema tests talk to the tables directly (not through services) because what
they prove is that the *database* enforces its rules whoever writes to it.
Each helper does one insert or update; states are reached only by walking
allowed transitions, so no trigger is ever bypassed.
"""

from __future__ import annotations

import shutil
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from qtg.db.migrate import MIGRATIONS_ROOT
from qtg.domain.states import NODE_TRANSITIONS, REQUEST_TRANSITIONS

INSERT_TEMPLATE = """
INSERT INTO movement_templates (template_key, name) VALUES (%(key)s, 'schema test')
RETURNING id
"""
INSERT_VERSION = """
INSERT INTO template_versions (template_id, version, graph, graph_hash, created_by)
VALUES (%(template_id)s, 1, '{"nodes": [], "edges": []}', 'hash', 'tester')
RETURNING id
"""
INSERT_PLAN_NODE = """
INSERT INTO plan_nodes (template_version_id, node_key, node_kind, action_type, position)
VALUES (%(version_id)s, 'step', 'action', 'cex_withdrawal', 0)
RETURNING id
"""
INSERT_REQUEST = """
INSERT INTO movement_requests (network_class, template_id, template_version_id,
    compiled_plan_hash, intent, idempotency_key, request_fingerprint, callback_url,
    created_by, expires_at, request_state)
VALUES ('default', %(template_id)s, %(version_id)s, 'plan-hash', '{"asset": "USDC"}',
    %(key)s, 'fingerprint', %(callback_url)s, 'creator', %(expires_at)s, %(state)s)
RETURNING id
"""
INSERT_NODE = """
INSERT INTO movement_request_nodes (request_id, plan_node_id, node_key, node_kind,
    action_type, node_state)
VALUES (%(request_id)s, %(plan_node_id)s, %(node_key)s, 'action', 'cex_withdrawal', %(state)s)
RETURNING id
"""
SET_NODE_STATE = "UPDATE movement_request_nodes SET node_state = %(state)s WHERE id = %(id)s"
SET_REQUEST_STATE = "UPDATE movement_requests SET request_state = %(state)s WHERE id = %(id)s"


@dataclass(frozen=True, slots=True)
class Plan:
    template_id: uuid.UUID
    version_id: uuid.UUID
    plan_node_id: uuid.UUID


def one(conn: psycopg.Connection[Any], query: str, params: dict[str, Any]) -> Any:
    row = conn.execute(query, params).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row[0]


def plan(conn: psycopg.Connection[Any]) -> Plan:
    """A template with one version holding one action node."""
    template_id = one(conn, INSERT_TEMPLATE, {"key": f"t-{uuid.uuid4().hex[:12]}"})
    version_id = one(conn, INSERT_VERSION, {"template_id": template_id})
    plan_node_id = one(conn, INSERT_PLAN_NODE, {"version_id": version_id})
    return Plan(template_id, version_id, plan_node_id)


def request(
    conn: psycopg.Connection[Any],
    p: Plan,
    *,
    callback_url: str | None = None,
    expires_at: Any = None,
    state: str = "PENDING_APPROVAL",
) -> uuid.UUID:
    """A movement request, born in `state` (the guard accepts only PENDING_APPROVAL)."""
    return one(
        conn,
        INSERT_REQUEST,
        {
            "template_id": p.template_id,
            "version_id": p.version_id,
            "key": uuid.uuid4().hex,
            "callback_url": callback_url,
            "expires_at": expires_at,
            "state": state,
        },
    )


def node(
    conn: psycopg.Connection[Any], p: Plan, request_id: uuid.UUID, state: str = "BLOCKED"
) -> uuid.UUID:
    """A node of `request_id`, born in `state` (the guard accepts only BLOCKED)."""
    return one(
        conn,
        INSERT_NODE,
        {
            "request_id": request_id,
            "plan_node_id": p.plan_node_id,
            "node_key": f"n-{uuid.uuid4().hex[:12]}",
            "state": state,
        },
    )


def set_node_state(conn: psycopg.Connection[Any], node_id: uuid.UUID, state: str) -> None:
    conn.execute(SET_NODE_STATE, {"id": node_id, "state": state})


def set_request_state(conn: psycopg.Connection[Any], request_id: uuid.UUID, state: str) -> None:
    conn.execute(SET_REQUEST_STATE, {"id": request_id, "state": state})


def path(transitions: Iterable[tuple[str, str]], start: str, goal: str) -> list[str]:
    """The states after `start` on a shortest allowed walk to `goal` (BFS)."""
    successors: dict[str, list[str]] = {}
    for src, dst in transitions:
        successors.setdefault(str(src), []).append(str(dst))
    previous: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if state == goal:
            walk = []
            at: str | None = goal
            while at is not None and at != start:
                walk.append(at)
                at = previous[at]
            return walk[::-1]
        for nxt in sorted(successors.get(state, [])):
            if nxt not in previous:
                previous[nxt] = state
                queue.append(nxt)
    raise ValueError(f"{goal} cannot be reached from {start}")


def walk_node_to(conn: psycopg.Connection[Any], node_id: uuid.UUID, state: str) -> None:
    for step in path(NODE_TRANSITIONS, "BLOCKED", state):
        set_node_state(conn, node_id, step)


def walk_request_to(conn: psycopg.Connection[Any], request_id: uuid.UUID, state: str) -> None:
    for step in path(REQUEST_TRANSITIONS, "PENDING_APPROVAL", state):
        set_request_state(conn, request_id, step)


def migrations_before(tmp_path: Path, version: str) -> Path:
    """A copy of migrations/ without `version` and those after it: a database
    migrated from it is one from before `version`, to test that migration's backfill."""
    root = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_ROOT, root)
    for later in root.glob("*.sql"):
        if later.name >= version:
            later.unlink()
    return root
