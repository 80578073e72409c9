"""Done-when of issue 28 (CCTP half) under a real `bin/qtg-runtime`, two anvil chains
and a local attestation service speaking Circle's API shape:

- `cctp.usdc_bridge` (burn → attestation → mint → mint status) moves exactly N
  test USDC from chain A to chain B: A's holder is N poorer, B's recipient N
  richer, one MessageSent on A, usedNonces set on B;
- the attestation service slower than the request timeout, answering "pending",
  down (503) or gone (connection refused) for a while: the
  movement waits and completes once it answers;
- kill -9 at each step (before and after the burn's broadcast, while the
  attestation is pending, before and after the mint's broadcast): after a restart
  the movement completes with one burn and one mint;
- a mint someone else relayed first is recognised from usedNonces: no second mint.
"""

from __future__ import annotations

import pytest
from evm.anvil import ADDRESSES, wait_receipt
from runtime.rt_procs import all_completed, query, wait_until

from cctp.flow import RECOVER_FAST, launch, nodes, seed
from cctp.local import (
    DOMAIN_A,
    AttestationService,
    burns,
    call,
    set_up,
    sign_message,
    usdc_balance,
)
from qtg.domain.cctp import receive_message_data, source_and_nonce

pytestmark = pytest.mark.slow

USDC = 10**6
HOLDER, RECIPIENT = ADDRESSES[0], ADDRESSES[1]


@pytest.fixture
def world(chains):
    a, b = chains
    da, db = set_up(a, b, 100 * USDC)
    api = AttestationService(a, da).start()
    yield a, b, da, db, api
    api.stop()


def _moved_once(world, amount: int) -> None:
    """Judged from the chains: A burned `amount` once, B minted it once."""
    a, b, da, db, _ = world
    assert usdc_balance(a, da, HOLDER) == 100 * USDC - amount
    assert usdc_balance(b, db, RECIPIENT) == amount
    assert burns(a, da) == 1
    assert call(b, db.transmitter, "usedNonces(bytes32)", source_and_nonce(DOMAIN_A, 0)[2:]) == 1


def test_the_bridge_moves_exactly_n_usdc_from_a_to_b(world, dsn, procs) -> None:
    a, b, da, db, api = world
    api.slow_for, api.delay = 2, 3.0  # slower than MG_CCTP_ATTESTATION_TIMEOUT_SECONDS=2 …
    api.pending_for = 3  # … then Circle says pending_confirmations a few times
    launch(procs, dsn, a, b, da, db, api.url).wait_ready()
    ids = seed(dsn, RECIPIENT, ["12.5"])
    wait_until(lambda: all_completed(dsn, ids), 60, "the cctp movement to complete")
    _moved_once(world, 12_500_000)
    assert api.slow_for == 0 and api.pending_for == 0  # it waited through both
    assert api.signed >= 1
    assert all(p.startswith(f"/v2/messages/{DOMAIN_A}?transactionHash=0x") for p in api.requests)
    n = nodes(dsn)
    assert {k: v[0] for k, v in n.items()} == dict.fromkeys(
        ("burn", "attestation", "mint", "mint_status"), "COMPLETED"
    )
    burn_refs, status_refs = n["burn"][2], n["mint_status"][2]
    receipt = a.call("eth_getTransactionReceipt", burn_refs["tx_hash"])
    assert receipt["status"] == "0x1" and receipt["to"].lower() == da.messenger
    [(artifacts,)] = query(
        dsn, "SELECT artifacts FROM movement_request_nodes WHERE node_key = 'mint_status'"
    )
    assert artifacts["minted"] == "12500000" and artifacts["token"] == db.usdc
    mint = b.call("eth_getTransactionReceipt", status_refs["mint_tx_hash"])
    assert mint["status"] == "0x1" and mint["to"].lower() == db.transmitter
    # approve + burn on A, receiveMessage on B: every reservation consumed
    assert query(dsn, "SELECT DISTINCT state FROM evm_nonce_reservations") == [("consumed",)]


def _observed(dsn: str) -> int:
    [(count,)] = query(
        dsn, "SELECT observe_count FROM movement_request_nodes WHERE node_key = 'attestation'"
    )
    return count


def test_an_attestation_outage_and_a_kill_while_waiting(world, dsn, procs) -> None:
    a, b, da, db, api = world
    api.down = True  # 503 for every request
    doomed = launch(procs, dsn, a, b, da, db, api.url)
    doomed.wait_ready()
    ids = seed(dsn, RECIPIENT, ["3"], batch="outage")
    wait_until(lambda: len(api.requests) >= 3, 30, "the runtime to poll the down API")
    assert nodes(dsn)["attestation"][0] != "COMPLETED"
    assert usdc_balance(b, db, RECIPIENT) == 0
    doomed.kill()  # kill -9 while the attestation is outstanding
    api.stop()  # and the API is gone altogether (connection refused) for a while
    api.down = False
    restarted = launch(procs, dsn, a, b, da, db, api.url, **RECOVER_FAST)
    restarted.wait_ready()
    seen = _observed(dsn)
    wait_until(lambda: _observed(dsn) >= seen + 3, 30, "observations against the refused API")
    assert nodes(dsn)["attestation"][0] != "COMPLETED"  # refused is pending, never failed
    assert usdc_balance(b, db, RECIPIENT) == 0
    api.start()  # back, on a new port: restart the runtime pointing at it
    restarted.kill()
    launch(procs, dsn, a, b, da, db, api.url, **RECOVER_FAST).wait_ready()
    wait_until(lambda: all_completed(dsn, ids), 60, "the movement to complete after the outage")
    _moved_once(world, 3 * USDC)


@pytest.mark.parametrize(
    "crash",
    [
        "cctp_burn.before_broadcast",
        "cctp_burn.after_broadcast",
        "cctp_mint.before_broadcast",
        "cctp_mint.after_broadcast",
    ],
)
def test_kill_9_at_each_step_moves_once(world, dsn, procs, crash) -> None:
    a, b, da, db, api = world
    doomed = launch(procs, dsn, a, b, da, db, api.url, QTG_TEST_CRASH_AT=crash)
    doomed.wait_ready()
    ids = seed(dsn, RECIPIENT, ["7"], batch="kill")
    assert doomed.wait_exit(60) == -9
    step = crash.split(".")[0].removeprefix("cctp_")
    assert nodes(dsn)[step][0] == "SUBMITTING"
    launch(procs, dsn, a, b, da, db, api.url, **RECOVER_FAST).wait_ready()
    wait_until(lambda: all_completed(dsn, ids), 90, f"recovery after a kill at {crash}")
    _moved_once(world, 7 * USDC)
    # the signed bytes were kept before the broadcast: recovery sends those very bytes
    # (the chain rule: never a new attempt while they may land), so attempt 1 lands
    assert nodes(dsn)[step][1] == 1


def test_a_mint_relayed_by_someone_else_first_is_not_minted_again(world, dsn, procs) -> None:
    a, b, da, db, api = world
    doomed = launch(
        procs, dsn, a, b, da, db, api.url, QTG_TEST_CRASH_AT="cctp_mint.before_broadcast"
    )
    doomed.wait_ready()
    ids = seed(dsn, RECIPIENT, ["5"], batch="relay")
    assert doomed.wait_exit(60) == -9
    refs = nodes(dsn)["attestation"][2]
    # a third party (Circle's relayers do this) delivers the message first
    tx = b.call(
        "eth_sendTransaction",
        {
            "from": ADDRESSES[1],  # not qtg's signer
            "to": db.transmitter,
            "data": receive_message_data(refs["message"], sign_message(refs["message"])),
            "gas": "0x7a120",
        },
    )
    assert wait_receipt(b, tx)["status"] == "0x1"
    launch(procs, dsn, a, b, da, db, api.url, **RECOVER_FAST).wait_ready()
    wait_until(lambda: all_completed(dsn, ids), 60, "recovery to see the relayed mint")
    _moved_once(world, 5 * USDC)
    n = nodes(dsn)
    assert n["mint"][1] == 1  # no new attempt: the chain says minted
    assert n["mint_status"][2]["mint_tx_hash"] == tx  # found by its MessageReceived log
