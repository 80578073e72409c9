"""The CCIP workers in a real `bin/qtg-runtime` (issue 12): ccip_drift is skipped with
the reference's reason when MG_CCIP_ENABLED is off or no CCIP sidecar client is
configured, and runs (finding a lane that disagrees with the chain) when both are;
ccip_stranded_reaper runs in the core group with no EVM precondition, and two
runtimes reaping at once strand (and page for) each intent once."""

from __future__ import annotations

import pytest
import trio
from evm.anvil import ADDRESSES
from runtime.rt_procs import query, wait_until

from ccip.flow import intent, launch, never_broadcast, nodes
from ccip.local import set_up
from qtg.db import Database

pytestmark = pytest.mark.slow


def reason(proc, worker: str) -> tuple[str, str]:
    record = proc.wait_for(lambda r: r.get("worker") == worker and "reason" in r)
    return record.get("level", ""), record["reason"]


def test_ccip_drift_is_skipped_with_the_references_reasons(anvil, dsn, procs) -> None:
    local = set_up(anvil, drips=0)
    off = launch(procs, dsn, anvil, local)
    ready = off.wait_ready()
    assert "ccip_drift" not in ready["workers"]
    assert reason(off, "ccip_drift")[1] == "MG_CCIP_ENABLED=false"
    no_client = launch(procs, dsn, anvil, local, MG_CCIP_ENABLED="true")
    assert "ccip_drift" not in no_client.wait_ready()["workers"]
    level, why = reason(no_client, "ccip_drift")
    assert why == "MG_CCIP_ENABLED=true, but it needs a CCIP sidecar client (not available)"
    assert level.upper().startswith("WARN")  # turned on by the operator: a warning


def test_ccip_drift_runs_with_a_sidecar_client_and_finds_a_wrong_router(anvil, dsn, procs):
    local = set_up(anvil, drips=0)
    wrong = "0x" + "77" * 20
    proc = launch(
        procs,
        dsn,
        anvil,
        local,
        MG_CCIP_ENABLED="true",
        MG_CCIP_SIDECAR="rpc",
        MG_CCIP_LANES=local.lanes_env(router=wrong),
        MG_CCIP_DRIFT_POLL_INTERVAL_SECONDS="0.2",
    )
    assert {"ccip_drift", "ccip_stranded_reaper"} <= set(proc.wait_ready()["workers"])
    found = wait_until(
        lambda: query(
            dsn,
            "SELECT expected, observed FROM drift_findings"
            " WHERE subject = 'ccip:local' AND check_name = 'router' AND cleared_at IS NULL",
        ),
        30,
        "ccip_drift to report the router",
    )
    assert found == [(wrong, local.router)]


def test_the_reaper_runs_without_any_evm_client() -> None:
    """On the sandbox alone (no evm provider) ccip_stranded_reaper is registered and runs."""
    from qtg.config import Settings
    from qtg.runtime.registry import resolve_workers

    [reaper] = [
        w for w in resolve_workers(Settings.from_env({})) if w.name == "ccip_stranded_reaper"
    ]
    assert reaper.enabled and reaper.group == "core" and reaper.interval == 60.0


def test_two_runtimes_reap_each_stranded_intent_once(anvil, dsn, procs) -> None:
    local = set_up(anvil, drips=0)
    fast = {
        "MG_CCIP_STRANDED_REAPER_INTERVAL_SECONDS": "0.2",
        "MG_CCIP_SEND_INTENT_STRANDED_SECONDS": "0.5",
    }
    runtimes = [launch(procs, dsn, anvil, local, **fast) for _ in range(2)]
    for proc in runtimes:
        assert "ccip_stranded_reaper" in proc.wait_ready()["workers"]
    count = 30

    async def plant() -> None:
        async with Database(dsn, min_size=1, max_size=2) as db:
            free = anvil.nonce(ADDRESSES[1])
            for node in await nodes(db, local, count):
                await intent(
                    db, local, node, tx_hash=never_broadcast(), nonce=free, sender=ADDRESSES[1]
                )

    trio.run(plant)
    wait_until(
        lambda: (
            query(dsn, "SELECT count(*) FROM ccip_send_intents WHERE state = 'stranded'")
            == [(count,)]
        ),
        30,
        "both runtimes' reapers to strand every intent",
    )
    events = query(
        dsn,
        "SELECT node_id FROM movement_events WHERE event_type = 'request_attention'",
    )
    assert len(events) == count and len(set(events)) == count  # once each, none twice
    assert query(
        dsn, "SELECT count(*), max(occurrences) FROM notifications WHERE kind = 'ccip_stranded'"
    ) == [(count, 1)]
    for proc in runtimes:
        assert proc.proc.poll() is None  # the core group is still up in both
