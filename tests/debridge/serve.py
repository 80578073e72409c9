"""The docs' deBridge session helper: deploy the test DLN on two running chains, then run the
local taker, messenger and order-status service (tests/debridge/local.py, outside pytest).

    .venv/bin/python tests/debridge/serve.py URL_A URL_B PORT [HOLDER]

Deploys a test USDC and DlnSource on A, a test USDC and DlnDestination on B, mints 100
test USDC to HOLDER (default: anvil's first development account) on A and a float to the
taker on B, prints the `export` line for MG_DEBRIDGE_CHAINS and MG_DEBRIDGE_STATUS_URL,
then fulfils A's orders on B and serves the status API on 127.0.0.1:PORT until killed.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: evm.anvil, debridge.local

from cctp.serve import Remote
from evm.anvil import ADDRESSES

from debridge import local


def main(argv: list[str]) -> None:
    url_a, url_b, port = argv[0], argv[1], int(argv[2])
    holder = argv[3] if len(argv) > 3 else ADDRESSES[0]
    a, b = Remote(url_a), Remote(url_b)
    dep = local.set_up(a, b, 100 * 10**6, holder)  # type: ignore[arg-type]
    chain_a, chain_b = int(a.call("eth_chainId"), 16), int(b.call("eth_chainId"), 16)
    dln = local.LocalDln(a, b, dep).start(port)  # type: ignore[arg-type]
    print(
        f"export MG_DEBRIDGE_CHAINS='{dep.chains_env(chain_a, chain_b)}' "
        f"MG_DEBRIDGE_STATUS_URL={dln.url} USDC_A={dep.token_a} USDC_B={dep.token_b}",
        flush=True,
    )
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
