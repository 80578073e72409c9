"""deBridge orders under the chain fault harness (tests/evm/harness.py): seeded RPC faults
on both chains' URLs (lost and dropped sends, lost replies, 5xx, hangs, read lag), a
mempool peer dropping and re-gossiping the source's pending transactions, blocks a second
on the source, an outage window on every URL, a kill -9 right after the first
createOrder's broadcast and two runtimes on one signer afterwards.

Judged by both chains: every movement COMPLETED within the bound; the source created one
order per movement and its holder paid exactly the give amounts once (no other attempt's
bytes landed); the receiver on the destination holds exactly the take amounts, each paid
by one fulfilment.
"""

from __future__ import annotations

import random
import time

import pytest
from evm.anvil import ADDRESSES
from evm.harness import (
    BOUND_SECONDS,
    ENV,
    MempoolPeer,
    interval_mining,
    pool_drained,
    proxies_for,
    settled,
    start_outage,
    url_list,
)
from runtime.rt_procs import query, wait_until

from debridge.flow import MARGIN_BPS, launch, seed
from debridge.local import LocalDln, balance, created_orders, set_up

pytestmark = pytest.mark.slow

USDC = 10**6
HOLDER, RECEIVER = ADDRESSES[0], ADDRESSES[1]
SEED = 46


def test_orders_under_rpc_faults_give_once_and_pay_once(chains, dsn, procs) -> None:
    a, b = chains
    rng = random.Random(SEED)
    dep = set_up(a, b, 100 * USDC)
    dln = LocalDln(a, b, dep).start()
    amounts = [str(rng.randint(1, 9)) for _ in range(4)]
    proxies_a, proxies_b = proxies_for(a, rng, 1), proxies_for(b, rng, 1)
    peer = MempoolPeer(a.url, proxies_a, random.Random(rng.randrange(2**32)))
    urls = (url_list(proxies_a), url_list(proxies_b))
    started = time.monotonic()
    try:
        with interval_mining(a):
            doomed = launch(
                procs, dsn, urls, dep, dln.url,
                QTG_TEST_CRASH_AT="debridge_send.after_broadcast", **ENV,
            )  # fmt: skip
            doomed.wait_ready()
            ids = seed(dsn, RECEIVER, amounts, batch="faults")
            assert doomed.wait_exit(60) == -9, doomed.log()
            peer.start()
            start_outage(rng, [*proxies_a, *proxies_b])
            launch(procs, dsn, urls, dep, dln.url, **ENV).wait_ready()
            launch(procs, dsn, urls, dep, dln.url, **ENV).wait_ready()  # two on one signer
            states = wait_until(lambda: settled(dsn, ids), BOUND_SECONDS, "every order to settle")
            elapsed = time.monotonic() - started
            wait_until(lambda: pool_drained(a), 30, "nothing of ours left in A's mempool")
    finally:
        peer.stop()
        for proxy in (*proxies_a, *proxies_b):
            proxy.close()
        dln.stop()
    why = query(
        dsn,
        "SELECT node_key, node_state, error_code, error_detail FROM movement_request_nodes"
        " WHERE node_state <> 'COMPLETED'",
    )
    context = f"{elapsed:.0f} s, peer dropped {peer.dropped}, taker errors {dln.errors}: {why}"
    assert set(states.values()) == {"COMPLETED"}, context
    takes = [int(x) * USDC for x in amounts]
    gives = [t + -(-t * MARGIN_BPS // 10_000) for t in takes]
    assert len(created_orders(a, dep)) == len(amounts), context  # one order per movement
    assert balance(a, dep.token_a, HOLDER) == 100 * USDC - sum(gives), context
    assert balance(b, dep.token_b, RECEIVER) == sum(takes), context
    assert len(dln.fulfilled) == len(amounts), context
    assert sum(p.counts.get("outage", 0) for p in (*proxies_a, *proxies_b)) > 0, context
