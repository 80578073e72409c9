"""Two anvil chains with CCTP V1 deployed, and a local attestation service (issue 28).

Chain A (chain id 31337, domain 0) burns, chain B (chain id 31338, domain 3)
mints. Contracts: tests/cctp/contracts/CctpLocal.sol (Circle's interfaces,
message format and attester check; compiled by build.js). The attestation
service is real HTTP on loopback speaking Circle's `GET /v2/messages/{domain}
?transactionHash=` shape: it reads the transaction's MessageSent log from chain
A and signs keccak256(message) with a test attester key that B's transmitter
enables. It can be told to answer "pending" for a number of requests, to be
slow, or to be down (503, or its socket closed).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from eth_account import Account
from eth_utils import keccak
from evm.anvil import ADDRESSES, Anvil, free_port, rpc, wait_receipt

from qtg.domain.cctp import MESSAGE_SENT, address_word, message_from_logs

CONTRACTS = Path(__file__).resolve().parent / "contracts"
CHAIN_A, CHAIN_B = 31337, 31338
DOMAIN_A, DOMAIN_B = 0, 3
#: a test attester key (not a secret): enabled on both transmitters
ATTESTER_KEY = "0x" + "a1" * 32
ATTESTER = Account.from_key(ATTESTER_KEY).address


class ChainNode(Anvil):
    """anvil with its own chain id."""

    def __init__(self, binary: Path, chain_id: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.chain_id = chain_id
        self.proc = subprocess.Popen(
            [
                str(binary),
                *("--host", "127.0.0.1", "--port", str(self.port)),
                *("--chain-id", str(chain_id), "--silent"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                rpc(self.url, "eth_chainId")
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("anvil did not start") from None
                time.sleep(0.05)


def artifact(name: str) -> dict:
    return json.loads((CONTRACTS / "CctpLocal.json").read_text())[name]


def selector(signature: str) -> str:
    return keccak(text=signature)[:4].hex()


def deploy(node: Anvil, name: str, args_hex: str = "") -> str:
    code = artifact(name)["bytecode"] + args_hex
    tx = node.call("eth_sendTransaction", {"from": ADDRESSES[0], "data": code, "gas": "0x989680"})
    receipt = wait_receipt(node, tx)
    assert receipt["status"] == "0x1", receipt
    return receipt["contractAddress"].lower()


def send(node: Anvil, to: str, signature: str, *words: str, sender: str = ADDRESSES[0]) -> dict:
    data = "0x" + selector(signature) + "".join(words)
    tx = node.call(
        "eth_sendTransaction", {"from": sender, "to": to, "data": data, "gas": "0x7a120"}
    )
    receipt = wait_receipt(node, tx)
    assert receipt["status"] == "0x1", receipt
    return receipt


def call(node: Anvil, to: str, signature: str, *words: str) -> int:
    data = "0x" + selector(signature) + "".join(words)
    return int(node.call("eth_call", {"to": to, "data": data}, "latest"), 16)


@dataclass(frozen=True)
class Deployment:
    chain_id: int
    domain: int
    usdc: str
    transmitter: str
    messenger: str

    def entry(self) -> dict:
        return {
            "chain_id": self.chain_id,
            "domain": self.domain,
            "token_messenger": self.messenger,
            "message_transmitter": self.transmitter,
            "usdc": self.usdc,
        }


def _deploy_side(node: Anvil, chain_id: int, domain: int) -> Deployment:
    usdc = deploy(node, "TestUSDC")
    transmitter = deploy(node, "MessageTransmitter", f"{domain:064x}" + address_word(ATTESTER))
    messenger = deploy(node, "TokenMessenger", address_word(transmitter))
    send(node, usdc, "setMinter(address)", address_word(messenger))
    return Deployment(chain_id, domain, usdc, transmitter, messenger)


def _link(node: Anvil, here: Deployment, there: Deployment) -> None:
    send(
        node,
        here.messenger,
        "addRemoteTokenMessenger(uint32,bytes32)",
        f"{there.domain:064x}",
        address_word(there.messenger),
    )
    send(
        node,
        here.messenger,
        "linkTokenPair(address,uint32,bytes32)",
        address_word(here.usdc),
        f"{there.domain:064x}",
        address_word(there.usdc),
    )


def set_up(a: Anvil, b: Anvil, usdc_on_a: int, holder: str = ADDRESSES[0]) -> tuple:
    """Deploy on both chains, link them both ways; `usdc_on_a` base units to `holder` on A."""
    da = _deploy_side(a, CHAIN_A, DOMAIN_A)
    db = _deploy_side(b, CHAIN_B, DOMAIN_B)
    _link(a, da, db)
    _link(b, db, da)
    send(a, da.usdc, "mint(address,uint256)", address_word(holder), f"{usdc_on_a:064x}")
    return da, db


def chains_env(*deployments: Deployment) -> str:
    return json.dumps([d.entry() for d in deployments])


def usdc_balance(node: Anvil, dep: Deployment, owner: str) -> int:
    return call(node, dep.usdc, "balanceOf(address)", address_word(owner))


def burns(node: Anvil, dep: Deployment) -> int:
    """MessageSent logs of A's transmitter: one per depositForBurn that landed."""
    logs = node.call(
        "eth_getLogs", {"address": dep.transmitter, "topics": [MESSAGE_SENT], "fromBlock": "0x0"}
    )
    return len(logs)


def sign_message(message: str, key: str = ATTESTER_KEY) -> str:
    """The attester's signature: ECDSA over keccak256(message), no prefix, v 27/28."""
    digest = keccak(bytes.fromhex(message.removeprefix("0x")))
    signed = Account.unsafe_sign_hash(digest, key)
    return "0x" + bytes(signed.signature).hex()


@dataclass
class AttestationService:
    """Circle's attestation API on loopback, for chain A's burns."""

    source: Anvil
    source_dep: Deployment
    pending_for: int = 0  # answer "pending_confirmations" to this many requests first
    down: bool = False  # answer 503
    delay: float = 0.0  # seconds before an answer …
    slow_for: int = 0  # … for this many requests
    requests: list[str] = field(default_factory=list)
    signed: int = 0

    def start(self, port: int = 0) -> AttestationService:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                service.requests.append(self.path)
                if service.slow_for > 0:
                    service.slow_for -= 1
                    time.sleep(service.delay)
                if service.down:
                    return self._reply(503, {"error": "service unavailable"})
                url = urlparse(self.path)
                parts = url.path.strip("/").split("/")
                tx = parse_qs(url.query).get("transactionHash", [""])[0]
                if parts[:2] != ["v2", "messages"] or len(parts) != 3 or not tx:
                    return self._reply(400, {"error": "bad request"})
                if int(parts[2]) != service.source_dep.domain:
                    return self._reply(404, {"error": "Message not found"})
                receipt = rpc(service.source.url, "eth_getTransactionReceipt", tx)
                message = receipt and message_from_logs(
                    receipt["logs"], service.source_dep.transmitter
                )
                if not message:
                    return self._reply(404, {"error": "Message not found"})
                nonce = str(int(message[2 + 24 : 2 + 40], 16))
                if service.pending_for > 0:
                    service.pending_for -= 1
                    item = {"attestation": "PENDING", "status": "pending_confirmations"}
                else:
                    service.signed += 1
                    item = {"attestation": sign_message(message), "status": "complete"}
                return self._reply(
                    200,
                    {
                        "messages": [
                            {"message": message, "eventNonce": nonce, "cctpVersion": 1, **item}
                        ]
                    },
                )

            def _reply(self, status: int, body: dict) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
