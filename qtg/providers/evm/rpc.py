"""A small EVM JSON-RPC client (issue 11) on httpx, which speaks trio through anyio.

One per configured chain, over one or several URLs (issue 24 item 6:
MG_EVM_RPC_URLS `chain_id=url1|url2`). Every HTTP request has a timeout; at
most MG_EVM_RPC_CONCURRENCY requests (a batch is one) are in flight per chain.

- Reads are retried on transport faults (no answer, a 5xx or 429, a reply that
  is not JSON, a `null` or malformed result where a value is due: `answer_problem`)
  and on transient JSON-RPC errors (`rpc_error_transient`: a node
  behind, rate-limited, an internal error), with a doubling backoff, failing
  over to the next URL at each try; the URL that last answered is asked first.
  A permanent JSON-RPC error (a revert, invalid params) is raised at once.
- Writes (`eth_sendRawTransaction`) are never retried — a resend after a
  timeout is exactly the blind repetition the provider contract forbids — but
  go to every URL at once (the same signed bytes are the same transaction):
  accepted by any is accepted; refused only when every URL answered a refusal
  (`send_refused`: the node judged the bytes and did not take them — a fee, a
  nonce, funds, the encoding); otherwise (some did not answer, or answered an
  error of its own: an internal error, a timeout, a rate limit, after which the
  bytes may be on their way) the outcome is unknown (RpcUnavailable).
- A lookup of a transaction or receipt by hash (`receipt`, `transaction`) is
  "not found" only when every URL answered "not found": one lagging or
  unreachable URL never makes an absence (a URL that did not answer makes the
  lookup raise RpcUnavailable instead).

Reads are coalesced per URL into JSON-RPC batch requests (issue 29 item 3):
many observer tasks ask one chain for receipts at once, and a batch of up to
MG_EVM_RPC_BATCH_MAX of them is one HTTP round trip instead of one each. What is
gathered: every read handed to one URL before its flusher runs (the flusher is a
task started by the first read, so the window is one trio scheduling round —
no timer, no added latency), and, under load, every read that arrives while
MG_EVM_RPC_CONCURRENCY requests are already in flight (a free slot takes what
has accumulated). Each element keeps a single call's meaning: its own result or
JSON-RPC error, and the retries, failover and "not found only when every URL
said so" above, which sit on top of this unchanged. A batch reply that is not
an array of every id asked, or an HTTP fault, is no answer for every element of
that batch (each is then retried as a single call would be). A URL that refuses
batches (a single error object, an HTTP 4xx, or "invalid request" for every
element) gets the elements again one by one, at once, and only single calls from
then on. Writes are never batched.
`eth_blockNumber` is moreover single-flight: callers that ask while one request
is in flight share its answer (a head one request old only delays a
confirmation).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import trio

from qtg.domain import bounded_json
from qtg.domain.chain_outcome import refusal_may_be_in_flight
from qtg.domain.evm import answer_problem, rpc_error_transient, send_refused
from qtg.providers.base import RetryLater
from qtg.providers.coalesce import slot_then_round

log = logging.getLogger("qtg.providers.evm.rpc")

#: methods that change something: never retried, sent to every URL
_WRITES = frozenset({"eth_sendRawTransaction", "eth_sendTransaction"})
#: reads whose concurrent callers share one request in flight (no parameters, and an
#: answer a request old is as good: see the module docstring)
_SHARED = frozenset({"eth_blockNumber"})
#: JSON-RPC "Invalid Request": what some servers answer each element of a batch they refuse
_INVALID_REQUEST = -32600
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

    @property
    def refusal(self) -> bool:
        """As an answer to a broadcast: the node did not take the bytes."""
        return send_refused(self.code, self.message)


class RpcUnavailable(Exception):
    """The node did not answer (connect error, timeout, 5xx, non-JSON reply)."""


class _NoAnswer(Exception):
    """One URL did not answer usefully (internal: becomes RpcUnavailable)."""


class _BatchRefused(Exception):
    """The URL refused a batch request as such (internal: its elements go singly)."""


_E = TypeVar("_E", bound=BaseException)


@dataclass(eq=False)
class _Read:
    """One read waiting in a URL's batch: what to ask, and, once `done`, the answer
    (`result`) or what was raised for it (`error`: RpcError or _NoAnswer)."""

    method: str
    params: list[Any]
    done: trio.Event = field(default_factory=trio.Event)
    result: Any = None
    error: Exception | None = None

    def settle(self, result: Any = None, error: Exception | None = None) -> None:
        if not self.done.is_set():
            self.result, self.error = result, error
            self.done.set()


@dataclass(eq=False)
class _Shared:
    """The one request in flight of a `_SHARED` method, and its outcome once `done`."""

    done: trio.Event = field(default_factory=trio.Event)
    result: Any = None
    error: BaseException | None = None


def _element(method: str, body: Any) -> Any:
    """One JSON-RPC reply object (alone or an element of a batch reply): its result,
    RpcError, or _NoAnswer — the same reading for a single call and a batch element."""
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


def _copy(exc: _E) -> _E:
    """A fresh exception like `exc` (same cause), for each task that shares an answer:
    a batch's fault, a single-flight result (one instance raised in several tasks
    would pile their tracebacks together)."""
    copy: BaseException = exc
    if isinstance(exc, RpcError):
        copy = RpcError(exc.method, exc.code, exc.message, exc.data)
    elif isinstance(exc, (RpcUnavailable, _NoAnswer)):
        copy = type(exc)(*exc.args)
    copy.__cause__ = exc.__cause__
    return copy  # type: ignore[return-value]


class EvmRpc:
    def __init__(
        self,
        chain_id: int,
        urls: str | Sequence[str],
        *,
        timeout: float,
        concurrency: int,
        read_retries: int = 2,
        batch_max: int = 20,
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
        self.batch_max = batch_max  # 1: every read a request of its own
        self._pending: dict[str, list[_Read]] = {}  # URL -> reads not yet sent
        self._flushing: set[str] = set()  # URLs whose flusher is running
        self.unbatched: set[str] = set()  # URLs that refused a batch: singles only
        self._shared: dict[str, _Shared] = {}  # method -> its request in flight

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
        async with self._limit:
            return await self._post_held(url, method, params)

    # ---- batching of reads (see the module docstring)
    async def _read(self, url: str, method: str, params: Sequence[Any]) -> Any:
        """One read to one URL, as `_post` answers it, but sent in a batch with the
        reads other tasks hand to the same URL meanwhile."""
        if self.batch_max <= 1 or url in self.unbatched:
            return await self._post(url, method, params)
        read = _Read(method, list(params))
        self._pending.setdefault(url, []).append(read)
        if url not in self._flushing:
            self._flushing.add(url)
            # A system task, not the first caller: a caller cancelled (its own
            # deadline) must not take the other callers' batch down with it.
            trio.lowlevel.spawn_system_task(self._flush, url, name=f"evm-rpc-batch {redacted(url)}")
        try:
            await read.done.wait()
        finally:
            if not read.done.is_set():  # cancelled before it was sent: not sent at all
                pending = self._pending.get(url, [])
                if read in pending:
                    pending.remove(read)
        if read.error is not None:
            raise read.error
        return read.result

    async def _flush(self, url: str) -> None:
        """Send what waits for `url`, a batch per free concurrency slot, until nothing
        waits. Never raises: every read it took is settled, whatever happens."""
        taken: list[_Read] = []
        emptied = False
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    slot = await slot_then_round(self._limit)
                    pending = self._pending.get(url, [])
                    if not pending:  # no await from here on: a read that comes while
                        self._limit.release_on_behalf_of(slot)  # the last batches are
                        self._flushing.discard(url)  # in flight starts a new flusher
                        self._pending.pop(url, None)
                        emptied = True
                        break
                    batch = pending[: self.batch_max]
                    del pending[: self.batch_max]
                    taken.extend(batch)
                    nursery.start_soon(self._send_batch, url, batch, slot)
        finally:
            if not emptied:  # cancelled (the run ends) with reads still waiting
                self._flushing.discard(url)
                for read in self._pending.pop(url, []):
                    read.settle(error=_NoAnswer("the batch was cancelled"))
            for read in taken:  # a send cancelled midway: settled, never left hanging
                read.settle(error=_NoAnswer("the batch was cancelled"))

    async def _send_batch(self, url: str, batch: list[_Read], slot: object) -> None:
        """POST one batch (holding `slot`) and settle each of its reads. Never raises
        (it runs under a system task): anything unforeseen is no answer."""
        refused: _BatchRefused | None = None
        try:
            if len(batch) == 1:  # alone: a plain call, which every server takes
                [read] = batch
                read.settle(result=await self._post_held(url, read.method, read.params))
            else:
                answers = await self._post_batch(url, batch)
                for read, (result, error) in zip(batch, answers, strict=True):
                    read.settle(result, error)
        except _BatchRefused as exc:
            refused = exc
        except (RpcError, _NoAnswer) as exc:
            for read in batch:  # each its own instance: raised in as many tasks
                read.settle(error=_copy(exc))
        except Exception as exc:
            for read in batch:
                read.settle(error=_NoAnswer(repr(exc)))
        finally:
            self._limit.release_on_behalf_of(slot)
        if refused is None:
            return
        if url not in self.unbatched:
            self.unbatched.add(url)
            log.warning(
                "%s refused a JSON-RPC batch (%s): single calls to it from now on",
                redacted(url),
                refused,
            )
        async with trio.open_nursery() as nursery:  # refused: each element on its own
            for read in batch:
                nursery.start_soon(self._single, url, read)

    async def _single(self, url: str, read: _Read) -> None:
        try:
            read.settle(result=await self._post(url, read.method, read.params))
        except (RpcError, _NoAnswer) as exc:
            read.settle(error=exc)
        except Exception as exc:  # never out of a system task
            read.settle(error=_NoAnswer(repr(exc)))

    async def _post_held(self, url: str, method: str, params: Sequence[Any]) -> Any:
        """`_post` for a caller that already holds a concurrency slot."""
        try:
            with trio.fail_after(self._timeout):
                reply = await self._client.post(url, json=self._body(method, params))
            if reply.status_code >= 500 or reply.status_code == 429:
                raise _NoAnswer(f"HTTP {reply.status_code}")
            body = bounded_json.loads(reply.content)
        except (httpx.HTTPError, trio.TooSlowError, ValueError) as exc:
            raise _NoAnswer(repr(exc)) from exc
        return _element(method, body)

    async def _post_batch(self, url: str, batch: list[_Read]) -> list[tuple[Any, Exception | None]]:
        """One batch request: each read's (result, error). _NoAnswer for all of them
        when the reply is not an array answering every id; _BatchRefused when the URL
        refuses batches as such."""
        bodies = [self._body(read.method, read.params) for read in batch]
        try:
            with trio.fail_after(self._timeout):
                reply = await self._client.post(url, json=bodies)
            if reply.status_code >= 500 or reply.status_code == 429:
                raise _NoAnswer(f"HTTP {reply.status_code} to a batch")
            if reply.status_code >= 400:
                raise _BatchRefused(f"HTTP {reply.status_code}")
            answer = bounded_json.loads(reply.content)
        except (httpx.HTTPError, trio.TooSlowError, ValueError) as exc:
            raise _NoAnswer(repr(exc)) from exc
        if isinstance(answer, dict) and "error" in answer:
            raise _BatchRefused(str(answer["error"])[:120])
        if not isinstance(answer, list):
            raise _NoAnswer(f"not a JSON-RPC batch reply: {str(answer)[:80]!r}")
        by_id = {item.get("id"): item for item in answer if isinstance(item, dict)}
        missing = [body["id"] for body in bodies if body["id"] not in by_id]
        if missing:
            raise _NoAnswer(f"a batch reply without ids {missing[:5]}")
        out: list[tuple[Any, Exception | None]] = []
        for read, body in zip(batch, bodies, strict=True):
            try:
                out.append((_element(read.method, by_id[body["id"]]), None))
            except (RpcError, _NoAnswer) as exc:
                out.append((None, exc))
        if all(isinstance(e, RpcError) and e.code == _INVALID_REQUEST for _, e in out):
            # every call "an invalid request": the batch form was refused, not the calls
            raise _BatchRefused(str(out[0][1]))
        return out

    def _body(self, method: str, params: Sequence[Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": list(params)}

    def _order(self) -> list[int]:
        n = len(self.urls)
        return [(self._preferred + k) % n for k in range(n)]

    async def call(self, method: str, *params: Any) -> Any:
        if method in _WRITES:
            return await self._send_everywhere(method, params)
        if method in _SHARED and not params:
            return await self._single_flight(method)
        return await self._call_read(method, params)

    async def _single_flight(self, method: str) -> Any:
        """`method` once for every caller that asks while it is in flight. The request
        runs in a system task, so a caller cancelled meanwhile leaves it to the rest."""
        shared = self._shared.get(method)
        if shared is None:
            shared = self._shared[method] = _Shared()

            async def ask() -> None:
                try:
                    shared.result = await self._call_read(method, ())
                except BaseException as exc:  # Cancelled too: the run ends, tell the rest
                    shared.error = exc
                    if not isinstance(exc, Exception):
                        raise
                finally:
                    if self._shared.get(method) is shared:
                        del self._shared[method]
                    shared.done.set()

            trio.lowlevel.spawn_system_task(ask, name=f"evm-rpc {method}")
        await shared.done.wait()
        if shared.error is not None:
            if not isinstance(shared.error, Exception):
                raise RpcUnavailable(f"chain {self.chain_id}: {method} was cancelled")
            raise _copy(shared.error)
        return shared.result

    async def read_many(self, calls: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
        """Several reads at once, their results in order: concurrent, so they go out
        in as few batch requests as MG_EVM_RPC_BATCH_MAX allows (one for a short
        list). Each is a `call`; the first failure (in order) is raised as it is."""
        results: list[Any] = [None] * len(calls)
        errors: list[Exception | None] = [None] * len(calls)

        async def one(index: int, method: str, params: Sequence[Any]) -> None:
            try:
                results[index] = await self.call(method, *params)
            except Exception as exc:
                errors[index] = exc

        async with trio.open_nursery() as nursery:
            for index, (method, params) in enumerate(calls):
                nursery.start_soon(one, index, method, params)
        for error in errors:
            if error is not None:
                raise error
        return results

    async def _call_read(self, method: str, params: Sequence[Any]) -> Any:
        last: Exception | None = None
        for attempt in range(1 + self._retries):
            if attempt:
                await trio.sleep(
                    min(READ_BACKOFF_SECONDS * 2 ** (attempt - 1), READ_BACKOFF_MAX_SECONDS)
                )
            for index in self._order():
                try:
                    result = await self._read(self.urls[index], method, params)
                except RpcError as exc:
                    if not exc.transient:
                        raise
                    last = exc
                    continue
                except _NoAnswer as exc:
                    last = exc
                    continue
                problem = answer_problem(method, result)
                if problem is not None:  # a null or malformed answer is no answer: next URL
                    last = _NoAnswer(f"{redacted(self.urls[index])}: {problem}")
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
                # An error of the node (internal, timeout, rate limit) is not a
                # refusal: the bytes may have gone on to the network (send_refused).
                answers[index] = ("refused" if exc.refusal else "silent", exc)
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
            if refusal_may_be_in_flight(exc.message):
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
                    # JSON-RPC: the transaction or receipt object, or null
                    found: dict[str, Any] | None = await self._read(
                        self.urls[index], method, (tx_hash,)
                    )
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
                answer = await self._post(url, "eth_chainId", ())
            except (RpcError, _NoAnswer):
                continue
            if answer_problem("eth_chainId", answer) is not None:
                continue  # a null or malformed answer: asked again next time
            served = int(answer, 16)
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

    async def nonces(self, address: str, *blocks: str) -> list[int]:
        """`address`'s transaction count at each of `blocks`, read at once: one batch
        request (where a single read each would be a round trip each)."""
        counts = await self.read_many(
            [("eth_getTransactionCount", (address, block)) for block in blocks]
        )
        return [int(count, 16) for count in counts]

    async def block_number(self) -> int:
        return int(await self.call("eth_blockNumber"), 16)

    async def receipt(self, tx_hash: str) -> dict[str, Any] | None:
        return await self._lookup("eth_getTransactionReceipt", tx_hash)

    async def transaction(self, tx_hash: str) -> dict[str, Any] | None:
        return await self._lookup("eth_getTransactionByHash", tx_hash)

    async def eth_call(self, to: str, data: str) -> str:
        # JSON-RPC: eth_call answers the return data as a hex string
        answer: str = await self.call("eth_call", {"to": to, "data": data}, "latest")
        return answer


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
