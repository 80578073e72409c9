"""A local OKX on loopback: real HTTP, OKX v5's documented REST shapes and signing, a ledger,
and a "send" that makes a real ERC-20 transfer on anvil.

Endpoints (docs-v5, Funding account):

- POST /api/v5/asset/withdrawal — body {ccy, amt, dest, toAddr, chain?, fee?, clientId?};
  answer {"code": "0", "msg": "", "data": [{"amt", "wdId", "ccy", "clientId", "chain"}]}.
- GET /api/v5/asset/withdrawal-history — query ccy, wdId, clientId, txId, state, after,
  before, limit; rows newest first {ccy, chain, amt, ts, from, to, txId, fee, feeCcy,
  state, wdId, clientId}; state -2 canceled, -1 failed, 0 pending, 1 sending, 2 sent.
- GET /api/v5/asset/deposit-history — empty here.

Signing, checked as OKX does: OK-ACCESS-SIGN = base64(HMAC-SHA256(secret, timestamp +
method + requestPath(+"?"+query) + body)), OK-ACCESS-TIMESTAMP an ISO time within
30 s, OK-ACCESS-KEY and OK-ACCESS-PASSPHRASE the account's; else HTTP 401 with OKX's
codes (50111 key, 50105 passphrase, 50113 signature, 50102 timestamp).

Faults (attributes, set from the test thread):
- `down`: every request gets 503 {"code": "50001"} and nothing is done;
- `lose_replies`: the next N withdraw requests are carried out, then the connection is
  closed without an answer (the reply is lost);
- `slow_withdraw_seconds`: a withdraw request is carried out (and answered) only this long
  after it arrived — later than the client waits, it lands after the client gave up;
- `hide_history_seconds`: a withdrawal is missing from the history for this long after
  it was made (a venue whose history lags).

Runs in its own thread with its own trio loop (`start()` / `stop()`), so a test can
drive real runtime subprocesses while it serves.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

import h11
import httpx
import trio

API_KEY = "okx-test-key"
SECRET = "okx-test-secret"
PASSPHRASE = "okx-test-pass"
TRANSFER = "0xa9059cbb"


@dataclass
class Withdrawal:
    wd_id: str
    client_id: str
    ccy: str
    chain: str
    amt: Decimal
    fee: Decimal
    to: str
    ts: int
    state: str = "0"
    tx_id: str = ""

    def row(self) -> dict[str, Any]:
        return {
            "ccy": self.ccy, "chain": self.chain, "amt": str(self.amt), "ts": str(self.ts),
            "from": "", "to": self.to, "txId": self.tx_id, "fee": str(self.fee),
            "feeCcy": self.ccy, "state": self.state, "wdId": self.wd_id,
            "clientId": self.client_id,
        }  # fmt: skip


@dataclass
class Ledger:
    balances: dict[str, Decimal] = field(default_factory=dict)
    withdrawals: list[Withdrawal] = field(default_factory=list)


class OkxVenue:
    def __init__(
        self, anvil_url: str, token: str, hot_wallet: str, decimals: int = 6, ccy: str = "USDC"
    ) -> None:
        self.anvil_url = anvil_url
        self.token = token
        self.hot_wallet = hot_wallet
        self.decimals = decimals
        self.ccy = ccy
        self.ledger = Ledger(balances={ccy: Decimal("1000000")})
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status)
        self.down = False
        self.lose_replies = 0
        self.slow_withdraw_seconds = 0.0
        self.hide_history_seconds = 0.0
        self.port: int | None = None
        self.listen_port = 0  # 0: any free port
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> OkxVenue:
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the local OKX did not start")
        return self

    def stop(self) -> None:
        if self._token is not None and self._cancel is not None:
            trio.from_thread.run_sync(self._cancel.cancel, trio_token=self._token)
        if self._thread is not None:
            self._thread.join(10)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._cancel = scope
            async with httpx.AsyncClient(timeout=10) as client, trio.open_nursery() as nursery:
                listeners = await nursery.start(
                    partial(trio.serve_tcp, self._handle, self.listen_port, host="127.0.0.1")
                )
                self.port = listeners[0].socket.getsockname()[1]
                nursery.start_soon(self._sender, client)
                self._ready.set()

    # ---------------------------------------------------------------- the venue
    def withdrawals(self) -> list[Withdrawal]:
        with self.lock:
            return list(self.ledger.withdrawals)

    def _check_signature(self, method: str, target: str, headers: dict, body: bytes):
        """OKX's rule; None when the request is signed by the account, else an error body."""
        if headers.get("ok-access-key") != API_KEY:
            return {"code": "50111", "msg": "Invalid OK-ACCESS-KEY", "data": []}
        if headers.get("ok-access-passphrase") != PASSPHRASE:
            return {"code": "50105", "msg": "Invalid OK-ACCESS-PASSPHRASE", "data": []}
        stamp = headers.get("ok-access-timestamp", "")
        try:
            sent = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            return {"code": "50102", "msg": "Timestamp request expired", "data": []}
        if abs((datetime.now(UTC) - sent).total_seconds()) > 30:
            return {"code": "50102", "msg": "Timestamp request expired", "data": []}
        prehash = (stamp + method + target).encode() + body
        expected = base64.b64encode(
            hmac.new(SECRET.encode(), prehash, hashlib.sha256).digest()
        ).decode()
        if not hmac.compare_digest(expected, headers.get("ok-access-sign", "")):
            return {"code": "50113", "msg": "Invalid Sign", "data": []}
        return None

    def _withdraw(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        for name in ("ccy", "amt", "dest", "toAddr"):
            if not body.get(name):
                return 200, {"code": "51000", "msg": f"Parameter {name} error", "data": []}
        try:
            amt = Decimal(body["amt"])
            fee = Decimal(body.get("fee") or "0")
        except ArithmeticError:
            return 200, {"code": "51000", "msg": "Parameter amt error", "data": []}
        to = body["toAddr"]
        if not (to.startswith("0x") and len(to) == 42):
            return 200, {"code": "58207", "msg": "Withdrawal address error", "data": []}
        with self.lock:
            balance = self.ledger.balances.get(body["ccy"], Decimal(0))
            if balance < amt + fee:
                return 200, {"code": "58350", "msg": "Insufficient balance", "data": []}
            self.ledger.balances[body["ccy"]] = balance - amt - fee
            wd = Withdrawal(
                wd_id=str(100000 + len(self.ledger.withdrawals)),
                client_id=body.get("clientId", ""),
                ccy=body["ccy"],
                chain=body.get("chain") or f"{body['ccy']}-ERC20",
                amt=amt,
                fee=fee,
                to=to,
                ts=int(time.time() * 1000),
            )
            self.ledger.withdrawals.append(wd)
        data = {"amt": str(amt), "wdId": wd.wd_id, "ccy": wd.ccy, "clientId": wd.client_id,
                "chain": wd.chain}  # fmt: skip
        return 200, {"code": "0", "msg": "", "data": [data]}

    def _history(self, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        now = int(time.time() * 1000)
        with self.lock:
            rows = [
                w for w in self.ledger.withdrawals
                if now - w.ts >= self.hide_history_seconds * 1000
            ]  # fmt: skip
        for name, attr in (("ccy", "ccy"), ("wdId", "wd_id"), ("clientId", "client_id"),
                           ("txId", "tx_id"), ("state", "state")):  # fmt: skip
            if name in query:
                rows = [w for w in rows if getattr(w, attr) == query[name]]
        if "before" in query:
            rows = [w for w in rows if w.ts > int(query["before"])]
        if "after" in query:
            rows = [w for w in rows if w.ts < int(query["after"])]
        rows.sort(key=lambda w: -w.ts)
        limit = min(int(query.get("limit", 100)), 100)
        return 200, {"code": "0", "msg": "", "data": [w.row() for w in rows[:limit]]}

    async def _sender(self, client: httpx.AsyncClient) -> None:
        """The venue's hot wallet: pays every pending withdrawal on anvil, once."""
        while True:
            with self.lock:
                todo = [w for w in self.ledger.withdrawals if w.state == "0"]
                for w in todo:
                    w.state = "1"
            for w in todo:
                value = int(w.amt * 10**self.decimals)
                data = TRANSFER + w.to[2:].lower().rjust(64, "0") + f"{value:064x}"
                tx_hash = await _rpc(
                    client,
                    self.anvil_url,
                    "eth_sendTransaction",
                    {"from": self.hot_wallet, "to": self.token, "data": data, "gas": "0x30000"},
                )
                # anvil mines at once; polling a remote node has no event to wait on
                receipt = "eth_getTransactionReceipt"
                while await _rpc(client, self.anvil_url, receipt, tx_hash) is None:  # noqa: ASYNC110
                    await trio.sleep(0.05)
                with self.lock:
                    w.tx_id, w.state = tx_hash, "2"
            await trio.sleep(0.05)

    # ---------------------------------------------------------------- HTTP
    async def _answer(self, method: str, target: str, headers: dict, body: bytes):
        path = urlsplit(target).path
        if self.slow_withdraw_seconds and (method, path) == ("POST", "/api/v5/asset/withdrawal"):
            await trio.sleep(self.slow_withdraw_seconds)
        if self.down:
            return 503, {"code": "50001", "msg": "Service temporarily unavailable", "data": []}
        refused = self._check_signature(method, target, headers, body)
        if refused is not None:
            return 401, refused
        query = {k: v[-1] for k, v in parse_qs(urlsplit(target).query).items()}
        if (method, path) == ("POST", "/api/v5/asset/withdrawal"):
            try:
                payload = json.loads(body)
            except ValueError:
                return 400, {"code": "50002", "msg": "JSON syntax error", "data": []}
            answer = self._withdraw(payload)
            with self.lock:
                lose = self.lose_replies > 0 and answer[1]["code"] == "0"
                if lose:
                    self.lose_replies -= 1
            return "lose" if lose else answer
        if (method, path) == ("GET", "/api/v5/asset/withdrawal-history"):
            return self._history(query)
        if (method, path) == ("GET", "/api/v5/asset/deposit-history"):
            return 200, {"code": "0", "msg": "", "data": []}
        return 404, {"code": "404", "msg": "Not Found", "data": []}

    async def _handle(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request: h11.Request | None = None
                body = b""
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        conn.receive_data(await stream.receive_some(65536))
                        continue
                    if isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.Data):
                        body += event.data
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    elif isinstance(event, h11.ConnectionClosed):
                        return
                assert request is not None
                headers = {k.decode().lower(): v.decode() for k, v in request.headers}
                method, target = request.method.decode(), request.target.decode()
                answer = await self._answer(method, target, headers, body)
                if answer == "lose":
                    with self.lock:
                        self.requests.append((method, urlsplit(target).path, 0))
                    return  # carried out; the connection closes with no reply
                status, payload = answer
                with self.lock:
                    self.requests.append((method, urlsplit(target).path, status))
                data = json.dumps(payload).encode()
                await stream.send_all(
                    conn.send(
                        h11.Response(
                            status_code=status,
                            headers=[
                                ("content-type", "application/json"),
                                ("content-length", str(len(data))),
                            ],
                        )
                    )
                    + conn.send(h11.Data(data=data))
                    + conn.send(h11.EndOfMessage())
                )
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (h11.RemoteProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            await stream.aclose()


async def _rpc(client: httpx.AsyncClient, url: str, method: str, *params: Any) -> Any:
    reply = await client.post(
        url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
    )
    body = reply.json()
    if "error" in body:
        raise RuntimeError(body["error"])
    return body["result"]


def main() -> None:
    """`python tests/cex/okx_venue.py --anvil URL --port N --credentials FILE` (README session):
    deploy a 6-decimal test USDC into anvil's first account (the venue's hot wallet), write
    the ccxt credentials file for this venue, print the token's address, serve until ^C."""
    import argparse
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from evm.anvil import ADDRESSES, Anvil, deploy_token

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--anvil", default="http://127.0.0.1:8545")
    parser.add_argument("--port", type=int, default=8600)
    parser.add_argument("--credentials", default="okx-credentials.json")
    args = parser.parse_args()
    node = Anvil.__new__(Anvil)  # an anvil already running: only its URL is needed
    node.url = args.anvil
    token = deploy_token(node, 10**9 * 10**6)
    venue = OkxVenue(args.anvil, token, ADDRESSES[0])
    path = Path(args.credentials)
    path.write_text(json.dumps({"okx": {"apiKey": API_KEY, "secret": SECRET,
                                        "password": PASSPHRASE,
                                        "api_url": f"http://127.0.0.1:{args.port}"}}))  # fmt: skip
    path.chmod(0o600)
    venue.listen_port = args.port
    venue.start()
    print(token, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        venue.stop()


if __name__ == "__main__":
    main()
