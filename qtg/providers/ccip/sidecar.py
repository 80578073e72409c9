"""CCIP sidecar clients (issue 12): where ccip_drift reads a lane's registry.

An interface, `SidecarClient.lane_registry(lane) -> LaneRegistry`, with two
implementations:

- `RpcSidecarClient` reads the chain directly over JSON-RPC: the router's
  `getOnRamp(dest)` and `isOffRamp(source, offRamp)`, the supported tokens
  (`getSupportedTokens(dest)` of the router and, on Chainlink Local, of the
  simulator, whose `configuration()` also names the live router) and, with a
  TokenAdminRegistry configured, each token's `getPool(token)`;
- `HttpSidecarClient` asks a sidecar over HTTP — `GET <url>/lanes/<name>` answers
  the JSON of the "CCIP sidecar contract" (docs/providers/ccip.md) — so a deployment running
  Chainlink's own tooling beside qtg can plug it in.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote

import httpx
import trio

from qtg.domain import bounded_json
from qtg.domain.ccip import (
    GET_SUPPORTED_TOKENS,
    ROUTER_GET_ON_RAMP,
    ROUTER_IS_OFF_RAMP,
    SIMULATOR_CONFIGURATION,
    TOKEN_ADMIN_GET_POOL,
    Lane,
    LaneRegistry,
    address_array,
    registry_from_json,
    uint64_call,
    word_address,
    words,
)
from qtg.providers.evm.rpc import EvmRpc, RpcError

ZERO = "0x" + "0" * 40


class SidecarError(Exception):
    """The sidecar did not answer, or answered something that is not the contract."""


@runtime_checkable
class SidecarClient(Protocol):
    name: str

    async def lane_registry(self, lane: Lane) -> LaneRegistry: ...


class RpcSidecarClient:
    name = "rpc"

    def __init__(self, rpcs: dict[int, EvmRpc]) -> None:
        self._rpcs = rpcs

    async def lane_registry(self, lane: Lane) -> LaneRegistry:
        rpc = self._rpcs.get(lane.chain_id)
        if rpc is None:
            raise SidecarError(f"no EVM client for chain {lane.chain_id}")
        router: str | None = lane.router
        if lane.registry is not None:
            router = word_address(
                words(await rpc.eth_call(lane.registry, "0x" + SIMULATOR_CONFIGURATION))[1]
            )
        code = await rpc.call("eth_getCode", router, "latest")
        if code in (None, "0x", "0x0"):
            router = None
        on_ramp = off_ramps = None
        tokens: dict[str, dict[str, Any]] = {}
        if router is not None:
            on_ramp = await _maybe(
                rpc, router, uint64_call(ROUTER_GET_ON_RAMP, lane.dest_selector), word_address
            )
            if lane.off_ramp is not None:
                data = (
                    "0x"
                    + ROUTER_IS_OFF_RAMP
                    + f"{lane.source_selector:064x}"
                    + lane.off_ramp[2:].rjust(64, "0")
                )
                is_off = await _maybe(rpc, router, data, lambda w: int(w, 16) == 1)
                off_ramps = (lane.off_ramp,) if is_off else ()
            supported = set(
                await _maybe(
                    rpc,
                    router,
                    uint64_call(GET_SUPPORTED_TOKENS, lane.dest_selector),
                    None,
                    array=True,
                )
                or []
            )
            if lane.registry is not None:
                supported |= set(
                    await _maybe(
                        rpc,
                        lane.registry,
                        uint64_call(GET_SUPPORTED_TOKENS, lane.dest_selector),
                        None,
                        array=True,
                    )
                    or []
                )
            for token in supported:
                pool = "supported"
                if lane.token_admin_registry is not None:
                    data = "0x" + TOKEN_ADMIN_GET_POOL + token[2:].rjust(64, "0")
                    pool = await _maybe(rpc, lane.token_admin_registry, data, word_address) or ZERO
                    if pool == ZERO:
                        continue  # no pool: the token does not cross this lane
                tokens[token] = {"pool": pool, "rate_limit": None}
        return LaneRegistry(
            router=router,
            on_ramp=on_ramp if on_ramp not in (None, ZERO) else None,
            off_ramps=tuple(off_ramps or ()),
            tokens=tokens,
        )


async def _maybe(rpc: EvmRpc, to: str, data: str, decode: Any, *, array: bool = False) -> Any:
    """An eth_call whose revert means "not there" (None), decoded."""
    try:
        result = await rpc.eth_call(to, data)
    except RpcError:
        return None
    if array:
        return address_array(result)
    w = words(result)
    return decode(w[0]) if w else None


class HttpSidecarClient:
    name = "http"

    def __init__(self, url: str, *, timeout: float) -> None:
        self._url = url.rstrip("/")
        self._timeout = timeout
        self._client = httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def lane_registry(self, lane: Lane) -> LaneRegistry:
        path = f"/lanes/{quote(lane.name, safe='')}"
        url = self._url + path
        try:
            with trio.fail_after(self._timeout):
                reply = await self._client.get(url)
            reply.raise_for_status()
            body = bounded_json.loads(reply.content)
            if not isinstance(body, dict):
                raise ValueError("the reply is not a JSON object")
            return registry_from_json(body)
        except (httpx.HTTPError, trio.TooSlowError, ValueError, TypeError, AttributeError) as exc:
            # the path only: a base URL may carry a credential, and this text is evidence
            detail = str(exc).replace(self._url, "<MG_CCIP_SIDECAR_URL>")
            raise SidecarError(f"GET {path}: {type(exc).__name__}: {detail}") from exc
