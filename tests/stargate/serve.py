"""The docs' Stargate session helper: deploy the test Stargate on two running chains and run
the local LayerZero DVN + executor for the first one's sends (tests/stargate/local.py,
outside pytest).

    .venv/bin/python tests/stargate/serve.py URL_A URL_B [HOLDER]

Deploys a test USDT, an EndpointV2Local and a StargatePoolLocal on both chains (chain ids
read from the nodes, eids 30101 and 30110), peers the pools, mints 100 test USDT to
HOLDER (default: anvil's first development account) on A and liquidity to B's pool,
prints the `export` line for MG_STARGATE_CHAINS, then delivers A's packets on B until
killed.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: evm.anvil, stargate.local

from cctp.serve import Remote
from evm.anvil import ADDRESSES

from stargate import local


def main(argv: list[str]) -> None:
    url_a, url_b = argv[0], argv[1]
    holder = argv[2] if len(argv) > 2 else ADDRESSES[0]
    a, b = Remote(url_a), Remote(url_b)
    da, db = local.set_up(a, b, 100 * 10**6, holder)  # type: ignore[arg-type]
    chain_a, chain_b = int(a.call("eth_chainId"), 16), int(b.call("eth_chainId"), 16)
    da = local.Deployment(chain_a, da.eid, da.token, da.endpoint, da.pool)
    db = local.Deployment(chain_b, db.eid, db.token, db.endpoint, db.pool)
    local.LayerZeroExecutor(a, b, da, db).start()  # type: ignore[arg-type]
    print(
        f"export MG_STARGATE_CHAINS='{local.chains_env(da, db)}' "
        f"USDT_A={da.token} USDT_B={db.token}",
        flush=True,
    )
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
