"""The chain fault harness (tests/evm/harness.py) for Stargate sends: FaultProxy in front
of both chains (dropped and lost sends, 5xx, hangs, lagging lookups, an outage window),
the mempool peer that drops our pending transactions on A and gossips their bytes back,
a block a second on A, under `stargate_send` → `stargate_delivery` movements run by real
runtimes: the first (on direct URLs) killed -9 right after its first send's broadcast,
then two on the faulty URLs recover and finish the rest.

The verdict, from both chains, money first: B's recipient holds exactly the sum of the
COMPLETED movements' intents and B's pool paid one OFTReceived per COMPLETED movement;
A's holder paid exactly that sum, once (A's pool holds it, one PacketSent per COMPLETED
movement); nothing of ours is left in A's mempool. Then liveness: every movement
COMPLETED within the bound.
"""

from __future__ import annotations

import random
import time
from decimal import Decimal

import pytest
from evm.anvil import ADDRESSES
from evm.harness import (
    BASE_SEED,
    BOUND_SECONDS,
    ENV,
    MempoolPeer,
    fault_counts,
    interval_mining,
    pool_drained,
    proxies_for,
    settled,
    start_outage,
    url_list,
)
from runtime.rt_procs import query, wait_until

from stargate.flow import launch, seed
from stargate.local import (
    LayerZeroExecutor,
    deliveries,
    packets,
    set_up,
    usdt_balance,
)

pytestmark = pytest.mark.slow

USDT = 10**6
HOLDER, RECIPIENT = ADDRESSES[0], ADDRESSES[1]
MOVEMENTS = 4


def test_stargate_sends_under_rpc_faults_and_a_kill_pay_once(chains, dsn, procs) -> None:
    a, b = chains
    run_seed = BASE_SEED
    rng = random.Random(run_seed)
    da, db = set_up(a, b, 100 * USDT)
    lz = LayerZeroExecutor(a, b, da, db).start()
    proxies_a, proxies_b = proxies_for(a, rng, 1), proxies_for(b, rng, 1)
    proxies = proxies_a + proxies_b
    amounts = [str(Decimal(rng.randint(1, 5_000_000)) / USDT) for _ in range(MOVEMENTS)]
    peer = MempoolPeer(a.url, proxies_a, random.Random(rng.randrange(2**32)))
    urls = (url_list(proxies_a), url_list(proxies_b))
    started = time.monotonic()
    try:
        with interval_mining(a):
            # the first runtime talks to the chains directly, so it surely reaches its
            # crash point (a faulted first send is ambiguous and stops the signer's lane)
            doomed = launch(
                procs,
                dsn,
                (a.url, b.url),
                da,
                db,
                QTG_TEST_CRASH_AT="stargate_send.after_broadcast",
                **ENV,
            )
            doomed.wait_ready()
            ids = seed(dsn, RECIPIENT, amounts, batch=f"harness-{run_seed}")
            assert doomed.wait_exit(60) == -9, doomed.log()
            peer.start()
            start_outage(rng, proxies)
            launch(procs, dsn, urls, da, db, **ENV).wait_ready()
            launch(procs, dsn, urls, da, db, **ENV).wait_ready()  # two on one signer
            states = wait_until(
                lambda: settled(dsn, ids), BOUND_SECONDS, f"stargate movements (seed {run_seed})"
            )
            elapsed = time.monotonic() - started
            wait_until(lambda: pool_drained(a), 30, "nothing of ours left in A's mempool")
    finally:
        peer.stop()
        lz.stop()
        for proxy in proxies:
            proxy.close()
    why = query(
        dsn,
        "SELECT request_id::text, node_key, node_state, error_code, error_detail"
        " FROM movement_request_nodes WHERE node_state <> 'COMPLETED'",
    )
    counts = fault_counts(proxies)
    context = (
        f"seed {run_seed}, {elapsed:.0f} s, faults {counts}, peer dropped {peer.dropped}"
        f" regossiped {peer.regossiped}: {why}"
    )
    completed = [rid for rid in ids if states[rid] == "COMPLETED"]
    want = sum(
        int(Decimal(x) * USDT) for rid, x in zip(ids, amounts, strict=True) if rid in completed
    )
    # money first, from both chains
    assert usdt_balance(b, db, RECIPIENT) == want, context
    assert deliveries(b, db) == len(completed), context
    assert usdt_balance(a, da, HOLDER) == 100 * USDT - want, context
    assert usdt_balance(a, da, da.pool) == want, context
    assert len(packets(a, da)) == len(completed), context
    # then liveness, and the faults were really met
    assert set(states.values()) == {"COMPLETED"}, f"{states}; {context}"
    assert counts["outage"] > 0 and sum(counts.values()) > counts["outage"], context
    print(context)
