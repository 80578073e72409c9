"""A real API server per test: serve_api on an ephemeral port in the test's nursery.

Clients are real too: httpx over loopback HTTP, trio-websocket for the
stream. Tokens are created through the token service, as `qtg token create`
does: admin (admin), alice and bob (operators), vic (viewer).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from qtg.api import ApiServer, serve_api
from qtg.api.errors import COUNTERS
from qtg.config import Settings
from qtg.db import Database, ListenHub
from qtg.providers.registry import build_registry
from qtg.services import tokens
from qtg.services.context import ServiceContext

MANUAL_GRAPH = {
    "nodes": [
        {"key": "confirm", "kind": "manual", "action_type": "manual_confirm"},
    ],
    "edges": [],
}
ACTION_GRAPH = {
    "nodes": [
        {
            "key": "withdraw",
            "kind": "action",
            "action_type": "cex_withdrawal",
            "config": {"venue": "sandbox"},
        },
        {
            "key": "receive",
            "kind": "observe",
            "action_type": "destination_chain_receive_observe",
            "config": {"txid": "$ref:withdraw.txid"},
        },
        {"key": "confirm", "kind": "manual", "action_type": "manual_confirm"},
    ],
    "edges": [["withdraw", "receive"], ["receive", "confirm"]],
}
INTENT = {"asset": "USDC", "amount": "125.50", "destination": "0xabc"}


@dataclass
class Api:
    server: ApiServer
    db: Database
    hub: ListenHub
    settings: Settings
    tokens: dict[str, str]
    clients: dict[str, httpx.AsyncClient]

    @property
    def url(self) -> str:
        return self.server.url

    def __getitem__(self, who: str) -> httpx.AsyncClient:
        return self.clients[who]

    @property
    def feed(self) -> Any:
        return self.server.app.state.feed


def api_settings(dsn: str, **overrides: Any) -> Settings:
    return Settings.from_env({}).replace(
        database_url=dsn, api_host="127.0.0.1", api_port=0, **overrides
    )


async def start_api(nursery: Any, db: Database, hub: ListenHub, settings: Settings) -> ApiServer:
    ctx = ServiceContext(db, settings, build_registry(settings, db))
    return await nursery.start(serve_api, ctx, hub, settings)


@pytest.fixture
def stream_overrides() -> dict[str, Any]:
    """Settings a test module may override (e.g. a tiny stream buffer)."""
    return {}


@pytest.fixture
async def api(
    db: Database, hub: ListenHub, dsn: str, nursery: Any, stream_overrides: dict[str, Any]
) -> AsyncIterator[Api]:
    settings = api_settings(dsn, **stream_overrides)
    server = await start_api(nursery, db, hub, settings)
    issued = {}
    for name, role in (
        ("admin", "admin"),
        ("alice", "operator"),
        ("bob", "operator"),
        ("vic", "viewer"),
    ):
        issued[name] = (await tokens.create_token(db, name=name, role=role, actor="test"))["token"]
    clients = {
        name: httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        for name, token in issued.items()
    }
    clients["anon"] = httpx.AsyncClient(base_url=server.url, timeout=10)
    internal_before = COUNTERS.internal_errors
    data_before = COUNTERS.data_errors
    try:
        yield Api(server, db, hub, settings, issued, clients)
    finally:
        for client in clients.values():
            await client.aclose()
    # No test input, however bad, may reach the catch-all 500 or the database's
    # data-exception safety net.
    assert COUNTERS.internal_errors == internal_before, "an unexpected 500 happened"
    assert COUNTERS.data_errors == data_before, "bad input reached the database"


async def make_template(api: Api, key: str = "t.manual", graph: dict | None = None) -> dict:
    r = await api["admin"].post(
        "/v3/templates",
        json={"template_key": key, "name": key, "graph": graph or MANUAL_GRAPH},
    )
    assert r.status_code == 201, r.text
    return r.json()


async def make_movement(
    api: Api, key: str = "t.manual", who: str = "alice", idem: str | None = None, **body: Any
) -> dict:
    import uuid

    r = await api[who].post(
        "/v3/movements",
        json={"template_key": key, "intent": INTENT, **body},
        headers={"Idempotency-Key": idem or uuid.uuid4().hex},
    )
    assert r.status_code == 201, r.text
    return r.json()
