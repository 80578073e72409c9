"""A small EVM JSON-RPC client (issue 11) on httpx, which speaks trio through anyio.

One per configured chain, over one or several URLs (issue 24 item 6:
MG_EVM_RPC_URLS `chain_id=url1|url2`). Every call has a timeout; at most
MG_EVM_RPC_CONCURRENCY calls are in flight per chain.

- Reads are retried on transport faults (no answer, a 5xx or 429, a reply that
  is not JSON) and on transient JSON-RPC errors (`rpc_error_transient`: a node
  behind, rate-limited, an internal error), with a doubling backoff, failing
  over to the next URL at each try; the URL that last answered is asked first.
  A permanent JSON-RPC error (a revert, invalid params) is raised at once.
- Writes (`eth_sendRawTransaction`) are never retried — a resend after a
  timeout is exactly the blind repetition the provider contract forbids — but
  go to every URL at once (the same signed bytes are the same transaction):
  accepted by any is accepted; refused only when every URL answered a refusal;
  otherwise (some did not answer) the outcome is unknown (RpcUnavailable).
- A lookup of a transaction or receipt by hash (`receipt`, `transaction`) is
  "not found" only when every URL answered "not found": one lagging or
  unreachable URL never makes an absence (a URL that did not answer makes the
  lookup raise RpcUnavailable instead).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
import trio

from qtg.domain.evm import rpc_error_transient
from qtg.providers.base import RetryLater

#: methods that change something: never retried, sent to every URL
_WRITES = frozenset({"eth_sendRawTransaction", "eth_sendTransaction"})
#: the first backoff between read retries (then doubled), and its ceiling
READ_BACKOFF_SECONDS = 0.1
READ_BACKOFF_MAX_SECONDS = 2.0


def redacted(url: str) -> str:
    """A URL as it may be logged: scheme, host and port only (a provider's API key is
    often in its path or query)."""
    parsed = httpx.URL(url)
    port = f":{parsed.port}" if parsed.port else ""
    tail = "/…" if parsed.raw_path not in (b"", b"/") else ""
    return f"{parsed.scheme}://{parsed.host}{port}{tail}"


class RpcError(Exception):
    """The node answered with a JSON-RPC error."""

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{method}: JSON-RPC error {code}: {message}")
        self.method = method
        self.code = code
        self.message = message
        self.data = data

    @property
    def transient(self) -> bool:
        return rpc_error_transient(self.code, self.message)


class RpcUnavailable(Exception):
    """The node did not answer (connect error, timeout, 5xx, non-JSON reply)."""


class _NoAnswer(Exception):
    """One URL did not answer usefully (internal: becomes RpcUnavailable)."""


class EvmRpc:
    def __init__(
        self,
        chain_id: int,
        urls: str | Sequence[str],
        *,
        timeout: float,
        concurrency: int,
        read_retries: int = 2,
    ) -> None:
        self.chain_id = chain_id
        self.urls: tuple[str, ...] = (urls,) if isinstance(urls, str) else tuple(urls)
        if not self.urls:
            raise ValueError(f"chain {chain_id}: no RPC URL")
        self._preferred = 0  # the URL that answered last: asked first
        self._timeout = timeout
        self._limit = trio.CapacityLimiter(concurrency)
        self._retries = read_retries
        self._ids = itertools.count(1)
        self._chain_checked: set[int] = set()  # URLs whose eth_chainId matched
        self._client = httpx.AsyncClient(timeout=timeout)

    @property
    def url(self) -> str:
        """The first URL (named in messages; every URL is used)."""
        return self.urls[0]

    @url.setter
    def url(self, value: str) -> None:
        """One URL instead of the configured ones (tests: a node that is gone)."""
        self.urls = (value,)
        self._preferred = 0
        self._chain_checked.clear()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _post(self, url: str, method: str, params: Sequence[Any]) -> Any:
        """One JSON-RPC call to one URL: its result, RpcError, or _NoAnswer."""
        try:
            async with self._limit:
                with trio.fail_after(self._timeout):
                    reply = await self._client.post(
                        url,
                        json={
                            "jsonrpc": "2.0",
                            "id": next(self._ids),
                            "method": method,
                            "params": list(params),
                        },
                    )
            if reply.status_code >= 500 or reply.status_code == 429:
                raise _NoAnswer(f"HTTP {reply.status_code}")
            body = reply.json()
        except (httpx.HTTPError, trio.TooSlowError, ValueError) as exc:
            raise _NoAnswer(repr(exc)) from exc
        if not isinstance(body, dict):
            raise _NoAnswer(f"not a JSON-RPC reply: {str(body)[:80]!r}")
        if "error" in body:
            err = body["error"] or {}
            if not isinstance(err, dict):
                err = {"message": str(err)}
            raise RpcError(method, err.get("code", 0), err.get("message", ""), err.get("data"))
        if "result" not in body:
            raise _NoAnswer("a JSON-RPC reply without result or error")
        return body["result"]

    def _order(self) -> list[int]:
        n = len(self.urls)
        return [(self._preferred + k) % n for k in range(n)]

    async def call(self, method: str, *params: Any) -> Any:
        if method in _WRITES:
            return await self._send_everywhere(method, params)
        last: Exception | None = None
        for attempt in range(1 + self._retries):
            if attempt:
                await trio.sleep(
                    min(READ_BACKOFF_SECONDS * 2 ** (attempt - 1), READ_BACKOFF_MAX_SECONDS)
                )
            for index in self._order():
                try:
                    result = await self._post(self.urls[index], method, params)
                except RpcError as exc:
                    if not exc.transient:
                        raise
                    last = exc
                    continue
                except _NoAnswer as exc:
                    last = exc
                    continue
                self._preferred = index
                return result
        if isinstance(last, RpcError):
            raise last  # transient, but it did not clear within the retries
        raise RpcUnavailable(
            f"chain {self.chain_id}: {method} got no answer from {len(self.urls)} URL(s): {last}"
        ) from last

    async def _send_everywhere(self, method: str, params: Sequence[Any]) -> Any:
        """A write to every URL at once (see the module docstring)."""
        answers: list[Any] = [None] * len(self.urls)

        async def send(index: int) -> None:
            try:
                answers[index] = ("ok", await self._post(self.urls[index], method, params))
            except RpcError as exc:
                answers[index] = ("refused", exc)
            except _NoAnswer as exc:
                answers[index] = ("silent", exc)

        async with trio.open_nursery() as nursery:
            for index in range(len(self.urls)):
                nursery.start_soon(send, index)
        for kind, value in answers:
            if kind == "ok":
                return value
        refusals = [value for kind, value in answers if kind == "refused"]
        for exc in refusals:  # in flight, or the nonce used: the caller watches the chain
            text = exc.message.lower()
            if "already known" in text or "nonce too low" in text:
                raise exc
        if len(refusals) < len(answers):  # some URL did not answer: it may have it
            silent = [str(value) for kind, value in answers if kind == "silent"]
            raise RpcUnavailable(f"chain {self.chain_id}: {method}: no answer from {silent}")
        raise refusals[0]

    async def _lookup(self, method: str, tx_hash: str) -> dict[str, Any] | None:
        """A lookup by hash: the first URL that has it; None only when every URL
        answered that it does not (see the module docstring)."""
        unanswered: list[str] = []
        for index in self._order():
            last: Exception | None = None
            for attempt in range(1 + self._retries):
                if attempt:
                    await trio.sleep(
                        min(READ_BACKOFF_SECONDS * 2 ** (attempt - 1), READ_BACKOFF_MAX_SECONDS)
                    )
                try:
                    found = await self._post(self.urls[index], method, (tx_hash,))
                except RpcError as exc:
                    if not exc.transient:
                        raise
                    last = exc
                    continue
                except _NoAnswer as exc:
                    last = exc
                    continue
                if found is not None:
                    self._preferred = index
                    return found
                last = None
                break
            if last is not None:
                unanswered.append(f"{redacted(self.urls[index])}: {last}")
        if unanswered:
            raise RpcUnavailable(
                f"chain {self.chain_id}: {method} {tx_hash}: not every URL answered, so its "
                f"absence is not proven: {unanswered}"
            )
        return None

    async def wrong_chain(self) -> str | None:
        """Every URL that answers must serve this chain (a read fails over to any of
        them): the first that names another chain id, redacted, or None. A URL that
        does not answer is asked again next time; one that matched is not."""
        for index, url in enumerate(self.urls):
            if index in self._chain_checked:
                continue
            try:
                served = int(await self._post(url, "eth_chainId", ()), 16)
            except (RpcError, _NoAnswer):
                continue
            if served != self.chain_id:
                return f"{redacted(url)} serves chain {served}"
            self._chain_checked.add(index)
        return None

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
        return await self._lookup("eth_getTransactionReceipt", tx_hash)

    async def transaction(self, tx_hash: str) -> dict[str, Any] | None:
        return await self._lookup("eth_getTransactionByHash", tx_hash)

    async def eth_call(self, to: str, data: str) -> str:
        return await self.call("eth_call", {"to": to, "data": data}, "latest")


@contextmanager
def transient_rpc_faults(step: str) -> Iterator[None]:
    """Before any side effect, an RPC that does not answer, or answers a transient
    JSON-RPC error after its retries, is a wait, not a failure (issue 24 item 5):
    RetryLater, so the node stays READY with a next-attempt time. Permanent errors
    (a revert, bad params) stay errors; PreflightErrors pass through."""
    try:
        yield
    except RpcUnavailable as exc:
        raise RetryLater(
            f"{step}: the chain's RPC did not answer: {exc}",
            code="EVM_RPC_UNAVAILABLE",
            retry_after_seconds=2.0,
        ) from None
    except RpcError as exc:
        if not exc.transient:
            raise
        raise RetryLater(
            f"{step}: the chain's RPC answered a transient error: {exc}",
            code="EVM_RPC_ERROR",
            retry_after_seconds=2.0,
        ) from None
