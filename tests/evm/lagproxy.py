"""A tiny lagging JSON-RPC proxy in front of anvil (issue 24's read-lag fault).

Like a load-balanced provider whose read node is one block behind: for `lag`
seconds after a hash is broadcast through it, lookups of that hash
(eth_getTransactionReceipt, eth_getTransactionByHash) answer `null`. With
`lose_send_replies`, a broadcast is forwarded and its reply lost (a 502): sent,
but the sender never hears so. Everything else is passed through unchanged.

`FaultProxy` (issue 24 item 9) is the full fault injector of the harness
(tests/evm/test_fault_harness.py): seeded random faults on reads and sends,
an outage window, refusals on demand; `LagProxy` is its read-lag part.

Both understand JSON-RPC batch requests (an array body, issue 29 item 3) and fault
them per element where they fault per call: a lagging lookup answers null and an
injected JSON-RPC error is that element's alone; a fault of the transport (a 5xx,
a hang, an outage) drawn for any element is the whole request's, as a real
server's would be. `FaultProxy` counts HTTP requests (`posts`) and batch sizes,
notes any write that arrives inside a batch (`batched_send`), and can refuse
batches (`refuse_batches`: a single JSON-RPC error object, an HTTP 400, or an error
for each element) or break
the next batch replies (`mangle_batches`: an id missing, or not an array).
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from eth_utils import keccak

LOOKUPS = frozenset({"eth_getTransactionReceipt", "eth_getTransactionByHash"})


class LagProxy:
    def __init__(
        self,
        upstream: str,
        lag: float,
        *,
        lose_send_replies: bool = False,
        null_methods: frozenset[str] = frozenset(),
    ) -> None:
        self.upstream, self.lag, self.lose_send_replies = upstream, lag, lose_send_replies
        #: methods answered `null` always (issue 43: a provider with no receipt index);
        #: "*": every method (an RPC that answers null to everything)
        self.null_methods = null_methods
        self.lost = 0  # broadcasts forwarded whose reply was lost
        self.sent: dict[str, float] = {}  # tx hash -> when it went through
        self.nulls = 0  # lookups answered null because of the lag
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                reply = proxy.handle(body)
                if reply is None:  # the lost reply
                    self.send_response(502)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def handle(self, body: dict | list) -> dict | list | None:
        if isinstance(body, list):  # a JSON-RPC batch: each element as if alone
            replies = [self.handle(element) for element in body]
            return None if any(reply is None for reply in replies) else replies
        method, params = body.get("method"), body.get("params") or []
        if method == "eth_sendRawTransaction":
            self.sent["0x" + keccak(bytes.fromhex(params[0][2:])).hex()] = time.monotonic()
        if method in self.null_methods or "*" in self.null_methods:
            self.nulls += 1
            return {"jsonrpc": "2.0", "id": body.get("id"), "result": None}
        if method in LOOKUPS and params:
            at = self.sent.get(str(params[0]).lower())
            if at is not None and time.monotonic() - at < self.lag:
                self.nulls += 1
                return {"jsonrpc": "2.0", "id": body.get("id"), "result": None}
        request = urllib.request.Request(
            self.upstream,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            answer = json.loads(reply.read())
        if method == "eth_sendRawTransaction" and self.lose_send_replies:
            self.lost += 1
            return None
        return answer

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


SENDS = frozenset({"eth_sendRawTransaction"})
#: an error of the node itself (not a judgement of the call): JSON-RPC -32603
_INTERNAL_ERROR: dict = {
    "jsonrpc": "2.0",
    "error": {"code": -32603, "message": "internal error (injected)"},
}
#: a batch element to be forwarded upstream with the others (FaultProxy._handle_batch)
_FORWARD: dict = {}


def tx_hash_of(raw: str) -> str:
    return "0x" + keccak(bytes.fromhex(raw[2:])).hex()


@dataclass
class Faults:
    """Probabilities (0..1) of each fault per JSON-RPC call, drawn from a seeded RNG.

    Reads (every method but eth_sendRawTransaction): `read_5xx` (a 503, not
    forwarded), `read_rpc_error` (JSON-RPC -32603, not forwarded), `read_hang`
    (no answer for `hang_seconds`, then a 503: longer than the client's timeout).
    Sends: `drop_send` (answered with the hash as if accepted, never forwarded:
    the bytes are lost), `lose_send_reply` (forwarded, the reply lost: a 502),
    `send_5xx` (a 503, not forwarded), `send_hang` (forwarded, then no answer
    for `hang_seconds`). `lag`: lookups of a hash answer null for that long
    after it went through this proxy."""

    read_5xx: float = 0.0
    read_rpc_error: float = 0.0
    read_hang: float = 0.0
    drop_send: float = 0.0
    lose_send_reply: float = 0.0
    send_5xx: float = 0.0
    send_hang: float = 0.0
    lag: float = 0.0
    hang_seconds: float = 3.0


class FaultProxy:
    """A JSON-RPC proxy in front of anvil that injects `Faults` (seeded), an outage
    window (`outage(seconds)`: every call a 503) and refusals of chosen sends
    (`refuse_sends(n, message)`: the next n sends answered with that JSON-RPC error,
    not forwarded). `sent` keeps every raw transaction that reached it, so a test
    can play a mempool peer that gossips dropped bytes again later."""

    def __init__(self, upstream: str, faults: Faults | None = None, *, seed: int = 0) -> None:
        self.upstream = upstream
        self.faults = faults or Faults()
        self.rng = random.Random(seed)
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.sent: dict[str, str] = {}  # tx hash -> raw, every send that reached us
        self.forwarded_at: dict[str, float] = {}  # tx hash -> when it went upstream
        self._outage_until = 0.0
        self._outage_armed: float | None = None  # an outage that starts at the next call
        self._refuse: list[str] = []
        self._error_sends: list[bool] = []  # forward first?
        self._error_reads: dict[str, int] = {}  # method -> calls left to answer -32603
        self.posts = 0  # HTTP requests received
        self.batch_sizes: list[int] = []  # elements of each batch request
        #: each HTTP request's calls, in order: (method, params)
        self.requests: list[list[tuple[str, list]]] = []
        #: "error": a batch is answered one JSON-RPC error object; "http": a 400;
        #: "elements": each element an "invalid request" error
        self.refuse_batches: str | None = None
        #: how to break the next batch replies, one each: "drop_id" (an element
        #: missing), "object" (one object, not an array)
        self.mangle_batches: list[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                except (OSError, ValueError):
                    return  # the client went away mid-request
                status, reply = proxy.handle(body)
                data = b"" if reply is None else json.dumps(reply).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (its timeout): nothing to tell it

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    # ---- control
    def outage(self, seconds: float) -> None:
        with self._lock:
            self._outage_until = time.monotonic() + seconds

    def outage_from_next_call(self, seconds: float) -> None:
        """An outage of `seconds` that starts with the next call this proxy gets: it
        meets traffic whenever it comes (issue 44 item 8: a timed window could
        fall in a quiet stretch, and the harness's "an outage was met" failed)."""
        with self._lock:
            self._outage_armed = seconds

    def end_outage(self) -> None:
        with self._lock:
            self._outage_until = 0.0
            self._outage_armed = None

    def _in_outage(self) -> bool:
        """Whether this call is refused by an outage (under the lock); an armed
        outage starts now."""
        if self._outage_armed is not None:
            self._outage_until = time.monotonic() + self._outage_armed
            self._outage_armed = None
        return time.monotonic() < self._outage_until

    def refuse_sends(self, n: int, message: str) -> None:
        with self._lock:
            self._refuse.extend([message] * n)

    def error_sends(self, n: int, *, forward: bool) -> None:
        """The next n sends answered JSON-RPC -32603 "internal error" — an error of
        the node, not a refusal — after forwarding them upstream (`forward`: a
        provider's front end that failed after its backend took the bytes) or
        without (the bytes went nowhere)."""
        with self._lock:
            self._error_sends.extend([forward] * n)

    def error_reads(self, method: str, n: int) -> None:
        """The next n calls of read `method` answered JSON-RPC -32603 "internal error"
        (not forwarded): a node's error of its own, not an answer about the call."""
        with self._lock:
            self._error_reads[method] = self._error_reads.get(method, 0) + n

    def count(self, what: str) -> int:
        with self._lock:
            return self.counts.get(what, 0)

    # ---- the proxy
    def _note(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def _draw(self, p: float) -> bool:
        return p > 0 and self.rng.random() < p

    def _forward(self, body: dict | list) -> Any:
        request = urllib.request.Request(
            self.upstream,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            return json.loads(reply.read())

    def handle(self, body: dict | list) -> tuple[int, dict | list | None]:
        with self._lock:
            self.posts += 1
            bodies = body if isinstance(body, list) else [body]
            calls = [b for b in bodies if isinstance(b, dict)]
            self.requests.append([(str(b.get("method")), b.get("params") or []) for b in calls])
        if isinstance(body, list):
            return self._handle_batch(body)
        return self._handle_one(body)

    def _handle_batch(self, bodies: list) -> tuple[int, dict | list | None]:
        """A batch: each element faulted as a call alone; the elements left to forward go
        upstream as one batch; a transport fault of any element is the whole reply's."""
        with self._lock:
            self.batch_sizes.append(len(bodies))
            if self._in_outage():
                self._note("outage")
                return 503, None
            refusal = self.refuse_batches
            if refusal is not None:
                self._note("batch_refused")
            mangle = self.mangle_batches.pop(0) if self.mangle_batches else None
            if any(b.get("method") in SENDS for b in bodies):
                self._note("batched_send")
        if refusal == "elements":  # each element "an invalid request"
            error = {"code": -32600, "message": "invalid request (injected)"}
            return 200, [{"jsonrpc": "2.0", "id": b.get("id"), "error": error} for b in bodies]
        if refusal is not None:
            error = {"code": -32600, "message": "batch requests are not supported (injected)"}
            return (400 if refusal == "http" else 200), {
                "jsonrpc": "2.0",
                "id": None,
                "error": error,
            }
        replies: list[dict | None] = []
        for body in bodies:
            status, reply = self._handle_one(body, defer_forward=True)
            if status != 200:
                return status, None
            replies.append(reply)
        forward = [body for body, reply in zip(bodies, replies, strict=True) if reply is _FORWARD]
        if forward:
            try:
                answers = self._forward(forward)
            except (urllib.error.URLError, OSError, ValueError):
                return 503, None
            by_id = {a.get("id"): a for a in answers}
            replies = [
                by_id.get(body.get("id")) if reply is _FORWARD else reply
                for body, reply in zip(bodies, replies, strict=True)
            ]
        if mangle == "drop_id":
            return 200, replies[:-1]
        if mangle == "object":
            return 200, {"jsonrpc": "2.0", "id": None, "result": replies}
        return 200, replies

    def _handle_one(self, body: dict, *, defer_forward: bool = False) -> tuple[int, dict | None]:
        """One call: its fault drawn; `defer_forward` (a batch element): a read to be
        forwarded is returned as `_FORWARD` for the batch to send upstream together."""
        method, params = body.get("method"), body.get("params") or []
        f = self.faults
        with self._lock:
            if self._in_outage():
                self._note("outage")
                return 503, None
            if method in SENDS:
                raw = str(params[0])
                tx_hash = tx_hash_of(raw)
                self.sent[tx_hash] = raw
                fault: str | None = None
                if self._error_sends:
                    fault = "send_error_forwarded" if self._error_sends.pop(0) else "send_error"
                elif self._refuse:
                    message = self._refuse.pop(0)
                    self._note("refused")
                    return 200, {
                        "jsonrpc": "2.0",
                        "id": body.get("id"),
                        "error": {"code": -32000, "message": message},
                    }
                fault = fault or next(
                    (
                        name
                        for name, p in (
                            ("drop_send", f.drop_send),
                            ("lose_send_reply", f.lose_send_reply),
                            ("send_5xx", f.send_5xx),
                            ("send_hang", f.send_hang),
                        )
                        if self._draw(p)
                    ),
                    None,
                )
            elif self._error_reads.get(method):
                self._error_reads[method] -= 1
                tx_hash, fault = None, "read_rpc_error"
            else:
                tx_hash = None
                fault = next(
                    (
                        name
                        for name, p in (
                            ("read_5xx", f.read_5xx),
                            ("read_rpc_error", f.read_rpc_error),
                            ("read_hang", f.read_hang),
                        )
                        if self._draw(p)
                    ),
                    None,
                )
                if method in LOOKUPS and params and f.lag > 0:
                    at = self.forwarded_at.get(str(params[0]).lower())
                    if at is not None and time.monotonic() - at < f.lag:
                        self._note("lag_null")
                        return 200, {"jsonrpc": "2.0", "id": body.get("id"), "result": None}
            if fault is not None:
                self._note(fault)
        if fault in ("read_5xx", "send_5xx"):
            return 503, None
        if fault == "send_error":
            return 200, _INTERNAL_ERROR | {"id": body.get("id")}
        if fault == "read_rpc_error":
            return 200, {
                "jsonrpc": "2.0",
                "id": body.get("id"),
                "error": {"code": -32603, "message": "internal error (injected)"},
            }
        if fault == "read_hang":
            time.sleep(f.hang_seconds)
            return 503, None
        if fault == "drop_send":
            return 200, {"jsonrpc": "2.0", "id": body.get("id"), "result": tx_hash}
        if defer_forward and fault is None and tx_hash is None:
            return 200, _FORWARD
        try:
            answer = self._forward(body)
        except (urllib.error.URLError, OSError, ValueError):
            return 503, None
        if tx_hash is not None:
            with self._lock:
                self.forwarded_at.setdefault(tx_hash, time.monotonic())
        if fault == "lose_send_reply":
            return 502, None
        if fault == "send_error_forwarded":
            return 200, _INTERNAL_ERROR | {"id": body.get("id")}
        if fault == "send_hang":
            time.sleep(f.hang_seconds)
            return 503, None
        return 200, answer

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
