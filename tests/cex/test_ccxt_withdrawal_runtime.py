"""Issue 28 item 3 under real runtimes (`bin/qtg-runtime`), a real PostgreSQL, a real anvil
and a local OKX (tests/cex/okx_venue.py: OKX's REST shapes and signature check, a ledger,
a hot wallet that pays on anvil).

`cex.withdraw_to_chain`, the real twin of demo.cex_to_chain: the ccxt executor withdraws
from the venue (with OKX's clientId), then evm_receive sees the ERC-20 Transfer to the
destination on chain. Judged by the venue's ledger (withdrawals per client id) and the
chain (the destination's token balance): each destination receives exactly its amount once.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
import trio
from evm.anvil import ADDRESSES, CHAIN_ID, KEYS, deploy_token, token_balance
from runtime.rt_procs import RuntimeProcess, all_completed, base_env, query, wait_until

from qtg.config import Settings
from qtg.db import Database
from qtg.providers.ccxt_withdrawal import client_id_for
from qtg.services.movements import approve_movement, create_movement
from qtg.services.templates import create_template

from .okx_venue import API_KEY, PASSPHRASE, SECRET, OkxVenue

pytestmark = pytest.mark.slow

TEMPLATE = "cex.withdraw_to_chain"
PROVIDERS = "sandbox,evm,evm_receive,ccxt"
RECOVER_FAST = {
    "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS": "0.5",
    "MG_NODE_RECOVERY_INTERVAL_SECONDS": "0.2",
    "MG_NODE_RECOVERY_RETRY_BASE_SECONDS": "0.2",
    "MG_NODE_RECOVERY_RETRY_MAX_SECONDS": "0.5",
}


def twin_graph(token: str) -> dict[str, Any]:
    return {
        "nodes": [
            {"key": "withdraw", "kind": "action", "action_type": "cex_withdrawal",
             "executor_key": "ccxt", "config": {"venue": "okx", "ccxt": {"chain": "USDC-ERC20"}}},
            {"key": "receive", "kind": "observe",
             "action_type": "destination_chain_receive_observe", "executor_key": "evm_receive",
             "config": {"txid": "$ref:withdraw.txid",
                        "evm_receive": {"chain_id": CHAIN_ID, "token": token, "decimals": 6}}},
        ],
        "edges": [["withdraw", "receive"]],
    }  # fmt: skip


def seed(dsn: str, token: str, payments: list[tuple[str, str]], batch: str) -> list[str]:
    """The template (once per batch) and one approved movement per (destination, amount)."""

    async def run() -> list[str]:
        settings = Settings.from_env({}).replace(database_url=dsn)
        ids = []
        async with Database(dsn, min_size=1, max_size=2) as db:
            await create_template(
                db, actor="alice", template_key=f"{TEMPLATE}.{batch}",
                name="Withdraw from OKX to a chain address", graph=twin_graph(token),
            )  # fmt: skip
            for i, (destination, amount) in enumerate(payments):
                created, _ = await create_movement(
                    db,
                    settings,
                    template_key=f"{TEMPLATE}.{batch}",
                    intent={"asset": "USDC", "amount": amount, "destination": destination},
                    idempotency_key=f"cex-{batch}-{i}",
                    actor="alice",
                )
                await approve_movement(db, created["id"], actor="bob")
                ids.append(str(created["id"]))
        return ids

    return trio.run(run)


@pytest.fixture
def chain(anvil):
    """A 6-decimal test USDC whose whole supply sits in the venue's hot wallet."""
    return deploy_token(anvil, 10**9 * 10**6)


@pytest.fixture
def venue(anvil, chain):
    okx = OkxVenue(anvil.url, chain, ADDRESSES[0]).start()
    yield okx
    okx.stop()


@pytest.fixture
def credentials(tmp_path, venue) -> str:
    path = tmp_path / "ccxt.json"
    path.write_text(
        json.dumps(
            {
                "okx": {
                    "apiKey": API_KEY,
                    "secret": SECRET,
                    "password": PASSPHRASE,
                    "api_url": venue.url,
                }
            }
        )
    )
    path.chmod(0o600)
    return str(path)


def launch(procs: list, dsn: str, anvil, credentials: str, *args: str, **env: str):
    proc = RuntimeProcess.launcher(
        base_env(
            MG_DATABASE_URL=dsn,
            MG_DB_POOL_MAX_SIZE="10",
            MG_PROVIDERS=PROVIDERS,
            MG_EVM_RPC_URLS=f"{CHAIN_ID}={anvil.url}",
            MG_EVM_SIGNER_PRIVATE_KEY=KEYS[1],
            MG_CCXT_VENUES_CSV="okx",
            MG_CCXT_CREDENTIALS_FILE=credentials,
            **{"MG_CCXT_WITHDRAW_TIMEOUT_SECONDS": "5", **env},
        ),
        *args,
    )
    procs.append(proc)
    return proc


def dest(n: int) -> str:
    return "0x" + f"{0xD400 + n:040x}"


def node_ids(dsn: str, ids: list[str]) -> list[str]:
    return [r[0] for r in query(
        dsn, "SELECT id::text FROM movement_request_nodes WHERE request_id = ANY(%s::uuid[])"
        " AND node_key = 'withdraw' ORDER BY request_id", (ids,))]  # fmt: skip


def withdraw_node(dsn: str, ids: list[str]) -> tuple:
    [row] = query(
        dsn,
        "SELECT node_state, attempt_no, error_code FROM movement_request_nodes"
        " WHERE request_id = ANY(%s::uuid[]) AND node_key = 'withdraw'",
        (ids,),
    )
    return row


def assert_paid_once(anvil, token: str, venue: OkxVenue, paid: dict[str, str]) -> None:
    """The chain and the ledger agree: one withdrawal per destination, of its amount."""
    by_dest: dict[str, list] = {}
    for w in venue.withdrawals():
        by_dest.setdefault(w.to.lower(), []).append(w)
    assert sorted(by_dest) == sorted(d.lower() for d in paid)
    for destination, amount in paid.items():
        [w] = by_dest[destination.lower()]  # exactly one withdrawal at the venue
        assert w.amt == Decimal(amount) and w.state == "2"
        assert token_balance(anvil, token, destination) == int(Decimal(amount) * 10**6)


def test_withdraw_to_chain_end_to_end(anvil, chain, venue, credentials, dsn, procs) -> None:
    proc = launch(procs, dsn, anvil, credentials)
    proc.wait_ready()
    paid = {dest(1): "25.5", dest(2): "0.000001"}
    ids = seed(dsn, chain, list(paid.items()), "e2e")
    wait_until(lambda: all_completed(dsn, ids), 60, "both withdrawals to land on chain")
    assert_paid_once(anvil, chain, venue, paid)
    # the venue got our client ids: attempt 1 of each withdraw node
    assert sorted(w.client_id for w in venue.withdrawals()) == sorted(
        client_id_for(f"{n}:1") for n in node_ids(dsn, ids)
    )
    # evm_receive's artifacts name the venue's transaction
    receipts = query(dsn, "SELECT artifacts->>'dest_tx_hash' FROM movement_request_nodes"
                     " WHERE node_key = 'receive' ORDER BY request_id")  # fmt: skip
    assert {r[0] for r in receipts} == {w.tx_id for w in venue.withdrawals()}
    with proc._cond:
        logged = "\n".join(proc.lines)
    assert SECRET not in logged and PASSPHRASE not in logged


def test_kill_after_withdraw_before_record_recovers_by_client_id(
    anvil, chain, venue, credentials, dsn, procs
) -> None:
    doomed = launch(procs, dsn, anvil, credentials, QTG_TEST_CRASH_AT="after_withdraw")
    doomed.wait_ready()
    ids = seed(dsn, chain, [(dest(3), "7")], "kill-after")
    assert doomed.wait_exit(30) == -9  # died with the withdrawal made at the venue
    assert withdraw_node(dsn, ids)[0] == "SUBMITTING"
    assert len(venue.withdrawals()) == 1
    launch(procs, dsn, anvil, credentials, **RECOVER_FAST).wait_ready()
    wait_until(lambda: all_completed(dsn, ids), 60, "recovery to find the withdrawal")
    assert withdraw_node(dsn, ids)[1] == 1  # the same attempt, no new one
    assert_paid_once(anvil, chain, venue, {dest(3): "7"})


def test_lost_reply_is_found_in_the_history_not_sent_again(
    anvil, chain, venue, credentials, dsn, procs
) -> None:
    venue.lose_replies = 1
    launch(procs, dsn, anvil, credentials, **RECOVER_FAST).wait_ready()
    ids = seed(dsn, chain, [(dest(4), "3.25")], "lost")
    wait_until(lambda: all_completed(dsn, ids), 60, "recovery to follow the lost reply")
    assert ("POST", "/api/v5/asset/withdrawal", 0) in venue.requests  # the reply was lost
    assert [r for r in venue.requests if r[0] == "POST"] == [
        ("POST", "/api/v5/asset/withdrawal", 0)
    ]  # and never asked again
    assert_paid_once(anvil, chain, venue, {dest(4): "3.25"})


def test_a_lagging_history_is_not_proof_no_second_withdrawal(
    anvil, chain, venue, credentials, dsn, procs
) -> None:
    # The reply is lost and the history hides the withdrawal for 6 s: recovery's
    # "not found" reads inside the grace (20 s) are UNKNOWN, never a new attempt.
    venue.lose_replies, venue.hide_history_seconds = 1, 6
    launch(procs, dsn, anvil, credentials, MG_CCXT_WITHDRAWAL_GRACE_SECONDS="20",
           MG_CCXT_WITHDRAWAL_RECHECK_SECONDS="1", **RECOVER_FAST).wait_ready()  # fmt: skip
    ids = seed(dsn, chain, [(dest(5), "11")], "lag")
    wait_until(lambda: withdraw_node(dsn, ids)[0] == "UNKNOWN", 30, "the node to be UNKNOWN")
    wait_until(lambda: all_completed(dsn, ids), 60, "the withdrawal to show up and land")
    assert withdraw_node(dsn, ids)[1] == 1
    assert_paid_once(anvil, chain, venue, {dest(5): "11"})


def test_kill_before_the_request_is_proven_not_sent_after_two_reads(
    anvil, chain, venue, credentials, dsn, procs
) -> None:
    doomed = launch(procs, dsn, anvil, credentials, QTG_TEST_CRASH_AT="before_withdraw")
    doomed.wait_ready()
    ids = seed(dsn, chain, [(dest(6), "2")], "kill-before")
    assert doomed.wait_exit(30) == -9
    assert venue.withdrawals() == []  # the write-ahead row exists, the request never left
    assert query(dsn, "SELECT count(*) FROM ccxt_withdrawal_attempts") == [(1,)]
    launch(procs, dsn, anvil, credentials, MG_CCXT_WITHDRAWAL_GRACE_SECONDS="1",
           MG_CCXT_WITHDRAWAL_RECHECK_SECONDS="1", **RECOVER_FAST).wait_ready()  # fmt: skip
    wait_until(lambda: all_completed(dsn, ids), 60, "a second attempt to complete")
    [node] = node_ids(dsn, ids)
    assert withdraw_node(dsn, ids)[1] == 2
    [w] = venue.withdrawals()
    assert w.client_id == client_id_for(f"{node}:2")
    absent = query(dsn, "SELECT absent_seen_at IS NOT NULL FROM ccxt_withdrawal_attempts"
                   " WHERE attempt_no = 1")  # fmt: skip
    assert absent == [(True,)]  # the first attempt was read missing before it was given up
    assert_paid_once(anvil, chain, venue, {dest(6): "2"})


def test_a_bad_signature_is_refused_by_the_venue_and_fails_with_nothing_sent(
    anvil, chain, venue, tmp_path, dsn, procs
) -> None:
    path = tmp_path / "wrong.json"
    path.write_text(
        json.dumps(
            {
                "okx": {
                    "apiKey": API_KEY,
                    "secret": "not-the-secret",
                    "password": PASSPHRASE,
                    "api_url": venue.url,
                }
            }
        )
    )
    launch(procs, dsn, anvil, str(path)).wait_ready()
    ids = seed(dsn, chain, [(dest(7), "1")], "badsig")
    wait_until(lambda: withdraw_node(dsn, ids)[0] == "FAILED", 30, "the node to fail")
    assert withdraw_node(dsn, ids)[2] == "CEX_REJECTED"
    assert ("POST", "/api/v5/asset/withdrawal", 401) in venue.requests
    assert venue.withdrawals() == []
    assert token_balance(anvil, chain, dest(7)) == 0


def test_demo_templates_still_run_with_the_ccxt_provider_registered(
    anvil, venue, credentials, dsn, procs
) -> None:
    launch(procs, dsn, anvil, credentials, "--seed-demo").wait_ready()

    async def run() -> list[str]:
        settings = Settings.from_env({}).replace(database_url=dsn)
        ids = []
        async with Database(dsn, min_size=1, max_size=2) as db:
            for key in ("demo.cex_to_chain", "demo.cctp_bridge"):
                created, _ = await create_movement(
                    db, settings, template_key=key,
                    intent={"asset": "USDC", "amount": "5", "destination": dest(8)},
                    idempotency_key=key, actor="alice",
                )  # fmt: skip
                await approve_movement(db, created["id"], actor="bob")
                ids.append(str(created["id"]))
        return ids

    ids = wait_until(lambda: query(dsn, "SELECT count(*) FROM movement_templates") != [(0,)],
                     30, "the demo templates") and trio.run(run)  # fmt: skip
    wait_until(lambda: all_completed(dsn, ids), 60, "the demo movements on the sandbox")
    assert venue.withdrawals() == []  # the sandbox ran them, not the venue


def test_a_venue_down_during_recovery_leaves_the_node_unknown_until_it_answers(
    anvil, chain, venue, credentials, dsn, procs
) -> None:
    venue.lose_replies = 1
    launch(procs, dsn, anvil, credentials, MG_CCXT_WITHDRAWAL_GRACE_SECONDS="1",
           MG_CCXT_WITHDRAWAL_RECHECK_SECONDS="1", **RECOVER_FAST).wait_ready()  # fmt: skip
    ids = seed(dsn, chain, [(dest(9), "4")], "down")
    wait_until(lambda: venue.withdrawals(), 30, "the withdrawal to be made")
    venue.down = True  # the reply was lost and now the venue does not answer at all
    # recovery asks again and again (far past grace and recheck) and never gives up on it
    wait_until(
        lambda: query(dsn, "SELECT recover_attempts FROM movement_request_nodes"
                      " WHERE node_key = 'withdraw'")[0][0] >= 5,
        30, "several recovery passes against the down venue",
    )  # fmt: skip
    assert withdraw_node(dsn, ids)[:2] == ("UNKNOWN", 1)
    assert len(venue.withdrawals()) == 1
    venue.down = False
    wait_until(lambda: all_completed(dsn, ids), 60, "recovery to find it once the venue answers")
    assert withdraw_node(dsn, ids)[1] == 1
    assert_paid_once(anvil, chain, venue, {dest(9): "4"})


def test_a_slow_venue_that_withdraws_after_the_client_gave_up_is_followed_not_repeated(
    anvil, chain, venue, credentials, dsn, procs
) -> None:
    # the withdraw request times out after 1 s; the venue carries it out 8 s after it came
    # (7 s of margin for a loaded machine to record the UNKNOWN before it lands)
    venue.slow_withdraw_seconds = 8
    launch(procs, dsn, anvil, credentials, MG_CCXT_WITHDRAW_TIMEOUT_SECONDS="1",
           MG_CCXT_WITHDRAWAL_GRACE_SECONDS="30", **RECOVER_FAST).wait_ready()  # fmt: skip
    ids = seed(dsn, chain, [(dest(10), "6")], "slow")
    wait_until(lambda: withdraw_node(dsn, ids)[0] == "UNKNOWN", 30, "the timed-out submit")
    assert venue.withdrawals() == []  # not carried out yet: recovery must not give up on it
    wait_until(lambda: all_completed(dsn, ids), 60, "the late withdrawal to be found and land")
    assert withdraw_node(dsn, ids)[1] == 1
    assert_paid_once(anvil, chain, venue, {dest(10): "6"})
