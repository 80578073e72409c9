"""A tiny lagging JSON-RPC proxy in front of anvil (issue 24's read-lag fault).

Like a load-balanced provider whose read node is one block behind: for `lag`
seconds after a hash is broadcast through it, lookups of that hash
(eth_getTransactionReceipt, eth_getTransactionByHash) answer `null`. With
`lose_send_replies`, a broadcast is forwarded and its reply lost (a 502): sent,
but the sender never hears so. Everything else is passed through unchanged.
The full fault proxy is tests/evm/faultproxy.py.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from eth_utils import keccak

LOOKUPS = frozenset({"eth_getTransactionReceipt", "eth_getTransactionByHash"})


class LagProxy:
    def __init__(self, upstream: str, lag: float, *, lose_send_replies: bool = False) -> None:
        self.upstream, self.lag, self.lose_send_replies = upstream, lag, lose_send_replies
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

    def handle(self, body: dict) -> dict | None:
        method, params = body.get("method"), body.get("params") or []
        if method == "eth_sendRawTransaction":
            self.sent["0x" + keccak(bytes.fromhex(params[0][2:])).hex()] = time.monotonic()
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
