"""The README's CCTP session helper: deploy the test CCTP on two running chains and serve
attestations for the first one's burns (tests/cctp/local.py, outside pytest).

    .venv/bin/python tests/cctp/serve.py URL_A URL_B PORT [HOLDER]

Deploys TestUSDC, MessageTransmitter and TokenMessenger on both chains (chain
ids read from the nodes, domains 0 and 3), links them, mints 100 test USDC to
HOLDER (default: anvil's first development account) on A, prints the `export`
line for MG_CCTP_CHAINS and MG_CCTP_ATTESTATION_URL, then serves the
attestation API on 127.0.0.1:PORT until killed.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: evm.anvil, cctp.local

from evm.anvil import ADDRESSES, rpc

from cctp import local


class Remote:
    """A running chain node by URL (what the harness calls `Anvil`)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, *params):
        return rpc(self.url, method, *params)


def main(argv: list[str]) -> None:
    url_a, url_b, port = argv[0], argv[1], int(argv[2])
    holder = argv[3] if len(argv) > 3 else ADDRESSES[0]
    a, b = Remote(url_a), Remote(url_b)
    da, db = local.set_up(a, b, 100 * 10**6, holder)  # type: ignore[arg-type]
    chain_a, chain_b = int(a.call("eth_chainId"), 16), int(b.call("eth_chainId"), 16)
    da = local.Deployment(chain_a, da.domain, da.usdc, da.transmitter, da.messenger)
    db = local.Deployment(chain_b, db.domain, db.usdc, db.transmitter, db.messenger)
    service = local.AttestationService(a, da).start(port)  # type: ignore[arg-type]
    print(
        f"export MG_CCTP_CHAINS='{local.chains_env(da, db)}' "
        f"MG_CCTP_ATTESTATION_URL={service.url} USDC_A={da.usdc} USDC_B={db.usdc}",
        flush=True,
    )
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
