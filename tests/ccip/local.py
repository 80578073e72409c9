"""Chainlink Local's CCIPLocalSimulator on anvil: the tests' real CCIP lane.

The simulator (tests/ccip/contracts, compiled by build.js) deploys a router
(MockCCIPRouter), the CCIP-BnM test token and friends; its router delivers a
message to the receiver within the ccipSend transaction and emits
MessageExecuted, which qtg's ccip_delivery observe follows by message id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from evm.anvil import ADDRESSES, Anvil, wait_receipt

from qtg.domain.ccip import SIMULATOR_CONFIGURATION, word_address, words

CONTRACTS = Path(__file__).resolve().parent / "contracts"
#: CCIPLocalSimulator's CHAIN_SELECTOR (both ends of the local lane)
SELECTOR = 16015286601757825753
LANE = "local"


def artifact(name: str) -> dict:
    return json.loads((CONTRACTS / f"{name}.json").read_text())


def deploy(node: Anvil, name: str, args_hex: str = "", sender: str = ADDRESSES[0]) -> str:
    code = artifact(name)["bytecode"] + args_hex
    tx_hash = node.call("eth_sendTransaction", {"from": sender, "data": code, "gas": "0x1c9c380"})
    receipt = wait_receipt(node, tx_hash)
    assert receipt["status"] == "0x1", receipt
    return receipt["contractAddress"].lower()


def send(node: Anvil, to: str, data: str, sender: str = ADDRESSES[0]) -> dict:
    tx_hash = node.call(
        "eth_sendTransaction", {"from": sender, "to": to, "data": data, "gas": "0x7a1200"}
    )
    receipt = wait_receipt(node, tx_hash)
    assert receipt["status"] == "0x1", receipt
    return receipt


@dataclass(frozen=True)
class Local:
    simulator: str
    router: str
    bnm: str
    lnm: str
    receiver: str

    def lane(self, **overrides) -> dict:
        lane = {
            "name": LANE,
            "chain_id": 31337,
            "source_selector": str(SELECTOR),
            "dest_selector": str(SELECTOR),
            "router": self.router,
            "registry": self.simulator,
            "tokens": [self.bnm, self.lnm],
        }
        return {**lane, **overrides}

    def lanes_env(self, **overrides) -> str:
        return json.dumps([self.lane(**overrides)])


def configuration(node: Anvil, simulator: str) -> list[str]:
    data = "0x" + SIMULATOR_CONFIGURATION
    return words(node.call("eth_call", {"to": simulator, "data": data}, "latest"))


def set_up(node: Anvil, drips: int = 3, holder: str = ADDRESSES[0]) -> Local:
    """Deploy the simulator and a receiver; `drips` whole CCIP-BnM to `holder`."""
    simulator = deploy(node, "CCIPLocalSimulator")
    w = configuration(node, simulator)
    router, bnm, lnm = word_address(w[1]), word_address(w[5]), word_address(w[6])
    receiver = deploy(node, "CCIPTestReceiver", router[2:].rjust(64, "0"))
    drip = "0x" + _selector("drip(address)") + holder[2:].lower().rjust(64, "0")
    for _ in range(drips):
        send(node, bnm, drip)
    return Local(simulator=simulator, router=router, bnm=bnm, lnm=lnm, receiver=receiver)


def _selector(signature: str) -> str:
    from eth_utils import keccak

    return keccak(text=signature)[:4].hex()


def ccip_send_count(node: Anvil, router: str, from_block: int = 0) -> int:
    """ccipSend transactions the router saw: MessageExecuted logs (one per delivered send)."""
    from qtg.domain.ccip import MESSAGE_EXECUTED

    logs = node.call(
        "eth_getLogs",
        {"address": router, "topics": [MESSAGE_EXECUTED], "fromBlock": hex(from_block)},
    )
    return len(logs)
