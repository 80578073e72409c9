"""A small EVM JSON-RPC client (issue 11) on httpx, which speaks trio through anyio.

One per configured chain. Every call has a timeout; at most
MG_EVM_RPC_CONCURRENCY calls are in flight per chain; reads are retried on
transport errors, writes (`eth_sendRawTransaction`) never — a resend after a
timeout is exactly the blind repetition the provider contract forbids.
"""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import trio

#: methods that change nothing: safe to retry after a transport error
_WRITES = frozenset({"eth_sendRawTransaction", "eth_sendTransaction"})


class RpcError(Exception):
    """The node answered with a JSON-RPC error."""

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{method}: JSON-RPC error {code}: {message}")
        self.method = method
        self.code = code
        self.message = message
        self.data = data


class RpcUnavailable(Exception):
    """The node did not answer (connect error, timeout, non-JSON reply)."""


class EvmRpc:
    def __init__(
        self,
        chain_id: int,
        url: str,
        *,
        timeout: float,
        concurrency: int,
        read_retries: int = 2,
    ) -> None:
        self.chain_id = chain_id
        self.url = url
        self._timeout = timeout
        self._limit = trio.CapacityLimiter(concurrency)
        self._retries = read_retries
        self._ids = itertools.count(1)
        self._client = httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def call(self, method: str, *params: Any) -> Any:
        attempts = 1 if method in _WRITES else 1 + self._retries
        last: Exception | None = None
        for attempt in range(attempts):
            try:
                async with self._limit:
                    with trio.fail_after(self._timeout):
                        reply = await self._client.post(
                            self.url,
                            json={
                                "jsonrpc": "2.0",
                                "id": next(self._ids),
                                "method": method,
                                "params": list(params),
                            },
                        )
                body = reply.json()
            except (httpx.HTTPError, trio.TooSlowError, ValueError) as exc:
                last = exc
                if attempt + 1 < attempts:
                    await trio.sleep(0.05 * (attempt + 1))  # back-off between read retries
                continue
            if "error" in body:
                err = body["error"] or {}
                raise RpcError(method, err.get("code", 0), err.get("message", ""), err.get("data"))
            return body.get("result")
        raise RpcUnavailable(f"chain {self.chain_id}: {method} got no answer: {last!r}") from last

    # ---- typed helpers
    async def chain_id_on_chain(self) -> int:
        return int(await self.call("eth_chainId"), 16)

    async def balance(self, address: str) -> int:
        return int(await self.call("eth_getBalance", address, "latest"), 16)

    async def nonce(self, address: str, block: str = "latest") -> int:
        return int(await self.call("eth_getTransactionCount", address, block), 16)

    async def block_number(self) -> int:
        return int(await self.call("eth_blockNumber"), 16)

    async def receipt(self, tx_hash: str) -> dict[str, Any] | None:
        return await self.call("eth_getTransactionReceipt", tx_hash)

    async def transaction(self, tx_hash: str) -> dict[str, Any] | None:
        return await self.call("eth_getTransactionByHash", tx_hash)

    async def eth_call(self, to: str, data: str) -> str:
        return await self.call("eth_call", {"to": to, "data": data}, "latest")
