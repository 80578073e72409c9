"""The chain fault harness's machinery (issue 24 item 9), shared by the evm_transfer runs
(tests/evm/test_fault_harness.py) and the CCIP runs (tests/ccip/test_ccip_fault_harness.py):
the seeded fault draws for `FaultProxy`, the mempool peer, interval mining, the outage
window, the settle and drain conditions, and the fault tally a verdict reports.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from runtime.rt_procs import request_states

from evm.anvil import ADDRESSES, Anvil, rpc
from evm.lagproxy import FaultProxy, Faults

SOAK = os.environ.get("QTG_FAULT_SOAK") == "1"
BASE_SEED = int(os.environ.get("QTG_FAULT_SEED") or 24)
#: the bound within which every movement must settle
BOUND_SECONDS = 240 if SOAK else 120

#: runtime settings of every harness run: fast recovery, short RPC timeouts, a reaper
#: pass a second, so each fault is met within the bound
ENV = {
    "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS": "0.5",
    "MG_NODE_RECOVERY_INTERVAL_SECONDS": "0.3",
    "MG_NODE_DISPATCH_INTERVAL_SECONDS": "0.3",
    "MG_NODE_OBSERVE_INTERVAL_SECONDS": "0.5",
    "MG_EVM_RPC_TIMEOUT_SECONDS": "1",
    "MG_EVM_RPC_READ_RETRIES": "2",
    "MG_NODE_TRANSIENT_RETRY_MAX_SECONDS": "2",
    "MG_EVM_REPLACE_AFTER_SECONDS": "8",
    "MG_EVM_EVIDENCE_ATTENTION_SECONDS": "30",
    "MG_EVM_NONCE_RESERVATION_STALE_SECONDS": "4",
    "MG_EVM_NONCE_REAPER_INTERVAL_SECONDS": "1",
}

KINDS = ("drop_send", "lose_send_reply", "send_5xx", "send_hang", "read_5xx")
KINDS += ("read_rpc_error", "read_hang", "lag_null", "outage")


def faults(rng: random.Random) -> Faults:
    scale = 2.0 if SOAK else 1.0
    return Faults(
        read_5xx=0.04 * scale * rng.random(),
        read_rpc_error=0.04 * scale * rng.random(),
        read_hang=0.01 * scale * rng.random(),
        drop_send=0.25 * rng.random(),
        lose_send_reply=0.25 * rng.random(),
        send_5xx=0.05 * rng.random(),
        send_hang=0.03 * rng.random(),
        lag=1.5 * rng.random(),
        hang_seconds=1.5,
    )


def proxies_for(anvil: Anvil, rng: random.Random, urls: int) -> list[FaultProxy]:
    """`urls` fault proxies in front of anvil, each with its own seeded draws."""
    return [FaultProxy(anvil.url, faults(rng), seed=rng.randrange(2**32)) for _ in range(urls)]


def url_list(proxies: list[FaultProxy]) -> str:
    return "|".join(p.url for p in proxies)


@dataclass
class MempoolPeer:
    """Drops pending transactions of the signer from anvil now and then and gossips
    the dropped bytes back a few seconds later, as any mempool peer may."""

    url: str
    proxies: list[FaultProxy]
    rng: random.Random
    dropped: int = 0
    regossiped: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _later: list[tuple[float, str]] = field(default_factory=list)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _raw(self, tx_hash: str) -> str | None:
        for proxy in self.proxies:
            raw = proxy.sent.get(tx_hash)
            if raw is not None:
                return raw
        return None

    def _run(self) -> None:
        while not self._stop.wait(0.7):
            try:
                pool = rpc(self.url, "txpool_content")
                mine = {}
                for section in ("pending", "queued"):
                    for sender, by_nonce in (pool.get(section) or {}).items():
                        if sender.lower() == ADDRESSES[0].lower():
                            mine.update({n: tx["hash"] for n, tx in by_nonce.items()})
                if mine and self.rng.random() < 0.4:
                    tx_hash = mine[self.rng.choice(sorted(mine))]
                    raw = self._raw(tx_hash)
                    rpc(self.url, "anvil_dropTransaction", tx_hash)
                    self.dropped += 1
                    if raw is not None:
                        self._later.append((time.monotonic() + self.rng.uniform(1, 5), raw))
                now = time.monotonic()
                for due, raw in [x for x in self._later if x[0] <= now]:
                    self._later.remove((due, raw))
                    try:
                        rpc(self.url, "eth_sendRawTransaction", raw)
                        self.regossiped += 1
                    except Exception:
                        pass  # "nonce too low", "already known": the chain decided
            except Exception:
                continue


@contextmanager
def interval_mining(anvil: Anvil) -> Iterator[None]:
    """A block a second (a mempool that holds transactions, as a real chain's does);
    automine again afterwards, as the other tests expect."""
    anvil.call("evm_setAutomine", False)
    anvil.call("evm_setIntervalMining", 1)
    try:
        yield
    finally:
        anvil.call("evm_setIntervalMining", 0)
        anvil.call("evm_setAutomine", True)


def start_outage(rng: random.Random, proxies: list[FaultProxy]) -> threading.Timer:
    """An outage window on every URL, placed by the seed a little after the start:
    armed then, it starts on each URL with the next call that URL gets, so the
    runtimes always meet it (a window on the clock could fall while they were
    still starting, and the verdict's `counts["outage"] > 0` failed once)."""
    outage_for = rng.uniform(2, 6)
    timer = threading.Timer(
        rng.uniform(0.5, 3),
        lambda: [proxy.outage_from_next_call(outage_for) for proxy in proxies],
    )
    timer.start()
    return timer


def settled(dsn: str, ids: list[str]) -> dict[str, str] | None:
    states = request_states(dsn, ids)
    if len(states) == len(ids) and not ({"EXECUTING", "APPROVED"} & set(states.values())):
        return states
    return None


def pool_drained(anvil: Anvil, address: str = ADDRESSES[0]) -> bool:
    """Nothing of `address` waits in the mempool (nothing queued behind a nonce hole)."""
    pending = int(anvil.call("eth_getTransactionCount", address, "pending"), 16)
    return pending == anvil.nonce(address)


def fault_counts(proxies: list[FaultProxy]) -> dict[str, int]:
    return {k: sum(p.count(k) for p in proxies) for k in KINDS}


def seeds(n: int) -> list[int]:
    return [BASE_SEED + i for i in range(n)]
