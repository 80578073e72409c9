"""A real local Ethereum node for the EVM tests: anvil from npm (@foundry-rs/anvil).

`.ci/run` installs it under `.tools/`; a developer runs
`(cd .tools && npm install @foundry-rs/anvil)`. The fixture installs it on
first use when npm exists, and skips only when npm itself is missing.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / ".tools"
BINARY = TOOLS / "node_modules" / "@foundry-rs" / "anvil-linux-amd64" / "bin" / "anvil"
CHAIN_ID = 31337
#: anvil's well-known development accounts (mnemonic "test test … junk"): not secrets.
KEYS = [
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
]
ADDRESSES = [
    "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
    "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
]


def find_binary() -> Path | None:
    if BINARY.exists():
        return BINARY
    found = shutil.which("anvil")
    if found:
        return Path(found)
    if shutil.which("npm") is None:
        return None
    TOOLS.mkdir(exist_ok=True)
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "@foundry-rs/anvil"],
        cwd=TOOLS,
        check=True,
        capture_output=True,
    )
    return BINARY if BINARY.exists() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rpc(url: str, method: str, *params) -> object:
    request = urllib.request.Request(
        url,
        data=json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        body = json.loads(reply.read())
    if "error" in body:
        raise RuntimeError(body["error"])
    return body["result"]


class Anvil:
    def __init__(self, binary: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [str(binary), "--host", "127.0.0.1", "--port", str(self.port), "--silent"],
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

    def call(self, method: str, *params):
        return rpc(self.url, method, *params)

    def revert(self, snapshot: str) -> None:
        """Back to `snapshot`'s state, with the chain's clock kept at wall-clock time.

        anvil's evm_revert also turns its clock back to the snapshot's moment, so in a
        session of reverted tests the blocks' timestamps fall behind the wall clock by
        every earlier test's duration (minutes in the full suite). A real chain's time
        never goes back, and qtg compares block times with its own rows' (the ledger's
        adoption never matches a payment to a movement created after the block), so
        the clock is set to now again.
        """
        self.call("evm_revert", snapshot)
        self.call("evm_setTime", int(time.time()))

    def balance(self, address: str) -> int:
        return int(self.call("eth_getBalance", address, "latest"), 16)

    def nonce(self, address: str) -> int:
        return int(self.call("eth_getTransactionCount", address, "latest"), 16)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


TOKEN_BIN = Path(__file__).resolve().parent / "contracts" / "TestToken.bin"


def wait_receipt(node: Anvil, tx_hash: str, timeout: float = 10) -> dict:
    deadline = time.monotonic() + timeout
    while (receipt := node.call("eth_getTransactionReceipt", tx_hash)) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{tx_hash} was not mined")
        time.sleep(0.02)
    return receipt


def deploy_token(node: Anvil, supply: int, deployer: str = ADDRESSES[0]) -> str:
    """Deploy TestToken (constructor(uint256 supply)) from `deployer`; its address."""
    code = "0x" + TOKEN_BIN.read_text().strip() + f"{supply:064x}"
    tx_hash = node.call("eth_sendTransaction", {"from": deployer, "data": code, "gas": "0x200000"})
    receipt = wait_receipt(node, tx_hash)
    assert receipt["status"] == "0x1", receipt
    return receipt["contractAddress"]


def token_balance(node: Anvil, token: str, owner: str) -> int:
    data = "0x70a08231" + owner[2:].lower().rjust(64, "0")
    return int(node.call("eth_call", {"to": token, "data": data}, "latest"), 16)
