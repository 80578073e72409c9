"""Done-when of issue 11 under a real `bin/qtg-runtime` and a real anvil:

- a movement whose node is `evm_transfer`, approved by a second principal, moves
  test ETH; exactly one transaction on chain for the node attempt;
- two runtimes draining 50 transfers from one signer: 50 mined transactions with
  consecutive nonces, no gap, no duplicate.
"""

from __future__ import annotations

import pytest
from runtime.rt_procs import RuntimeProcess, all_completed, query, wait_until

from evm.anvil import ADDRESSES, CHAIN_ID, KEYS, deploy_token, token_balance
from evm.test_transient_and_lanes import launch_runtime
from evm.test_transient_and_lanes import seed as seed_payments

pytestmark = pytest.mark.slow

TEMPLATE = "evm.transfer"
WEI = 10**18


def seed(dsn: str, amounts: list[str], *, token: dict | None = None, batch: str = "a") -> list[str]:
    """The template (once) and one approved movement per amount to ADDRESSES[1]."""
    payments = [(ADDRESSES[1], amount) for amount in amounts]
    return seed_payments(dsn, payments, key=f"{TEMPLATE}.{batch}", token=token)


def launch(procs: list, dsn: str, anvil, **env: str) -> RuntimeProcess:
    return launch_runtime(procs, dsn, anvil.url, **env)


def test_read_lag_and_lost_replies_end_completed_and_pay_once(anvil, dsn, procs) -> None:
    """Issue 24's read lag in a real runtime: lookups of a just-broadcast hash answer null
    for 1.5 s and every broadcast's reply is lost. On main 5 of 5 ended FAILED
    (EVM_NOT_BROADCAST) while all 5 were mined."""
    from evm.lagproxy import LagProxy

    before, sent_before = anvil.balance(ADDRESSES[1]), anvil.nonce(ADDRESSES[0])
    proxy = LagProxy(anvil.url, lag=1.5, lose_send_replies=True)
    try:
        launch(
            procs,
            dsn,
            anvil,
            MG_EVM_RPC_URLS=f"{CHAIN_ID}={proxy.url}",
            MG_EVM_EVIDENCE_ATTENTION_SECONDS="30",
            **RECOVER_FAST,
        ).wait_ready()
        ids = seed(dsn, ["1"] * 5, batch="lag")
        wait_until(lambda: all_completed(dsn, ids), 60, "five lagging transfers to complete")
        assert proxy.lost >= 5 and proxy.nulls >= 1
    finally:
        proxy.close()
    assert anvil.balance(ADDRESSES[1]) - before == 5 * WEI  # 5 movements, 5 payments
    assert anvil.nonce(ADDRESSES[0]) == sent_before + 5


def test_a_movement_moves_eth_with_one_transaction(anvil, dsn, procs) -> None:
    before, sent_before = anvil.balance(ADDRESSES[1]), anvil.nonce(ADDRESSES[0])
    proc = launch(procs, dsn, anvil)
    ready = proc.wait_ready()
    assert "evm_nonce_reaper" in ready["workers"]
    ids = seed(dsn, ["0.25"])
    wait_until(lambda: all_completed(dsn, ids), 30, "the evm movement to complete")
    assert anvil.balance(ADDRESSES[1]) - before == WEI // 4
    assert anvil.nonce(ADDRESSES[0]) == sent_before + 1
    [(tx_hash, state)] = query(dsn, "SELECT tx_hash, state FROM evm_nonce_reservations")
    assert state == "consumed"
    receipt = anvil.call("eth_getTransactionReceipt", tx_hash)
    assert receipt["status"] == "0x1"
    assert receipt["to"].lower() == ADDRESSES[1].lower()
    with proc._cond:  # every line it logged, start-up settings included
        logged = "\n".join(proc.lines)
    assert KEYS[0][2:] not in logged  # the signer's key never reaches the logs


def test_a_movement_moves_an_erc20_with_one_transaction(anvil, dsn, procs) -> None:
    token = deploy_token(anvil, 1_000 * 10**6)
    sent_before = anvil.nonce(ADDRESSES[0])
    launch(procs, dsn, anvil).wait_ready()
    ids = seed(dsn, ["12.5"], token={"token": token, "decimals": 6}, batch="erc20")
    wait_until(lambda: all_completed(dsn, ids), 30, "the erc-20 movement to complete")
    assert token_balance(anvil, token, ADDRESSES[1]) == 12_500_000
    assert token_balance(anvil, token, ADDRESSES[0]) == 1_000 * 10**6 - 12_500_000
    assert anvil.nonce(ADDRESSES[0]) == sent_before + 1


def test_two_runtimes_drain_fifty_transfers_with_consecutive_nonces(anvil, dsn, procs) -> None:
    first = anvil.nonce(ADDRESSES[0])
    for _ in range(2):
        launch(procs, dsn, anvil).wait_ready()
    ids = seed(dsn, ["0.001"] * 50)
    wait_until(lambda: all_completed(dsn, ids), 120, "50 evm movements to complete")
    assert anvil.nonce(ADDRESSES[0]) == first + 50  # 50 mined, none more
    rows = query(dsn, "SELECT nonce, state, tx_hash FROM evm_nonce_reservations ORDER BY nonce")
    assert [r[0] for r in rows] == list(range(first, first + 50))  # no gap, no duplicate
    assert {r[1] for r in rows} == {"consumed"}
    for _, _, tx_hash in rows:
        assert anvil.call("eth_getTransactionByHash", tx_hash)["blockNumber"] is not None
    assert len({r[2] for r in rows}) == 50


def node_row(dsn: str, ids: list[str]) -> tuple:
    [row] = query(
        dsn,
        "SELECT node_state, error_code FROM movement_request_nodes"
        " WHERE request_id = ANY(%s::uuid[])",
        (ids,),
    )
    return row


def request_state(dsn: str, ids: list[str]) -> str:
    [(state,)] = query(
        dsn, "SELECT request_state FROM movement_requests WHERE id = ANY(%s::uuid[])", (ids,)
    )
    return state


RECOVER_FAST = {
    "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS": "0.5",
    "MG_NODE_RECOVERY_INTERVAL_SECONDS": "0.2",
}


def test_kill_after_the_broadcast_before_submitted_recovers_to_completed(anvil, dsn, procs):
    before, sent_before = anvil.balance(ADDRESSES[1]), anvil.nonce(ADDRESSES[0])
    doomed = launch(procs, dsn, anvil, QTG_TEST_CRASH_AT="after_broadcast")
    doomed.wait_ready()
    ids = seed(dsn, ["0.5"], batch="after")
    assert doomed.wait_exit(30) == -9  # it died with the transaction on chain
    assert node_row(dsn, ids)[0] == "SUBMITTING"
    assert anvil.nonce(ADDRESSES[0]) == sent_before + 1
    launch(procs, dsn, anvil, **RECOVER_FAST).wait_ready()
    wait_until(lambda: all_completed(dsn, ids), 30, "recovery to follow the mined transaction")
    assert anvil.nonce(ADDRESSES[0]) == sent_before + 1  # no second transaction
    assert anvil.balance(ADDRESSES[1]) - before == WEI // 2
    assert query(dsn, "SELECT nonce, state FROM evm_nonce_reservations") == [
        (sent_before, "consumed")
    ]


def test_kill_after_the_write_ahead_before_the_broadcast_sends_the_kept_bytes_once(
    anvil, dsn, procs
):
    """Issue 24: the signed bytes were kept before the crash; recovery broadcasts those
    very bytes (the nonce is unconsumed): no gap behind it, no second payment."""
    before, sent_before = anvil.balance(ADDRESSES[1]), anvil.nonce(ADDRESSES[0])
    doomed = launch(procs, dsn, anvil, QTG_TEST_CRASH_AT="before_broadcast")
    doomed.wait_ready()
    ids = seed(dsn, ["0.5"], batch="before")
    assert doomed.wait_exit(30) == -9
    [(nonce, state, tx_hash)] = query(
        dsn, "SELECT nonce, state, tx_hash FROM evm_nonce_reservations"
    )
    assert (nonce, state) == (sent_before, "reserved") and tx_hash is not None
    assert anvil.call("eth_getTransactionByHash", tx_hash) is None
    launch(procs, dsn, anvil, **RECOVER_FAST).wait_ready()
    wait_until(lambda: all_completed(dsn, ids), 30, "recovery to send the kept bytes")
    assert anvil.call("eth_getTransactionReceipt", tx_hash)["status"] == "0x1"
    assert anvil.nonce(ADDRESSES[0]) == sent_before + 1  # one transaction in all
    assert anvil.balance(ADDRESSES[1]) - before == WEI // 2
    assert query(dsn, "SELECT nonce, state FROM evm_nonce_reservations") == [
        (sent_before, "consumed")
    ]
    # the next transfer takes the next nonce: nothing blocks the address
    later = seed(dsn, ["0.1"], batch="later")
    wait_until(lambda: all_completed(dsn, later), 30, "the next transfer to complete")
    assert anvil.nonce(ADDRESSES[0]) == sent_before + 2


def test_the_reaper_leaves_an_unmined_broadcast_alone_and_asks_for_attention(anvil, dsn, procs):
    sent_before = anvil.nonce(ADDRESSES[0])
    anvil.call("evm_setAutomine", False)  # the transaction sits in the mempool
    try:
        launch(
            procs,
            dsn,
            anvil,
            MG_EVM_NONCE_REAPER_INTERVAL_SECONDS="0.2",
            MG_EVM_NONCE_RESERVATION_STALE_SECONDS="0.2",
            MG_EVM_NONCE_ATTENTION_SECONDS="0.5",
        ).wait_ready()
        ids = seed(dsn, ["0.3"], batch="unmined")
        attention = (
            "SELECT payload->>'nonce' FROM movement_events"
            " WHERE request_id = %s::uuid AND event_type = 'request_attention'"
        )
        [(nonce,)] = wait_until(lambda: query(dsn, attention, (ids[0],)), 30, "request_attention")
        assert int(nonce) == sent_before
        assert query(dsn, "SELECT state FROM evm_nonce_reservations") == [("broadcast",)]
        assert anvil.nonce(ADDRESSES[0]) == sent_before  # nothing mined, nothing re-sent
        anvil.call("evm_mine")
        wait_until(lambda: all_completed(dsn, ids), 30, "the mined transfer to complete")
        assert query(dsn, "SELECT state FROM evm_nonce_reservations") == [("consumed",)]
        assert len(query(dsn, attention, (ids[0],))) == 1  # raised once, not every pass
        assert anvil.nonce(ADDRESSES[0]) == sent_before + 1
    finally:
        anvil.call("evm_setAutomine", True)
