"""Done-when of issue 12 under a real `bin/qtg-runtime`, a real anvil and Chainlink
Local's CCIPLocalSimulator:

- a movement `ccip_send` → `ccip_delivery` completes; its intent carries the tx
  hash and message id; the receiver's balance moved once;
- kill -9 between the intent's commit and the broadcast, and between the
  broadcast and the SUBMITTED commit (QTG_TEST_CRASH_AT, the evm executor's
  crash points): after a restart the intent and the node end where the chain
  says, with one ccipSend at most.
"""

from __future__ import annotations

import pytest
from evm.anvil import ADDRESSES, token_balance
from runtime.rt_procs import all_completed, query, wait_until

from ccip.flow import intents, launch, seed
from ccip.local import ccip_send_count, set_up

pytestmark = pytest.mark.slow

WEI = 10**18
RECOVER_FAST = {
    "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS_CCIP": "0.5",
    "MG_NODE_RECOVERY_INTERVAL_SECONDS": "0.2",
}


def test_a_movement_sends_and_delivers_once_on_the_local_lane(anvil, dsn, procs) -> None:
    local = set_up(anvil)
    held = token_balance(anvil, local.bnm, ADDRESSES[0])
    proc = launch(procs, dsn, anvil, local)
    ready = proc.wait_ready()
    assert "ccip_stranded_reaper" in ready["workers"]
    ids = seed(dsn, local, ["0.25"])
    wait_until(lambda: all_completed(dsn, ids), 60, "the ccip movement to complete")
    [(state, tx_hash, message_id, attempt_no, dest_tx_hash)] = intents(dsn)
    assert (state, attempt_no) == ("success", 1)
    receipt = anvil.call("eth_getTransactionReceipt", tx_hash)
    assert receipt["status"] == "0x1" and receipt["to"].lower() == local.router
    assert message_id is not None and message_id in receipt["logs"][-1]["data"]
    assert dest_tx_hash == tx_hash  # the local router delivers within the send
    assert token_balance(anvil, local.bnm, local.receiver) == WEI // 4  # moved once
    assert token_balance(anvil, local.bnm, ADDRESSES[0]) == held - WEI // 4
    assert ccip_send_count(anvil, local.router) == 1
    [(refs, artifacts)] = query(
        dsn,
        "SELECT provider_refs, artifacts FROM movement_request_nodes WHERE node_key = 'deliver'",
    )
    assert refs["message_id"] == message_id and artifacts["delivery_status"] == "SUCCESS"
    # the approve and the send: two transactions, their reservations consumed
    assert query(dsn, "SELECT DISTINCT state FROM evm_nonce_reservations") == [("consumed",)]


def test_kill_after_the_broadcast_before_submitted_follows_the_chain(anvil, dsn, procs):
    local = set_up(anvil)
    doomed = launch(procs, dsn, anvil, local, QTG_TEST_CRASH_AT="after_broadcast")
    doomed.wait_ready()
    ids = seed(dsn, local, ["0.5"], batch="after")
    assert doomed.wait_exit(60) == -9  # it died with the ccipSend mined
    [(state, tx_hash, message_id, _, _)] = intents(dsn)
    assert (state, message_id) == ("pending", None)  # broadcast was never recorded
    assert anvil.call("eth_getTransactionReceipt", tx_hash)["status"] == "0x1"
    [(node_state,)] = query(
        dsn, "SELECT node_state FROM movement_request_nodes WHERE node_key = 'send'"
    )
    assert node_state == "SUBMITTING"
    launch(procs, dsn, anvil, local, **RECOVER_FAST).wait_ready()
    wait_until(lambda: all_completed(dsn, ids), 60, "recovery to follow the mined ccipSend")
    [(state, tx_hash_after, message_id, attempt_no, _)] = intents(dsn)
    assert (state, tx_hash_after, attempt_no) == ("success", tx_hash, 1)
    assert message_id is not None
    assert ccip_send_count(anvil, local.router) == 1  # no second ccipSend
    assert token_balance(anvil, local.bnm, local.receiver) == WEI // 2


def test_kill_after_the_write_ahead_before_the_broadcast_sends_the_kept_bytes_once(
    anvil, dsn, procs
):
    """Issue 24: the signed ccipSend was kept before the crash, so recovery broadcasts
    those very bytes (the nonce is unconsumed) instead of releasing the nonce and
    starting a new send that could race them."""
    local = set_up(anvil)
    doomed = launch(procs, dsn, anvil, local, QTG_TEST_CRASH_AT="before_broadcast")
    doomed.wait_ready()
    ids = seed(dsn, local, ["0.5"], batch="before")
    assert doomed.wait_exit(60) == -9
    [(state, tx_hash, _, attempt_no, _)] = intents(dsn)
    assert (state, attempt_no) == ("pending", 1)  # committed ahead of the broadcast
    assert anvil.call("eth_getTransactionByHash", tx_hash) is None  # never broadcast
    assert ccip_send_count(anvil, local.router) == 0
    launch(procs, dsn, anvil, local, **RECOVER_FAST).wait_ready()
    wait_until(lambda: all_completed(dsn, ids), 60, "the kept send to complete")
    rows = intents(dsn)
    assert [(r[0], r[3]) for r in rows] == [("success", 1)]  # no second attempt
    assert anvil.call("eth_getTransactionReceipt", tx_hash)["status"] == "0x1"  # those bytes
    assert ccip_send_count(anvil, local.router) == 1  # one ccipSend in all
    assert token_balance(anvil, local.bnm, local.receiver) == WEI // 2


def test_a_send_whose_reply_is_lost_behind_a_lagging_rpc_is_sent_once(anvil, dsn, procs):
    """Issue 24, CCIP by another door: the broadcast reached the chain but its reply was
    lost (RpcUnavailable), and lookups lag 1.5 s. On main the node went UNKNOWN, recovery
    found nothing in one lookup, released the nonce and started a second ccipSend."""
    from evm.anvil import CHAIN_ID
    from evm.lagproxy import LagProxy

    local = set_up(anvil)
    proxy = LagProxy(anvil.url, lag=1.5, lose_send_replies=True)
    try:
        launch(
            procs,
            dsn,
            anvil,
            local,
            MG_EVM_RPC_URLS=f"{CHAIN_ID}={proxy.url}",
            MG_EVM_EVIDENCE_ATTENTION_SECONDS="30",
            **RECOVER_FAST,
        ).wait_ready()
        ids = seed(dsn, local, ["0.5"], batch="lost")
        wait_until(lambda: all_completed(dsn, ids), 60, "the send to complete")
        assert proxy.lost >= 1 and proxy.nulls >= 1  # both faults were really served
    finally:
        proxy.close()
    assert [(r[0], r[3]) for r in intents(dsn)] == [("success", 1)]  # one attempt
    assert ccip_send_count(anvil, local.router) == 1  # one ccipSend in all
    assert token_balance(anvil, local.bnm, local.receiver) == WEI // 2


def test_a_dropped_send_and_its_allowance_raise_are_sent_again_once(anvil, dsn, procs):
    """Issue 24: a mempool drops the allowance raise and the ccipSend; qtg sends the kept
    bytes again (never a new nonce, never FAILED) and the message is delivered once."""
    local = set_up(anvil)
    anvil.call("evm_setAutomine", False)
    try:
        launch(procs, dsn, anvil, local).wait_ready()
        ids = seed(dsn, local, ["0.5"], batch="dropped")
        signed = "SELECT tx_hash FROM evm_signed_transactions ORDER BY nonce"
        hashes = wait_until(
            lambda: (
                rows
                if len(rows := query(dsn, signed)) == 2
                and all(anvil.call("eth_getTransactionByHash", h) for (h,) in rows)
                else None
            ),
            30,
            "the raise and the send in the mempool",
        )
        # anvil answers a drop with the dropped hash, and takes the send (next nonce) out
        # with the raise it depends on. (Asking the pool afterwards would race the
        # runtime, which may already have sent the kept bytes again.)
        dropped = [anvil.call("anvil_dropTransaction", h) for (h,) in hashes]
        assert dropped[0] == hashes[0][0]
        anvil.call("evm_setAutomine", True)  # what comes back now is mined at once
        anvil.call("evm_mine")  # and whatever qtg sent again before that line
        wait_until(lambda: all_completed(dsn, ids), 60, "the re-sent send to be delivered")
    finally:
        anvil.call("evm_setAutomine", True)
    assert [(r[0], r[3]) for r in intents(dsn)] == [("success", 1)]
    assert ccip_send_count(anvil, local.router) == 1
    assert token_balance(anvil, local.bnm, local.receiver) == WEI // 2
    for (tx_hash,) in hashes:  # the very bytes that were dropped
        assert anvil.call("eth_getTransactionReceipt", tx_hash)["status"] == "0x1"


def test_sends_prepared_side_by_side_each_raise_their_own_allowance(anvil, dsn, procs) -> None:
    """One batch claims three sends from one signer: each raises the router's allowance by
    its own amount, so none spends another's (a set-not-raised approve would revert two)."""
    local = set_up(anvil)
    launch(procs, dsn, anvil, local).wait_ready()
    ids = seed(dsn, local, ["0.2", "0.2", "0.2"], batch="side")
    wait_until(lambda: all_completed(dsn, ids), 90, "three ccip movements to complete")
    rows = intents(dsn)
    assert sorted(r[0] for r in rows if r[0] == "success") == ["success"] * 3
    # under load an attempt may lose its nonce before its bytes leave (taken back, then
    # released): allowed only if that attempt's send never reached the chain
    others = [r for r in rows if r[0] != "success"]
    assert all(r[0] == "released" for r in others), others
    for _, tx_hash, *_ in others:
        assert tx_hash is None or anvil.call("eth_getTransactionReceipt", tx_hash) is None
    assert ccip_send_count(anvil, local.router) == 3
    assert token_balance(anvil, local.bnm, local.receiver) == 3 * WEI // 5


def allowance_slot(anvil, token: str, owner: str, spender: str) -> str:
    """The storage slot of token.allowance(owner, spender), found by probing the usual
    mapping positions (writing a marker and reading allowance() back)."""
    from eth_utils import keccak

    from qtg.domain.evm import erc20_allowance_data

    def allowance() -> int:
        return int(
            anvil.call(
                "eth_call", {"to": token, "data": erc20_allowance_data(owner, spender)}, "latest"
            ),
            16,
        )

    for position in range(12):
        inner = keccak(bytes.fromhex(owner[2:].lower().rjust(64, "0") + f"{position:064x}"))
        slot = "0x" + keccak(bytes.fromhex(spender[2:].lower().rjust(64, "0")) + inner).hex()
        before = anvil.call("eth_getStorageAt", token, slot, "latest")
        anvil.call("anvil_setStorageAt", token, slot, "0x" + f"{12345:064x}")
        if allowance() == 12345:
            anvil.call("anvil_setStorageAt", token, slot, "0x" + before[2:].rjust(64, "0"))
            return slot
        anvil.call("anvil_setStorageAt", token, slot, "0x" + before[2:].rjust(64, "0"))
    raise AssertionError("allowance() is in none of the probed slots")


def test_a_raise_estimated_on_an_unspent_allowance_still_lands_once_it_is_spent(anvil, dsn, procs):
    """Found by the fault harness: a raise estimated while an earlier send's allowance is
    unspent (a cheap non-zero write) was mined after that send spent it to zero (a fresh
    slot, ~17,100 gas more): out of gas, and its ccipSend reverted (FAILED, no money
    moved, but a movement lost to timing). The raise carries headroom for it now."""
    from qtg.domain.evm import erc20_allowance_data

    local = set_up(anvil)
    slot = allowance_slot(anvil, local.bnm, ADDRESSES[0], local.router)
    word = "0x" + f"{10**17:064x}"
    anvil.call("anvil_setStorageAt", local.bnm, slot, word)  # an earlier send's, unspent
    anvil.call("evm_setAutomine", False)
    try:
        launch(procs, dsn, anvil, local).wait_ready()
        ids = seed(dsn, local, ["0.5"], batch="headroom")
        signed = "SELECT tx_hash FROM evm_signed_transactions ORDER BY nonce"
        wait_until(
            lambda: (
                len(rows := query(dsn, signed)) == 2
                and all(anvil.call("eth_getTransactionByHash", h) for (h,) in rows)
            ),
            30,
            "the raise and the send in the mempool",
        )
        # the earlier send is mined first and spends its allowance to zero
        anvil.call("anvil_setStorageAt", local.bnm, slot, "0x" + "0" * 64)
        data = erc20_allowance_data(ADDRESSES[0], local.router)
        assert int(anvil.call("eth_call", {"to": local.bnm, "data": data}, "latest"), 16) == 0
        anvil.call("evm_setAutomine", True)
        anvil.call("evm_mine")
        wait_until(lambda: all_completed(dsn, ids), 60, "the send to complete")
    finally:
        anvil.call("evm_setAutomine", True)
    assert [(r[0], r[3]) for r in intents(dsn)] == [("success", 1)]
    assert ccip_send_count(anvil, local.router) == 1
    assert token_balance(anvil, local.bnm, local.receiver) == WEI // 2
