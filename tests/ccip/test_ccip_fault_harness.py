"""The chain fault harness (issue 24 item 9) for CCIP sends on Chainlink Local: the
machinery of tests/evm/harness.py (FaultProxy in front of anvil, the mempool peer that
drops our pending transactions and gossips their bytes back, interval mining, the
outage window) under `ccip_send` → `ccip_delivery` movements run by real runtimes, one
of them killed -9 at a crash point of the CCIP executor.

The verdict, from the chain, money first: the receiver holds exactly the sum of the
COMPLETED movements' intents; the router executed exactly one ccipSend per COMPLETED
movement, that movement's one successful send intent (its bytes or a replacement of
them); every other intent's transaction never landed or reverted; nothing of ours is
left in the mempool. Then liveness: every movement COMPLETED within the bound.

CI runs two seeded runs (one per crash point); the soak (QTG_FAULT_SOAK=1, see
tests/evm/test_fault_harness.py) runs more movements, harsher read faults and eight
seeds alternating the crash points.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from decimal import Decimal

import pytest
from evm.anvil import ADDRESSES, CHAIN_ID, token_balance
from evm.harness import (
    BASE_SEED,
    BOUND_SECONDS,
    ENV,
    SOAK,
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

from ccip.flow import intents, launch, seed
from ccip.local import set_up
from qtg.domain.ccip import MESSAGE_EXECUTED

pytestmark = pytest.mark.slow

WEI = 10**18
#: movements per run (each at most 0.25 CCIP-BnM: three drips cover the soak's)
MOVEMENTS = 10 if SOAK else 6


def run_ccip_harness(anvil, dsn: str, procs: list, run_seed: int, *, crash_at: str) -> None:
    rng = random.Random(run_seed)
    local = set_up(anvil, drips=3)
    held = token_balance(anvil, local.bnm, ADDRESSES[0])
    proxies = proxies_for(anvil, rng, 1)
    amounts = [str(Decimal(rng.randint(1, 250)) / 1000) for _ in range(MOVEMENTS)]
    peer = MempoolPeer(anvil.url, proxies, random.Random(rng.randrange(2**32)))
    env = {**ENV, "MG_EVM_RPC_URLS": f"{CHAIN_ID}={url_list(proxies)}"}
    started = time.monotonic()
    try:
        with interval_mining(anvil):
            # the first runtime dies (kill -9) at the crash point of its first send
            doomed = launch(procs, dsn, anvil, local, QTG_TEST_CRASH_AT=crash_at, **env)
            doomed.wait_ready()
            ids = seed(dsn, local, amounts, batch=f"harness-{run_seed}")
            assert doomed.wait_exit(60) == -9, doomed.log()
            # sends complete within seconds: the peer and the outage start before the
            # survivors do, so they meet the recovery and the first sends
            peer.start()
            start_outage(rng, proxies)
            launch(procs, dsn, anvil, local, **env).wait_ready()
            launch(procs, dsn, anvil, local, **env).wait_ready()  # two on one signer
            states = wait_until(
                lambda: settled(dsn, ids),
                BOUND_SECONDS,
                f"every ccip movement to settle (seed {run_seed})",
            )
            elapsed = time.monotonic() - started
            wait_until(lambda: pool_drained(anvil), 30, "nothing of ours left in the mempool")
    finally:
        peer.stop()
        for proxy in proxies:
            proxy.close()
    why = query(
        dsn,
        "SELECT request_id::text, node_key, node_state, error_code, error_detail"
        " FROM movement_request_nodes WHERE request_id = ANY(%s::uuid[])"
        " AND node_state <> 'COMPLETED'",
        (ids,),
    )
    rows = intents(dsn)
    counts = fault_counts(proxies)
    context = (
        f"seed {run_seed}, crash {crash_at}, {elapsed:.0f} s, faults {counts},"
        f" peer dropped {peer.dropped} regossiped {peer.regossiped},"
        f" intents {[(r[0], r[3]) for r in rows]}: {why}"
    )
    # judged by the chain. Money first: the receiver holds exactly the COMPLETED movements'
    # intents, the router executed one ccipSend per COMPLETED movement, and no other
    # attempt's bytes (or their replacements) landed: a movement that is not COMPLETED
    # moved nothing. Then liveness: every movement COMPLETED within the bound.
    completed = [rid for rid in ids if states[rid] == "COMPLETED"]
    want = sum(
        int(Decimal(a) * WEI) for rid, a in zip(ids, amounts, strict=True) if rid in completed
    )
    got = token_balance(anvil, local.bnm, local.receiver)
    assert got == want, f"the receiver holds {got}, COMPLETED intents sum to {want}; {context}"
    executed = anvil.call(
        "eth_getLogs", {"address": local.router, "topics": [MESSAGE_EXECUTED], "fromBlock": "0x0"}
    )
    assert len(executed) == len(completed), f"{len(executed)} ccipSends executed; {context}"
    # each COMPLETED movement's one successful intent is one executed ccipSend: its kept
    # bytes or a fee-bumped replacement of them at its nonce (matched by transaction: the
    # local router's message id hashes the message alone, so equal amounts share one)
    attempt_of = {
        tx_hash: (node, attempt)
        for tx_hash, node, attempt in query(
            dsn, "SELECT tx_hash, request_node_id, attempt_no FROM evm_signed_transactions"
        )
    }
    succeeded = {
        (node, attempt): message_id
        for node, attempt, message_id in query(
            dsn,
            "SELECT request_node_id::text, attempt_no, message_id FROM ccip_send_intents"
            " WHERE state = 'success'",
        )
    }
    assert len(succeeded) == len(completed), context
    by_attempt = Counter(attempt_of.get(log["transactionHash"].lower()) for log in executed)
    assert set(by_attempt) == set(succeeded) and set(by_attempt.values()) <= {1}, (
        f"{by_attempt}; {context}"
    )
    for log in executed:  # and its message is the one the intent recorded
        message_id = succeeded[attempt_of[log["transactionHash"].lower()]]
        assert log["data"][2:66] == message_id[2:], context
    others = query(
        dsn,
        "SELECT s.tx_hash FROM ccip_send_intents i JOIN evm_signed_transactions s"
        " ON s.request_node_id = i.request_node_id::text AND s.attempt_no = i.attempt_no"
        " WHERE i.state <> 'success'",
    )
    for (tx_hash,) in others:  # released or reverted: nothing of theirs moved money
        receipt = anvil.call("eth_getTransactionReceipt", tx_hash)
        assert receipt is None or receipt["status"] == "0x0", (
            f"a ccipSend {tx_hash} of an intent that did not succeed landed; {context}"
        )
    assert token_balance(anvil, local.bnm, ADDRESSES[0]) == held - want, context
    assert set(states.values()) == {"COMPLETED"}, f"{states}; {stuck(anvil, dsn)}; {context}"
    assert counts["outage"] > 0 and sum(counts.values()) > counts["outage"], context
    print(context)  # what the run went through (pytest -s, or -rP)


def stuck(anvil, dsn: str) -> list[tuple]:
    """What the chain did with each signed transaction of a send node that did not
    complete (raises and sends, by nonce): for a liveness failure's message."""
    rows = query(
        dsn,
        "SELECT s.nonce, s.kind, s.request_node_id, s.attempt_no, s.tx_hash"
        " FROM evm_signed_transactions s JOIN movement_request_nodes n"
        " ON s.request_node_id LIKE n.id::text || '%%'"
        " WHERE n.node_key = 'send' AND n.node_state <> 'COMPLETED' ORDER BY s.nonce, s.id",
    )
    out = []
    for nonce, kind, node, attempt, tx_hash in rows:
        receipt = anvil.call("eth_getTransactionReceipt", tx_hash)
        status = receipt and (receipt["status"], int(receipt["blockNumber"], 16))
        out.append((nonce, kind, node[-20:], attempt, status))
    return out


CRASH_POINTS = ["before_broadcast", "after_broadcast"]


@pytest.mark.parametrize(
    ("run_seed", "crash_at"),
    [(BASE_SEED + 300 + i, CRASH_POINTS[i % 2]) for i in range(8 if SOAK else 2)],
)
def test_ccip_sends_under_faults_deliver_each_movement_once(anvil, dsn, procs, run_seed, crash_at):
    run_ccip_harness(anvil, dsn, procs, run_seed, crash_at=crash_at)
