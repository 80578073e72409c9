"""Two anvil chains with a Stargate V2 pool on a LayerZero V2 endpoint each, and a local
stand-in for LayerZero's DVN and executor (issue 46).

Chain A (chain id 31337, eid 30101) sends, chain B (chain id 31338, eid 30110)
delivers. Contracts: tests/stargate/contracts/StargateLocal.sol (Stargate V2's
IOFT shapes, LayerZero V2's packet and GUID; compiled by build.js). B's pool
holds USDT liquidity; A's holder holds USDT to send.

The stand-in (`LayerZeroExecutor`) does what LayerZero's DVNs and executor do
off chain: it reads PacketSent logs of A's endpoint, calls B's endpoint
`verify(origin, receiver, keccak(guid ++ message))` as the DVN, then the
permissionless `lzReceive(origin, receiver, guid, message, "")`. Tests can hold
it (down: deliver nothing), slow it (a delay before each delivery), or let it
deliver twice (a replay, which B's endpoint refuses).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cctp.local import call, selector, send
from eth_abi import encode
from eth_utils import keccak
from evm.anvil import ADDRESSES, Anvil, wait_receipt

from qtg.domain.evm import address_word
from qtg.domain.stargate import PACKET_SENT, _first_bytes, decode_packet, message_of

CONTRACTS = Path(__file__).resolve().parent / "contracts"
CHAIN_A, CHAIN_B = 31337, 31338
#: LayerZero V2 endpoint ids of Ethereum and Arbitrum mainnets (any distinct uint32 would do)
EID_A, EID_B = 30101, 30110
#: anvil's third development account (not a secret): the DVN and executor stand-in
DVN = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
#: the endpoint's flat native fee (EndpointV2Local.nativeFee)
NATIVE_FEE = 10**15
LIQUIDITY = 1_000_000 * 10**6


def artifact(name: str) -> dict:
    return json.loads((CONTRACTS / "StargateLocal.json").read_text())[name]


def deploy(node: Anvil, name: str, args_hex: str = "") -> str:
    code = artifact(name)["bytecode"] + args_hex
    tx = node.call("eth_sendTransaction", {"from": ADDRESSES[0], "data": code, "gas": "0x989680"})
    receipt = wait_receipt(node, tx)
    assert receipt["status"] == "0x1", receipt
    return receipt["contractAddress"].lower()


def transact(node: Anvil, to: str, data: str, sender: str = ADDRESSES[0], value: int = 0) -> dict:
    tx = node.call(
        "eth_sendTransaction",
        {"from": sender, "to": to, "data": data, "gas": "0x7a120", "value": hex(value)},
    )
    return wait_receipt(node, tx)


@dataclass(frozen=True)
class Deployment:
    chain_id: int
    eid: int
    token: str
    endpoint: str
    pool: str

    def entry(self) -> dict:
        return {
            "chain_id": self.chain_id,
            "eid": self.eid,
            "pool": self.pool,
            "endpoint": self.endpoint,
            "token": self.token,
        }


def _deploy_side(node: Anvil, chain_id: int, eid: int) -> Deployment:
    token = deploy(node, "TestUSDT")
    endpoint = deploy(node, "EndpointV2Local", f"{eid:064x}" + address_word(DVN))
    pool = deploy(node, "StargatePoolLocal", address_word(token) + address_word(endpoint))
    return Deployment(chain_id, eid, token, endpoint, pool)


def set_up(a: Anvil, b: Anvil, usdt_on_a: int, holder: str = ADDRESSES[0]) -> tuple:
    """Deploy on both chains, peer the pools both ways; `usdt_on_a` base units to `holder`
    on A, LIQUIDITY to B's pool (what it pays deliveries from)."""
    da = _deploy_side(a, CHAIN_A, EID_A)
    db = _deploy_side(b, CHAIN_B, EID_B)
    for node, here, there in ((a, da, db), (b, db, da)):
        send(
            node,
            here.pool,
            "setPeer(uint32,bytes32)",
            f"{there.eid:064x}",
            address_word(there.pool),
        )
    send(a, da.token, "mint(address,uint256)", address_word(holder), f"{usdt_on_a:064x}")
    send(b, db.token, "mint(address,uint256)", address_word(db.pool), f"{LIQUIDITY:064x}")
    return da, db


def chains_env(*deployments: Deployment) -> str:
    return json.dumps([d.entry() for d in deployments])


def usdt_balance(node: Anvil, dep: Deployment, owner: str) -> int:
    return call(node, dep.token, "balanceOf(address)", address_word(owner))


def packets(node: Anvil, dep: Deployment) -> list[str]:
    """The encoded packets of A's endpoint's PacketSent logs: one per send that landed."""
    logs = node.call(
        "eth_getLogs", {"address": dep.endpoint, "topics": [PACKET_SENT], "fromBlock": "0x0"}
    )
    return [_first_bytes(log["data"]) for log in logs]


def deliveries(node: Anvil, dep: Deployment) -> int:
    """OFTReceived logs of B's pool: one per delivery that paid."""
    from qtg.domain.stargate import OFT_RECEIVED

    logs = node.call(
        "eth_getLogs", {"address": dep.pool, "topics": [OFT_RECEIVED], "fromBlock": "0x0"}
    )
    return len(logs)


ORIGIN = "(uint32,bytes32,uint64)"


def verify_data(encoded: str) -> str:
    p = decode_packet(encoded)
    payload_hash = keccak(bytes.fromhex(p.guid[2:]) + bytes.fromhex(message_of(encoded)[2:]))
    args = encode(
        [ORIGIN, "address", "bytes32"],
        [(p.src_eid, bytes.fromhex(address_word(p.sender)), p.nonce), p.receiver, payload_hash],
    )
    return "0x" + selector(f"verify({ORIGIN},address,bytes32)") + args.hex()


def lz_receive_data(encoded: str) -> str:
    p = decode_packet(encoded)
    args = encode(
        [ORIGIN, "address", "bytes32", "bytes", "bytes"],
        [
            (p.src_eid, bytes.fromhex(address_word(p.sender)), p.nonce),
            p.receiver,
            bytes.fromhex(p.guid[2:]),
            bytes.fromhex(message_of(encoded)[2:]),
            b"",
        ],
    )
    return "0x" + selector(f"lzReceive({ORIGIN},address,bytes32,bytes,bytes)") + args.hex()


def deliver(b: Anvil, db: Deployment, encoded: str, sender: str = DVN) -> dict:
    """The DVN's verify, then the executor's lzReceive, on B: the receipt of lzReceive."""
    verified = transact(b, db.endpoint, verify_data(encoded), DVN)
    if verified["status"] != "0x1":
        return verified  # already delivered: the endpoint refuses to verify it again
    return transact(b, db.endpoint, lz_receive_data(encoded), sender)


@dataclass
class LayerZeroExecutor:
    """LayerZero's DVN + executor for A → B, on a thread polling A's endpoint."""

    a: Anvil
    b: Anvil
    da: Deployment
    db: Deployment
    down: bool = False  # deliver nothing while set (packets wait, as on a stalled network)
    delay: float = 0.0  # seconds between seeing a packet and delivering it
    delivered: list[str] = field(default_factory=list)  # guids, in delivery order
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> LayerZeroExecutor:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        seen: set[str] = set()
        while not self._stop.wait(0.1):
            if self.down:
                continue
            try:
                for encoded in packets(self.a, self.da):
                    guid = decode_packet(encoded).guid
                    if guid in seen:
                        continue
                    if self.delay:
                        time.sleep(self.delay)
                    receipt = deliver(self.b, self.db, encoded)
                    seen.add(guid)
                    if receipt["status"] == "0x1":
                        self.delivered.append(guid)
            except (OSError, RuntimeError):
                continue  # a chain busy or restarting under a test: try again next round

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)
