"""What JSON-RPC batching of reads buys (issue 29 item 3): N concurrent receipt lookups
through `EvmRpc`, batched (MG_EVM_RPC_BATCH_MAX) and not (1), against a real anvil.

First straight to anvil (HTTP requests counted by the client's request hook), then
through a counting proxy on loopback (every HTTP request it receives is counted, then
forwarded to anvil as it came; a Python proxy, so it adds its own cost per request) that
also holds each request for a simulated round trip (`--rtt-ms`): a hosted provider is tens
of milliseconds away, where a request saved is worth more than on loopback. Prints
receipts/s and HTTP requests per configuration, best of `--rounds`.

    python -m bench.rpc_batch                  # N=200, loopback and a 20 ms round trip
    python -m bench.rpc_batch --n 500 --rtt-ms 0 50 --batch-max 1 20 50
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import trio

from qtg.providers.evm.rpc import EvmRpc

ANVIL = (
    Path(__file__).resolve().parents[1]
    / ".tools/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil"
)
CHAIN_ID = 31337
SENDER = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"  # anvil's first account (unlocked)
CONCURRENCY = 8  # MG_EVM_RPC_CONCURRENCY's default


def _call(url: str, method: str, *params: object) -> object:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)})
    request = urllib.request.Request(
        url, data=body.encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())["result"]


class CountingProxy:
    """Counts HTTP requests, holds each `rtt` seconds, forwards it to `upstream`."""

    def __init__(self, upstream: str, rtt: float) -> None:
        self.posts = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers["Content-Length"]))
                with proxy._lock:
                    proxy.posts += 1
                if rtt:
                    time.sleep(rtt)
                request = urllib.request.Request(
                    upstream, data=data, headers={"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(request, timeout=30) as reply:
                    answer = reply.read()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_anvil() -> tuple[subprocess.Popen[bytes], str]:
    if not ANVIL.exists():
        raise SystemExit(f"anvil not found at {ANVIL} (see tests/evm/anvil.py)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [str(ANVIL), "--port", str(port), "--silent"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            _call(url, "eth_chainId")
            return proc, url
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)


async def lookups(url: str, hashes: list[str], batch_max: int) -> tuple[float, int]:
    """Seconds for every receipt looked up at once, as the observer's batches do, and
    the HTTP requests the client sent (httpx's request hook: no proxy in the way)."""
    rpc = EvmRpc(
        CHAIN_ID, url, timeout=30.0, concurrency=CONCURRENCY, read_retries=0, batch_max=batch_max
    )
    sent = 0

    async def count(request: object) -> None:
        nonlocal sent
        sent += 1

    rpc._client.event_hooks["request"] = [count]
    try:
        found: list[object] = []

        async def one(tx_hash: str) -> None:
            found.append(await rpc.receipt(tx_hash))

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for tx_hash in hashes:
                nursery.start_soon(one, tx_hash)
        seconds = time.perf_counter() - started
    finally:
        await rpc.aclose()
    assert len(found) == len(hashes) and None not in found  # every receipt, none missing
    return seconds, sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="concurrent receipt lookups")
    parser.add_argument("--batch-max", type=int, nargs="+", default=[1, 20])
    parser.add_argument("--rtt-ms", type=float, nargs="+", default=[0.0, 20.0])
    parser.add_argument("--rounds", type=int, default=3, help="best of this many")
    args = parser.parse_args()
    proc, url = start_anvil()
    try:
        hashes = [
            str(_call(url, "eth_sendTransaction", {"from": SENDER, "to": SENDER, "value": "0x1"}))
            for _ in range(args.n)
        ]
        print(
            f"{args.n} concurrent eth_getTransactionReceipt through EvmRpc "
            f"(concurrency {CONCURRENCY}), anvil on loopback, {os.cpu_count()} cores"
        )
        print(f"{'path':>14} {'batch max':>10} {'POSTs':>7} {'receipts/s':>11} {'ms':>8}")
        paths: list[tuple[str, float | None]] = [("direct", None)]
        paths += [(f"proxy {rtt:g} ms", rtt) for rtt in args.rtt_ms]
        for label, rtt in paths:
            proxy = None if rtt is None else CountingProxy(url, rtt / 1000)
            try:
                for batch_max in args.batch_max:
                    best: tuple[float, int, int] | None = None
                    for _ in range(args.rounds):
                        if proxy is not None:
                            proxy.posts = 0
                        target = url if proxy is None else proxy.url
                        seconds, sent = trio.run(lookups, target, hashes, batch_max)
                        posts = sent if proxy is None else proxy.posts
                        if best is None or seconds < best[0]:
                            best = (seconds, posts, sent)
                    assert best is not None
                    seconds, posts, sent = best
                    assert posts == sent  # the proxy saw what the client sent
                    print(
                        f"{label:>14} {batch_max:>10} {posts:>7} {args.n / seconds:>11.0f} "
                        f"{seconds * 1000:>8.1f}"
                    )
            finally:
                if proxy is not None:
                    proxy.close()
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
