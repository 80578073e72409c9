"""ccip_drift (issue 12, reference §14) with both CCIP sidecar clients:

- the JSON-RPC client against the real simulator on anvil: a changed router (the
  simulator's code swapped for another deployment's, anvil_setCode) and a removed
  token (its supported-token list shortened, anvil_setStorageAt) are findings in
  drift_findings, and both clear when the chain matches the lanes again;
- the HTTP client against a real loopback HTTP server speaking README's contract:
  a changed router, a removed token pool, a changed rate limit, a sidecar that
  does not answer — each found, paged once, and cleared.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from evm.anvil import CHAIN_ID, KEYS, free_port
from runtime.rt_procs import query

from ccip.local import deploy, set_up
from qtg.config import ConfigError, Settings
from qtg.providers.registry import build_registry
from qtg.services.context import ServiceContext
from qtg.services.drift import ccip_drift, list_findings

OPEN = (
    "SELECT subject, check_name, expected, observed FROM drift_findings"
    " WHERE cleared_at IS NULL ORDER BY check_name"
)
PAGES = "SELECT occurrences, resolved_at IS NOT NULL FROM notifications WHERE dedupe_key = %s"
SUBJECT = "ccip:local"


def context(db, dsn: str, anvil, local, lane: dict | None = None, **env: str) -> ServiceContext:
    settings = Settings.from_env(
        {
            "MG_DATABASE_URL": dsn,
            "MG_PROVIDERS": "evm,ccip",
            "MG_EVM_RPC_URLS": f"{CHAIN_ID}={anvil.url}",
            "MG_EVM_SIGNER_PRIVATE_KEY": KEYS[0],
            "MG_EVM_RPC_READ_RETRIES": "0",
            "MG_CCIP_ENABLED": "true",
            "MG_CCIP_LANES": json.dumps([lane or local.lane()]),
            **env,
        }
    )
    return ServiceContext(db=db, settings=settings, providers=build_registry(settings, db))


async def test_the_rpc_client_finds_a_changed_router_and_a_removed_token(anvil, dsn, db):
    local = set_up(anvil, drips=0)
    ctx = context(db, dsn, anvil, local, MG_CCIP_SIDECAR="rpc")
    assert "ccip_sidecar" in ctx.providers.capabilities
    original = anvil.call("eth_getCode", local.simulator, "latest")
    other = deploy(anvil, "CCIPLocalSimulator")  # a new router behind the same registry
    try:
        assert await ccip_drift(ctx) == 0  # the chain matches the configured lane
        assert query(dsn, OPEN) == []

        anvil.call("anvil_setCode", local.simulator, anvil.call("eth_getCode", other, "latest"))
        assert await ccip_drift(ctx) == 1
        [(subject, check, expected, observed)] = query(dsn, OPEN)
        assert (subject, check, expected) == (SUBJECT, "router", local.router)
        assert observed not in (local.router, "none")
        assert await ccip_drift(ctx) == 0  # a drift that lasts is one finding
        page = f"drift:{CHAIN_ID}:{SUBJECT}:router"
        assert query(dsn, PAGES, (page,)) == [(1, False)]
        anvil.call("anvil_setCode", local.simulator, original)
        assert await ccip_drift(ctx) == 1  # cleared
        assert query(dsn, OPEN) == [] and query(dsn, PAGES, (page,)) == [(1, True)]

        # s_supportedTokens (slot 0) shortened to one: CCIP-LnM no longer crosses the lane
        slot0 = "0x" + "0" * 64
        anvil.call("anvil_setStorageAt", local.simulator, slot0, "0x" + "1".rjust(64, "0"))
        assert await ccip_drift(ctx) == 1
        assert query(dsn, OPEN) == [(SUBJECT, f"pool:{local.lnm}", "supported", "none")]
        [shown] = await list_findings(db, open_only=True, limit=10)  # what GET /v3/drift lists
        assert shown["check_name"] == f"pool:{local.lnm}" and shown["evidence"]["sidecar"] == "rpc"
        anvil.call("anvil_setStorageAt", local.simulator, slot0, "0x" + "2".rjust(64, "0"))
        assert await ccip_drift(ctx) == 1
        assert query(dsn, OPEN) == []
    finally:
        await ctx.providers.aclose()


class Sidecar:
    """A real HTTP server on loopback answering GET /lanes/<name> with `self.lanes`."""

    def __init__(self) -> None:
        self.lanes: dict[str, Any] = {}
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                name = self.path.removeprefix("/lanes/")
                if not self.path.startswith("/lanes/") or name not in outer.lanes:
                    self.send_response(404)
                    self.end_headers()
                    return
                body = json.dumps(outer.lanes[name]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_the_http_client_finds_router_pool_rate_limit_and_silence(anvil, dsn, db):
    local = set_up(anvil, drips=0)
    pool = "0x" + "ab" * 20
    limit = {"capacity": "1000", "rate": "10"}
    lane = local.lane(
        registry=None,
        on_ramp="0x" + "0e" * 20,
        tokens={local.bnm: pool},
        rate_limits={local.bnm: limit},
    )
    matching = {
        "router": local.router,
        "on_ramp": "0x" + "0e" * 20,
        "off_ramps": [],
        "tokens": {local.bnm: {"pool": pool, "rate_limit": limit}},
    }
    sidecar = Sidecar()
    sidecar.lanes["local"] = matching
    ctx = context(
        db,
        dsn,
        anvil,
        local,
        lane,
        MG_CCIP_SIDECAR="http",
        MG_CCIP_SIDECAR_URL=sidecar.url,
        MG_CCIP_SIDECAR_TIMEOUT_SECONDS="2",
    )
    try:
        assert await ccip_drift(ctx) == 0
        assert sidecar.requests == ["/lanes/local"]
        moved = "0x" + "cd" * 20
        sidecar.lanes["local"] = {
            **matching,
            "router": moved,
            "tokens": {local.bnm: {"pool": pool, "rate_limit": {"capacity": "5", "rate": "10"}}},
        }
        assert await ccip_drift(ctx) == 2
        assert query(dsn, OPEN) == [
            (
                SUBJECT,
                f"rate_limit:{local.bnm}",
                json.dumps(limit, separators=(",", ":")),
                '{"capacity":"5","rate":"10"}',
            ),
            (SUBJECT, "router", local.router, moved),
        ]
        sidecar.lanes["local"] = {**matching, "tokens": {}}  # the token's pool was removed
        assert await ccip_drift(ctx) == 2  # the router cleared, the pool found
        assert [r[1:] for r in query(dsn, OPEN)] == [
            (f"pool:{local.bnm}", pool, "none"),
            # no pool, no rate limit: the rate-limit finding stays open
            (
                f"rate_limit:{local.bnm}",
                json.dumps(limit, separators=(",", ":")),
                '{"capacity":"5","rate":"10"}',
            ),
        ]
        sidecar.stop()  # the sidecar stops answering
        assert await ccip_drift(ctx) == 1
        assert (SUBJECT, "reachable", "yes", "no: SidecarError") in query(dsn, OPEN)
    finally:
        await ctx.providers.aclose()
    back = Sidecar()
    back.lanes["local"] = matching
    ctx = context(db, dsn, anvil, local, lane, MG_CCIP_SIDECAR="http", MG_CCIP_SIDECAR_URL=back.url)
    try:
        assert await ccip_drift(ctx) == 3  # reachable, the pool and the rate limit: cleared
        assert query(dsn, OPEN) == []
    finally:
        await ctx.providers.aclose()
        back.stop()


def test_an_http_sidecar_without_its_url_and_bad_lanes_stop_start_up() -> None:
    with pytest.raises(ConfigError, match="MG_CCIP_SIDECAR_URL"):
        Settings.from_env({"MG_CCIP_SIDECAR": "http"})
    with pytest.raises(ConfigError, match="MG_CCIP_SIDECAR"):
        Settings.from_env({"MG_CCIP_SIDECAR": "chainlink"})
    with pytest.raises(ConfigError, match=r"MG_CCIP_LANES: lane 0: router"):
        Settings.from_env(
            {"MG_CCIP_LANES": json.dumps([{"name": "x", "chain_id": 1, "router": "nope"}])}
        )
    with pytest.raises(ConfigError, match=r"MG_CCIP_LANES: lane 0: source_selector"):
        Settings.from_env(
            {
                "MG_CCIP_LANES": json.dumps(
                    [
                        {
                            "name": "x",
                            "chain_id": 1,
                            "router": "0x" + "1" * 40,
                            "source_selector": -1,
                            "dest_selector": 1,
                        }
                    ]
                )
            }
        )


async def test_a_dead_chain_is_a_reachable_finding_for_the_rpc_client(anvil, dsn, db):
    local = set_up(anvil, drips=0)
    dead = f"http://127.0.0.1:{free_port()}"
    ctx = context(db, dsn, anvil, local, MG_CCIP_SIDECAR="rpc")
    ctx.providers.evm_rpcs[CHAIN_ID].url = dead  # the chain's node went away
    try:
        assert await ccip_drift(ctx) == 1
        assert query(dsn, OPEN) == [(SUBJECT, "reachable", "yes", "no: RpcUnavailable")]
    finally:
        await ctx.providers.aclose()


async def test_the_http_clients_error_never_carries_the_sidecars_base_url(anvil, dsn, db):
    local = set_up(anvil, drips=0)
    secret = f"http://user:hunter2@127.0.0.1:{free_port()}/t0ken"
    ctx = context(db, dsn, anvil, local, MG_CCIP_SIDECAR="http", MG_CCIP_SIDECAR_URL=secret)
    try:
        assert await ccip_drift(ctx) == 1
    finally:
        await ctx.providers.aclose()
    [(evidence,)] = query(dsn, "SELECT evidence::text FROM drift_findings")
    assert "hunter2" not in evidence and "t0ken" not in evidence
    assert "GET /lanes/local" in evidence


async def test_the_ccip_provider_refuses_to_start_without_what_it_sends_with(db) -> None:
    lane = {"name": "l", "chain_id": 31337, "source_selector": 1, "dest_selector": 1,
            "router": "0x" + "11" * 20}  # fmt: skip
    base = {
        "MG_EVM_RPC_URLS": f"{CHAIN_ID}=http://127.0.0.1:1",
        "MG_EVM_SIGNER_PRIVATE_KEY": KEYS[0],
    }
    cases = [
        ({"MG_PROVIDERS": "ccip", "MG_CCIP_LANES": json.dumps([lane])}, "MG_PROVIDERS"),
        ({**base, "MG_PROVIDERS": "evm,ccip"}, "MG_CCIP_LANES: the ccip provider needs"),
        (
            {**base, "MG_PROVIDERS": "evm,ccip",
             "MG_CCIP_LANES": json.dumps([{**lane, "dest_chain_id": 5}])},
            "MG_CCIP_LANES: lane l: chain 5 is not in MG_EVM_RPC_URLS",
        ),
    ]  # fmt: skip
    for env, message in cases:
        with pytest.raises(ConfigError, match=message):
            build_registry(Settings.from_env(env), db)
