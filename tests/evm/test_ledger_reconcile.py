"""Issue 43 item 2 under real runtimes, a real anvil and a real PostgreSQL: the ledger
reconciles itself with the chain before it signs.

- The database is restored to a point before payments it made (a copy taken while the
  movements were approved but unpaid: `CREATE DATABASE … TEMPLATE`, a restore of that
  moment's backup). A runtime on the restored database finds the chain ahead of its
  ledger: it holds the signer and pages critical, reads the unknown transactions from
  their blocks, adopts each as its node's payment, and the nodes end COMPLETED from those
  transactions — nothing signed again; every destination paid exactly once, judged by
  anvil's balances and the signer's count.
- A transaction of the key that is no node's payment (a second system using the key):
  the signer stays held and pages critical, nothing is signed, until a person clears it.
"""

from __future__ import annotations

import signal
import uuid
from decimal import Decimal

import psycopg
import pytest
import trio
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from runtime.rt_procs import all_completed, query, wait_until

from evm.anvil import ADDRESSES, wait_receipt
from evm.test_transient_and_lanes import fresh_address, launch_runtime, seed
from qtg.db import Database
from qtg.services import evm_signer_holds

pytestmark = pytest.mark.slow

WEI = 10**18


def restore_copy(dsn: str) -> str:
    """A copy of the database as it is now (nothing may be connected to it): the backup
    that is restored later. Its DSN."""
    from conftest import with_dbname

    name = f"restored_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(with_dbname(dsn, "postgres"), autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(conninfo_to_dict(dsn)["dbname"])
            )
        )
    return with_dbname(dsn, name)


def drop(dsn: str) -> None:
    from conftest import drop_database, with_dbname

    drop_database(with_dbname(dsn, "postgres"), conninfo_to_dict(dsn)["dbname"])


def stop(proc) -> None:
    proc.send(signal.SIGTERM)
    proc.wait_exit(30)


#: quick passes; the RPC's own timeouts (not the fault tests' 1 s): reading blocks under a
#: loaded machine's anvil must not time out into a retry of the whole reading
QUICK = {
    "MG_NODE_DISPATCH_INTERVAL_SECONDS": "0.2",
    "MG_NODE_TRANSIENT_RETRY_MAX_SECONDS": "1",
    "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS": "0.5",
    "MG_NODE_RECOVERY_INTERVAL_SECONDS": "0.2",
}


def launch(procs: list, dsn: str, url: str):
    return launch_runtime(procs, dsn, url, **QUICK)


def wait_completed(dsn: str, ids: list[str], timeout: float, what: str) -> None:
    """wait_until all_completed; a timeout names the nodes' states and errors."""
    try:
        wait_until(lambda: all_completed(dsn, ids), timeout, what)
    except AssertionError as exc:
        nodes = query(
            dsn,
            "SELECT node_state, error_code, error_detail FROM movement_request_nodes"
            " WHERE request_id = ANY(%s::uuid[])",
            (ids,),
        )
        raise AssertionError(f"{exc}: {nodes}") from None


def clear(dsn: str, hold_id: int, actor: str) -> bool:
    """An operator's half of the four-eyes clear (the API's service); True: cleared."""

    async def run() -> bool:
        async with Database(dsn, min_size=1, max_size=1) as db:
            _, cleared = await evm_signer_holds.request_clear(
                db, hold_id, actor=actor, evidence="the key was used by the old payout script"
            )
        return cleared

    return trio.run(run)


def notifications(dsn: str, kind: str) -> list[tuple]:
    return query(
        dsn,
        "SELECT severity, resolved_at IS NOT NULL FROM notifications WHERE kind = %s ORDER BY id",
        (kind,),
    )


def test_a_restore_to_before_payments_adopts_them_and_pays_nobody_twice(anvil, dsn, procs):
    # a first payment: the ledger knows the signer
    first = launch(procs, dsn, anvil.url)
    first.wait_ready()
    early = fresh_address()
    ids = seed(dsn, [(early, "1")], key="ledger.early")
    wait_until(lambda: all_completed(dsn, ids), 30, "the first payment")
    stop(first)
    # approved, unpaid: the backup is taken here
    lost = [(fresh_address(), f"0.{i + 1}") for i in range(4)]
    lost_ids = seed(dsn, lost, key="ledger.lost")
    restored = restore_copy(dsn)
    try:
        second = launch(procs, dsn, anvil.url)
        second.wait_ready()
        wait_until(lambda: all_completed(dsn, lost_ids), 60, "the payments the restore loses")
        stop(second)
        paid_count = anvil.nonce(ADDRESSES[0])
        # the restored database has no record of those four payments
        assert query(restored, "SELECT count(*) FROM evm_nonce_reservations")[0][0] == 1
        third = launch(procs, restored, anvil.url)
        third.wait_ready()
        wait_completed(restored, lost_ids, 120, "the adopted nodes to complete")
        # nothing was signed again: the chain holds the same transactions
        assert anvil.nonce(ADDRESSES[0]) == paid_count
        for destination, amount in [(early, "1"), *lost]:
            assert anvil.balance(destination) == int(Decimal(amount) * WEI)
        adopted = query(
            restored,
            "SELECT disposition, request_node_id, tx_hash FROM evm_ledger_adoptions ORDER BY nonce",
        )
        assert [a[0] for a in adopted] == ["adopted"] * 4
        nodes = query(
            restored,
            "SELECT id::text, provider_refs->>'tx_hash' FROM movement_request_nodes"
            " WHERE request_id = ANY(%s::uuid[])",
            (lost_ids,),
        )
        assert {n[0]: n[1] for n in nodes} == {a[1]: a[2] for a in adopted}
        for _, _, tx_hash in adopted:  # each one's receipt is the chain's own
            assert wait_receipt(anvil, tx_hash)["status"] == "0x1"
        # held and paged critical while it reconciled; the hold ended with every
        # transaction adopted; the lost history stays paged for a person
        [(reason, cleared_by)] = query(restored, "SELECT reason, cleared_by FROM evm_signer_holds")
        assert (reason, cleared_by) == ("LEDGER_BEHIND_CHAIN", "evm_ledger_reconcile")
        assert notifications(restored, "evm_signer_hold") == [("critical", True)]
        assert notifications(restored, "evm_ledger_behind_chain") == [("critical", False)]
        # and the signer signs again, at the next nonce
        later = fresh_address()
        later_ids = seed(restored, [(later, "2")], key="ledger.later")
        wait_until(lambda: all_completed(restored, later_ids), 30, "a payment after adoption")
        assert anvil.balance(later) == 2 * WEI
        assert anvil.nonce(ADDRESSES[0]) == paid_count + 1
    finally:
        for p in procs:
            p.kill()
        drop(restored)


def test_a_transaction_of_the_key_that_is_no_payment_holds_the_signer(anvil, dsn, procs):
    proc = launch(procs, dsn, anvil.url)
    proc.wait_ready()
    ids = seed(dsn, [(fresh_address(), "1")], key="ledger.known")
    wait_until(lambda: all_completed(dsn, ids), 30, "a first payment")
    # a second system uses the key
    foreign = fresh_address()
    wait_receipt(
        anvil,
        anvil.call("eth_sendTransaction", {"from": ADDRESSES[0], "to": foreign, "value": hex(WEI)}),
    )
    count = anvil.nonce(ADDRESSES[0])
    waiting = fresh_address()
    held_ids = seed(dsn, [(waiting, "1")], key="ledger.held")
    wait_until(
        lambda: query(dsn, "SELECT count(*) FROM evm_ledger_adoptions")[0][0] == 1,
        30,
        "the foreign transaction to be read",
    )
    [(disposition,)] = query(dsn, "SELECT disposition FROM evm_ledger_adoptions")
    assert disposition == "unmatched"
    [(hold_id, reason)] = query(
        dsn, "SELECT id, reason FROM evm_signer_holds WHERE cleared_at IS NULL"
    )
    assert reason == "LEDGER_BEHIND_CHAIN"
    assert notifications(dsn, "evm_signer_hold") == [("critical", False)]

    # while held: nothing signed, the node waits (READY), never FAILED
    def held_node() -> tuple:
        [row] = query(
            dsn,
            "SELECT node_state, error_code FROM movement_request_nodes"
            " WHERE request_id = ANY(%s::uuid[])",
            (held_ids,),
        )
        return row

    wait_until(lambda: held_node()[1] is not None, 30, "the held node to wait")
    state, code = held_node()
    assert state == "READY" and code in ("EVM_SIGNER_HELD", "EVM_LEDGER_RECONCILING")
    assert anvil.nonce(ADDRESSES[0]) == count and anvil.balance(waiting) == 0
    # two operators clear the hold (four-eyes): the payment goes, once
    assert clear(dsn, hold_id, "alice") is False  # proposed: still held
    assert query(dsn, "SELECT count(*) FROM evm_signer_holds WHERE cleared_at IS NULL")[0][0] == 1
    assert clear(dsn, hold_id, "bob") is True
    wait_until(lambda: all_completed(dsn, held_ids), 60, "the held payment after the clear")
    assert anvil.balance(waiting) == WEI
    assert anvil.nonce(ADDRESSES[0]) == count + 1


def test_each_transaction_is_read_from_the_block_that_consumed_its_nonce(anvil) -> None:
    """read_transactions finds every nonce's transaction in its own block (galloping back
    from the head, then bisecting), whatever blocks lie between; a nonce the chain does not
    show mined is unread, never guessed."""
    from qtg.providers.evm.ledger import read_transactions
    from qtg.providers.evm.rpc import EvmRpc

    first = anvil.nonce(ADDRESSES[0])
    sent = {}
    for i in range(5):
        for _ in range(i * 3):  # empty blocks between, more each time
            anvil.call("evm_mine")
        tx_hash = anvil.call(
            "eth_sendTransaction", {"from": ADDRESSES[0], "to": fresh_address(), "value": "0x1"}
        )
        sent[first + i] = wait_receipt(anvil, tx_hash)

    async def run():
        rpc = EvmRpc(31337, [anvil.url], timeout=5.0, concurrency=2, read_retries=1)
        try:
            return await read_transactions(rpc, ADDRESSES[0], range(first, first + 7))
        finally:
            await rpc.aclose()

    found, unread = trio.run(run)
    assert unread == [first + 5, first + 6]  # not used on chain: nothing to read
    assert [(t.nonce, t.tx_hash, t.block) for t in found] == [
        (n, r["transactionHash"], int(r["blockNumber"], 16)) for n, r in sorted(sent.items())
    ]
    assert all(t.value == 1 and t.data == "0x" for t in found)


def test_a_nonce_reserved_without_bytes_below_the_chains_count_is_unknown(dsn) -> None:
    """The ledger's check against real PostgreSQL: bytes are kept before anything leaves,
    so a reserved nonce the chain has used without any kept bytes (an asynchronous
    failover lost them) is as unknown as one above the ledger's highest; a nonce still in
    flight above the chain's count is not; an adopted one is known."""
    from qtg.providers.evm import ledger

    signer = "0x" + "ab" * 20
    for nonce in range(5):
        lost = nonce == 2
        tx_hash = None if lost else f"0x{nonce + 1:064x}"
        query(
            dsn,
            "INSERT INTO evm_nonce_reservations (chain_id, address, nonce, state,"
            " request_node_id, attempt_no, tx_hash) VALUES (1, %s, %s, %s, %s, 1, %s)",
            (signer, nonce, "reserved" if lost else "consumed", f"node-{nonce}", tx_hash),
        )
        if not lost:
            query(
                dsn,
                "INSERT INTO evm_signed_transactions (chain_id, address, nonce, kind,"
                " request_node_id, attempt_no, tx_hash, raw, payload, max_fee_per_gas,"
                " max_priority_fee_per_gas) VALUES (1, %s, %s, 'payment', %s, 1, %s,"
                " '0x01', '{}', 1, 1)",
                (signer, nonce, f"node-{nonce}", tx_hash),
            )
    query(  # in flight: reserved, not signed yet, above the chain's count
        dsn,
        "INSERT INTO evm_nonce_reservations (chain_id, address, nonce, request_node_id,"
        " attempt_no) VALUES (1, %s, 5, 'node-5', 1)",
        (signer,),
    )

    async def behind(*counts: int):
        async with Database(dsn, min_size=1, max_size=1) as db, db.transaction() as tx:
            return await ledger.behind(tx, chain_id=1, address=signer, counts=counts)

    lost = trio.run(behind, 5, 5)
    assert lost is not None and lost.known_next == 5 and lost.unsigned_below == [2]
    assert not lost.first_use
    # the chain ahead of the highest too: both kinds of unknown nonces
    ahead = trio.run(behind, 7, 6)
    assert ahead is not None and ahead.unsigned_below == [2] and ahead.counts == (7, 6)
    # nonce 2 adopted from the chain: in step (5 is in flight above the count: normal)
    query(
        dsn,
        "INSERT INTO evm_ledger_adoptions (chain_id, address, nonce, tx_hash, block_number,"
        " disposition, request_node_id) VALUES (1, %s, 2, %s, 9, 'adopted', 'node-2')",
        (signer, "0x" + "ee" * 32),
    )
    assert trio.run(behind, 5, 5) is None
    assert trio.run(behind, 6, 5) is not None  # 5 used on chain with no bytes: unknown
