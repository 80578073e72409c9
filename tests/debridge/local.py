"""Two anvil chains with the test DLN deployed, a local taker and a local status service (issue 46).

Chain A (31337) holds DlnSource: qtg creates orders there. Chain B (31338) holds
DlnDestination: the taker fulfils there. Contracts: tests/debridge/contracts/DlnLocal.sol
(DLN's interfaces and shapes; compiled by build.js).

- Taker: a thread that reads A's CreatedOrder logs and calls fulfillOrder on B from
  its own account (anvil's development account 2, funded with B's token), then
  sendEvmUnlock; it can hold orders (never fulfil until released) or be slow.
- Messenger: stands in for deBridge's cross-chain messages: it relays B's
  SentOrderUnlock to A's claimUnlock (the taker is paid the give amount) and B's
  SentOrderCancel to A's claimCancel (the maker is refunded). Development account 3.
- Status service: DLN's order-status API shape on loopback, `GET /api/Orders/{orderId}`
  → {"orderId", "state"} read from both chains; it can be down (503), slow, or lie
  ("Fulfilled" for an order the chain does not show fulfilled).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from eth_utils import keccak
from evm.anvil import ADDRESSES, Anvil, wait_receipt

from qtg.domain.debridge import (
    CREATED_ORDER,
    GIVE_CLAIMED_CANCEL,
    GIVE_CLAIMED_UNLOCK,
    TAKE_FULFILLED,
    TAKE_SENT_ORDER_CANCEL,
    TAKE_SENT_UNLOCK,
    Order,
    created_from_logs,
    first_word,
    fulfill_order_data,
    give_orders_data,
    take_orders_data,
)
from qtg.domain.evm import address_word

CONTRACTS = Path(__file__).resolve().parent / "contracts"
CHAIN_A, CHAIN_B = 31337, 31338
#: anvil's development accounts 2 and 3 (mnemonic "test test … junk"): not secrets
TAKER = "0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc"
MESSENGER = "0x90f79bf6eb2c4f870365e785982e1f101e93b906"
#: DlnSource's globalFixedNativeFee on A (wei), paid with every createOrder
FIXED_FEE = 10**15


def artifact(name: str) -> dict:
    return json.loads((CONTRACTS / "DlnLocal.json").read_text())[name]


def selector(signature: str) -> str:
    return keccak(text=signature)[:4].hex()


def deploy(node: Anvil, name: str, args_hex: str = "") -> str:
    code = artifact(name)["bytecode"] + args_hex
    tx = node.call("eth_sendTransaction", {"from": ADDRESSES[0], "data": code, "gas": "0x989680"})
    receipt = wait_receipt(node, tx)
    assert receipt["status"] == "0x1", receipt
    return receipt["contractAddress"].lower()


def send(node: Anvil, to: str, data: str, sender: str = ADDRESSES[0], value: int = 0) -> dict:
    tx = node.call(
        "eth_sendTransaction",
        {"from": sender, "to": to, "data": data, "gas": "0xf4240", "value": hex(value)},
    )
    return wait_receipt(node, tx)


def call(node: Anvil, to: str, data: str) -> str:
    return str(node.call("eth_call", {"to": to, "data": data}, "latest"))


def calldata(signature: str, *words: str) -> str:
    return "0x" + selector(signature) + "".join(words)


@dataclass(frozen=True)
class Deployment:
    source: str  # DlnSource on A
    destination: str  # DlnDestination on B
    token_a: str
    token_b: str

    def chains_env(self, chain_a: int = CHAIN_A, chain_b: int = CHAIN_B) -> str:
        """MG_DEBRIDGE_CHAINS for both chains: each holds both contracts' roles it needs."""
        return json.dumps(
            [
                {
                    "chain_id": chain_a,
                    "dln_source": self.source,
                    "dln_destination": self.source,  # A is never a destination here
                    "tokens": {"USDC": self.token_a},
                },
                {
                    "chain_id": chain_b,
                    "dln_source": self.destination,  # B is never a source here
                    "dln_destination": self.destination,
                    "tokens": {"USDC": self.token_b},
                },
            ]
        )


def set_up(a: Anvil, b: Anvil, on_a: int, holder: str = ADDRESSES[0], taker_b: int = 10**12):
    """Deploy DlnSource + token on A (`on_a` to `holder`), DlnDestination + token on B
    (`taker_b` to the taker, who approves DlnDestination)."""
    token_a = deploy(a, "TestToken")
    source = deploy(a, "DlnSource", f"{FIXED_FEE:064x}" + address_word(MESSENGER))
    token_b = deploy(b, "TestToken")
    destination = deploy(b, "DlnDestination")
    mint = "mint(address,uint256)"
    send(a, token_a, calldata(mint, address_word(holder), f"{on_a:064x}"))
    send(b, token_b, calldata(mint, address_word(TAKER), f"{taker_b:064x}"))
    approve = calldata("approve(address,uint256)", address_word(destination), "f" * 64)
    assert send(b, token_b, approve, sender=TAKER)["status"] == "0x1"
    return Deployment(source, destination, token_a, token_b)


def balance(node: Anvil, token: str, owner: str) -> int:
    return int(call(node, token, calldata("balanceOf(address)", address_word(owner))), 16)


def take_status(b: Anvil, dep: Deployment, order_id: str) -> int:
    return first_word(call(b, dep.destination, take_orders_data(order_id)))


def give_status(a: Anvil, dep: Deployment, order_id: str) -> int:
    return first_word(call(a, dep.source, give_orders_data(order_id)))


def created_orders(a: Anvil, dep: Deployment) -> list[tuple[Order, str]]:
    """Every order A's DlnSource created, from its CreatedOrder logs."""
    logs = a.call(
        "eth_getLogs", {"address": dep.source, "topics": [CREATED_ORDER], "fromBlock": "0x0"}
    )
    found = [created_from_logs([log], dep.source) for log in logs]
    return [f for f in found if f is not None]


@dataclass
class LocalDln:
    """The taker, the messenger and the status service over two chains."""

    a: Anvil
    b: Anvil
    dep: Deployment
    hold: bool = False  # the taker does not fulfil (yet)
    delay: float = 0.0  # seconds the taker waits after seeing an order
    down: bool = False  # the status service answers 503
    lie_fulfilled: bool = False  # the status service says Fulfilled whatever the chain says
    relay_cancels: bool = True  # the messenger delivers B's cancels to A (the refund)
    fulfilled: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    passes: int = 0  # the taker's and messenger's rounds over the chains

    def start(self, port: int = 0) -> LocalDln:
        self._stop = threading.Event()
        self._seen: dict[str, float] = {}
        self._relayed: set[str] = set()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self._serve(port)
        return self

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(10)
        self.server.shutdown()
        self.server.server_close()

    # ---- the taker and the messenger
    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self._step()
                self.passes += 1
            except Exception as exc:  # keep going; a test reads what went wrong
                self.errors.append(repr(exc))

    def _step(self) -> None:
        now = time.monotonic()
        for order, oid in created_orders(self.a, self.dep):
            self._seen.setdefault(oid, now)
            if oid in self.fulfilled or self.hold or now - self._seen[oid] < self.delay:
                continue
            if take_status(self.b, self.dep, oid) != 0:
                continue  # cancelled (or fulfilled by another taker)
            receipt = send(self.b, self.dep.destination, fulfill_order_data(order, TAKER), TAKER)
            if receipt["status"] != "0x1":
                self.errors.append(f"fulfillOrder {oid} reverted")
                continue
            self.fulfilled.append(oid)
            unlock = calldata(
                "sendEvmUnlock(bytes32,address,uint256)", oid[2:], address_word(TAKER), "0" * 64
            )
            send(self.b, self.dep.destination, unlock, TAKER)
        self._relay()

    def _relay(self) -> None:
        """B's SentOrderUnlock / SentOrderCancel become A's claimUnlock / claimCancel."""
        for order, oid in created_orders(self.a, self.dep):
            if oid in self._relayed:
                continue
            status = take_status(self.b, self.dep, oid)
            if status == TAKE_SENT_UNLOCK:
                fn, to = "claimUnlock(bytes32,address)", TAKER
            elif status == TAKE_SENT_ORDER_CANCEL and self.relay_cancels:
                fn, to = "claimCancel(bytes32,address)", order.allowed_cancel_beneficiary_src
            else:
                continue
            receipt = send(
                self.a, self.dep.source, calldata(fn, oid[2:], address_word(to)), MESSENGER
            )
            if receipt["status"] == "0x1":
                self._relayed.add(oid)

    # ---- the status service
    def state(self, oid: str) -> str | None:
        give = give_status(self.a, self.dep, oid)
        if give == 0:
            return None
        if give == GIVE_CLAIMED_UNLOCK:
            return "ClaimedUnlock"
        if give == GIVE_CLAIMED_CANCEL:
            return "ClaimedOrderCancel"
        take = take_status(self.b, self.dep, oid)
        return {
            TAKE_FULFILLED: "Fulfilled",
            TAKE_SENT_UNLOCK: "SentUnlock",
            TAKE_SENT_ORDER_CANCEL: "SentOrderCancel",
        }.get(take, "Created")

    def _serve(self, port: int) -> None:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                service.requests.append(self.path)
                if service.down:
                    return self._reply(503, {"error": "service unavailable"})
                parts = self.path.strip("/").split("/")
                if parts[:2] != ["api", "Orders"] or len(parts) != 3:
                    return self._reply(400, {"error": "bad request"})
                oid = parts[2].lower()
                state = "Fulfilled" if service.lie_fulfilled else service.state(oid)
                if state is None:
                    return self._reply(404, {"error": "order not found"})
                return self._reply(200, {"orderId": {"stringValue": oid}, "state": state})

            def _reply(self, status: int, body: dict) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
