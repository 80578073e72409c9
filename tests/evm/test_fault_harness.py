"""The chain fault harness (issue 24 item 9): real anvil, real runtimes, a JSON-RPC
fault proxy (tests/evm/lagproxy.py FaultProxy) — judged by the chain, never by
qtg's tables.

Each run pays a set of movements (native and ERC-20, each to its own fresh
destination) while the proxy injects, from a seed: read lag after a broadcast,
dropped sends, lost replies, 5xx, hangs past the client's timeout, JSON-RPC
errors and an outage window; a "mempool peer" drops pending transactions of
ours from anvil (anvil_dropTransaction) and gossips the dropped bytes back
later; runtimes are killed (-9) at the crash points before signing, after the
write-ahead before the broadcast, and after the broadcast before recording.

The verdict, from the chain: every destination holds exactly its intent; no
movement that is not COMPLETED has a payment that landed; no nonce is left
queued behind a hole; every movement settles within the bound.

CI runs a few seeded runs (about a minute in all on an idle machine). The soak:

    QTG_FAULT_SOAK=1 QTG_FAULT_SEED=$RANDOM .venv/bin/pytest tests/evm/test_fault_harness.py

runs more movements per run, harsher faults and more seeds (from QTG_FAULT_SEED on);
a failing run names its seed, and QTG_FAULT_SEED=<seed> replays its fault draws.
"""

from __future__ import annotations

import random
import time
from decimal import Decimal

import pytest
from runtime.rt_procs import RuntimeProcess, base_env, query, request_states, wait_until

from evm.anvil import ADDRESSES, CHAIN_ID, KEYS, Anvil, deploy_token, token_balance
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
    seeds,
    settled,
    start_outage,
    url_list,
)
from evm.test_transient_and_lanes import fresh_address, seed

pytestmark = pytest.mark.slow

WEI = 10**18
#: movements per run
MOVEMENTS = 16 if SOAK else 6


def launch(procs: list, dsn: str, urls: str, **env: str) -> RuntimeProcess:
    proc = RuntimeProcess.launcher(
        base_env(
            MG_DATABASE_URL=dsn,
            MG_DB_POOL_MAX_SIZE="20",
            MG_PROVIDERS="evm",
            MG_EVM_SIGNER_PRIVATE_KEY=KEYS[0],
            MG_EVM_RPC_URLS=f"{CHAIN_ID}={urls}",
            **{**ENV, **env},
        )
    )
    procs.append(proc)
    return proc


def run_harness(
    anvil,
    dsn: str,
    procs: list,
    run_seed: int,
    *,
    urls: int,
    crash_at: str | None,
    rollback: bool = False,
) -> None:
    rng = random.Random(run_seed)
    token = deploy_token(anvil, 10**12)
    floor = int(anvil.call("eth_blockNumber"), 16)  # a rollback never takes the token away
    proxies = proxies_for(anvil, rng, urls)
    urls_env = url_list(proxies)
    native = [(fresh_address(), str(Decimal(rng.randint(1, 999)) / 1000)) for _ in range(MOVEMENTS)]
    tokens = [(fresh_address(), str(rng.randint(1, 10**6))) for _ in range(MOVEMENTS // 2)]
    payments = [*((d, int(Decimal(a) * WEI), False) for d, a in native)]
    payments += [(d, int(a), True) for d, a in tokens]
    peer = MempoolPeer(anvil.url, proxies, random.Random(rng.randrange(2**32)))
    rolled = "no rollback"
    started = time.monotonic()
    try:
        with interval_mining(anvil):
            if crash_at is not None:
                # the first runtime dies (kill -9) at the crash point of its first transfer
                doomed = launch(procs, dsn, urls_env, QTG_TEST_CRASH_AT=crash_at)
                doomed.wait_ready()
            ids = seed(dsn, native, key=f"harness-{run_seed}-n")
            ids += seed(
                dsn, tokens, key=f"harness-{run_seed}-t", token={"token": token, "decimals": 0}
            )
            if crash_at is not None:
                doomed.proc.wait(timeout=60)
                assert doomed.proc.returncode == -9, doomed.log()
            launch(procs, dsn, urls_env).wait_ready()
            launch(procs, dsn, urls_env).wait_ready()  # two runtimes on one signer
            peer.start()
            start_outage(rng, proxies)
            if rollback:
                by_destination = dict(zip((p[0].lower() for p in payments), ids, strict=True))
                rolled = roll_back(
                    anvil, dsn, by_destination, depth=rng.choice([1, 2]), floor=floor
                )
            states = wait_until(
                lambda: settled(dsn, ids),
                BOUND_SECONDS,
                f"every movement to settle (seed {run_seed})",
            )
            # a payment a rollback took back is sent again from its kept bytes: the chain
            # shows it within the bound (a COMPLETED movement stays COMPLETED meanwhile)
            wait_until(
                lambda: all(
                    paid(anvil, token, d, is_token) >= want
                    for rid, (d, want, is_token) in zip(ids, payments, strict=True)
                    if states[rid] == "COMPLETED"
                ),
                max(5.0, BOUND_SECONDS - (time.monotonic() - started)),
                f"every COMPLETED movement's payment on the chain (seed {run_seed}, {rolled})",
            )
            elapsed = time.monotonic() - started
            # let the mempool drain (interval mining): nothing of ours queued behind a hole
            wait_until(lambda: pool_drained(anvil), 30, "nothing of ours left in the mempool")
    finally:
        peer.stop()
        for proxy in proxies:
            proxy.close()
    # judged by the chain alone
    why = query(
        dsn,
        "SELECT request_id::text, node_state, error_code, error_detail"
        " FROM movement_request_nodes WHERE request_id = ANY(%s::uuid[])"
        " AND node_state <> 'COMPLETED'",
        (ids,),
    )
    counts = fault_counts(proxies)
    context = (
        f"seed {run_seed}, urls {urls}, crash {crash_at}, {rolled}, {elapsed:.0f} s,"
        f" faults {counts}, peer dropped {peer.dropped} regossiped {peer.regossiped}: {why}"
    )
    for rid, (destination, want, is_token) in zip(ids, payments, strict=True):
        got = paid(anvil, token, destination, is_token)
        if states[rid] == "COMPLETED":
            assert got == want, f"{destination} got {got}, intent {want}; {context}"
        else:  # never a non-COMPLETED movement whose payment landed
            assert got == 0, f"{rid} is {states[rid]} but its payment landed; {context}"
    assert set(states.values()) == {"COMPLETED"}, f"{states}; {context}"
    assert counts["outage"] > 0 and sum(counts.values()) > counts["outage"], context
    print(context)  # what the run went through (pytest -s, or -rP) (pytest -s, or -rP)


def paid(anvil: Anvil, token: str, destination: str, is_token: bool) -> int:
    return token_balance(anvil, token, destination) if is_token else anvil.balance(destination)


def payee(tx: dict) -> str | None:
    """The destination a transaction of ours pays: `to` for native, the first argument of
    an ERC-20 `transfer(address,uint256)`."""
    data = tx.get("input") or "0x"
    if data.startswith("0xa9059cbb") and len(data) >= 74:
        return "0x" + data[34:74].lower()
    return (tx.get("to") or "").lower() or None


def roll_back(
    anvil: Anvil, dsn: str, by_destination: dict[str, str], *, depth: int, floor: int
) -> str:
    """Roll the chain back over mined payments of ours, one of them COMPLETED at depth 1
    if the runtimes get there first, as a one- or two-block reorg does; what it took.

    Mining pauses while the newest blocks are read, so the rolled-back blocks are the
    ones looked at: the newest block paying one of our destinations must be within
    `depth` of the head, and every rolled-back block above `floor` (else mining resumes
    and the next blocks are looked at)."""
    deadline = time.monotonic() + BOUND_SECONDS / 2
    while True:
        anvil.call("evm_setIntervalMining", 0)
        head = int(anvil.call("eth_blockNumber"), 16)
        hit: list[str] = []
        for number in range(head, max(head - depth, floor), -1):
            block = anvil.call("eth_getBlockByNumber", hex(number), True)
            hit += [
                by_destination[p]
                for tx in block["transactions"]
                if tx["from"].lower() == ADDRESSES[0].lower() and (p := payee(tx)) in by_destination
            ]
        if hit and head - depth >= floor:
            break
        anvil.call("evm_setIntervalMining", 1)
        assert time.monotonic() < deadline, "no payment of ours was mined to roll back"
        wait_until(
            lambda head=head: int(anvil.call("eth_blockNumber"), 16) > head, 10, "the next block"
        )
    # give the runtimes the chance to call one of them COMPLETED (depth 1, the default)
    try:
        completed = wait_until(
            lambda: [
                rid for rid, state in request_states(dsn, hit).items() if state == "COMPLETED"
            ],
            15,
            "a rolled-back payment's movement COMPLETED",
        )
    except AssertionError:
        completed = []
    before = anvil.nonce(ADDRESSES[0])
    anvil.call("anvil_rollback", depth)
    after = anvil.nonce(ADDRESSES[0])
    anvil.call("evm_setIntervalMining", 1)
    assert after < before, f"the rollback of {depth} took none of our transactions"
    return (
        f"rollback {depth} took nonces {after}..{before - 1}"
        f" ({len(hit)} payments, {len(completed)} COMPLETED)"
    )


@pytest.mark.parametrize("run_seed", seeds(6 if SOAK else 1))
@pytest.mark.parametrize("urls", [1, 2])
def test_seeded_faults_pay_each_destination_exactly_once(anvil, dsn, procs, run_seed, urls):
    run_harness(anvil, dsn, procs, run_seed, urls=urls, crash_at=None)


@pytest.mark.parametrize("crash_at", ["before_signing", "before_broadcast", "after_broadcast"])
def test_a_kill_at_each_crash_point_under_faults_pays_once(anvil, dsn, procs, crash_at):
    run_harness(anvil, dsn, procs, BASE_SEED + 100, urls=1, crash_at=crash_at)


@pytest.mark.parametrize("run_seed", [BASE_SEED + 200 + i for i in range(3 if SOAK else 1)])
def test_a_rollback_under_faults_pays_each_destination_once(anvil, dsn, procs, run_seed):
    """anvil_rollback of one or two blocks after payments were mined, and one of them
    possibly COMPLETED at depth 1: the rolled-back payments are sent again from their
    kept bytes, each destination is paid exactly once, nothing waits behind a hole."""
    run_harness(anvil, dsn, procs, run_seed, urls=1, crash_at=None, rollback=True)
