"""node_recovery's Stargate arm decides a stargate_send that is UNKNOWN — not SUBMITTING —
from the chain (issue 46 review), under a real `bin/qtg-runtime` and two anvil chains.

The runtime is killed -9 before or after the send's broadcast (the node SUBMITTING, no
outcome); a runtime that cannot reach chain A (its RPC URL a closed port) recovers it:
recover() raises, so the node is UNKNOWN (RECOVERY_INCONCLUSIVE), undecided. A runtime
that reaches A again takes that UNKNOWN node (the arm lists UNKNOWN and SUBMITTING alike)
and decides it from the chain: the send's own kept bytes (sent again if they never left)
are mined, the movement goes on to the delivery, attempt 1, the recipient paid once.

An UNKNOWN send that reserved no nonce provably sent nothing (bytes are kept before any
broadcast): the arm puts it back to READY, attempt 2 sends, the recipient is paid once.
"""

from __future__ import annotations

import socket

import pytest
from runtime.rt_procs import all_completed, query, wait_until

from stargate.flow import RECOVER_FAST, launch, nodes, seed
from stargate.local import packets
from stargate.test_stargate_runtime import RECIPIENT, USDT, _moved_once, world

pytestmark = pytest.mark.slow
__all__ = ["world"]

#: an undecided recovery asks again soon (default base 5 s)
RETRY_FAST = {**RECOVER_FAST, "MG_NODE_RECOVERY_RETRY_BASE_SECONDS": "0.2"}


def _closed_port() -> str:
    """A loopback URL nothing listens on: connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _send(dsn: str) -> tuple:
    [row] = query(
        dsn,
        "SELECT node_state, error_code, attempt_no FROM movement_request_nodes"
        " WHERE node_key = 'send'",
    )
    return row


@pytest.mark.parametrize(
    "crash", ["stargate_send.before_broadcast", "stargate_send.after_broadcast"]
)
def test_an_unknown_send_is_decided_from_the_chain(world, dsn, procs, crash) -> None:
    a, b, da, db, _ = world
    doomed = launch(procs, dsn, (a.url, b.url), da, db, QTG_TEST_CRASH_AT=crash)
    doomed.wait_ready()
    ids = seed(dsn, RECIPIENT, ["6"], batch="unknown")
    assert doomed.wait_exit(60) == -9
    assert _send(dsn)[0] == "SUBMITTING"
    sent = 1 if crash.endswith("after_broadcast") else 0
    assert len(packets(a, da)) == sent
    blind = launch(procs, dsn, (_closed_port(), b.url), da, db, **RETRY_FAST)
    blind.wait_ready()
    wait_until(lambda: _send(dsn)[0] == "UNKNOWN", 30, "recovery without chain A to give up")
    blind.kill()
    assert _send(dsn) == ("UNKNOWN", "RECOVERY_INCONCLUSIVE", 1)
    assert len(packets(a, da)) == sent  # nothing more left qtg meanwhile
    launch(procs, dsn, (a.url, b.url), da, db, **RETRY_FAST).wait_ready()
    wait_until(lambda: all_completed(dsn, ids), 60, "the UNKNOWN send decided from the chain")
    _moved_once(world, 6 * USDT)
    assert nodes(dsn)["send"][:2] == ("COMPLETED", 1)  # attempt 1's own bytes, no second send


#: an UNKNOWN send of attempt 1 that reserved no nonce: what a runtime leaves when it dies
#: between its SUBMITTING mark and the reservation — which the dispatcher's order (the
#: reservation before the write-ahead commit) never produces, so the rows are written here
UNKNOWN_UNRESERVED = (
    "UPDATE movement_request_nodes SET node_state = %s, attempt_no = 1,"
    " error_code = 'RECOVERY_INCONCLUSIVE' WHERE node_key = 'send'"
)


def test_an_unknown_send_that_never_reserved_goes_back_to_ready(world, dsn, procs) -> None:
    a, b, da, db, _ = world
    blind = launch(procs, dsn, (_closed_port(), b.url), da, db, **RETRY_FAST)
    blind.wait_ready()
    ids = seed(dsn, RECIPIENT, ["2"], batch="unreserved")
    wait_until(
        lambda: (
            query(dsn, "SELECT request_state FROM movement_requests") == [("EXECUTING",)]
            and _send(dsn)[1] is not None
        ),
        30,
        "the send to wait out chain A (READY, a transient fault)",
    )
    blind.kill()
    assert _send(dsn) == ("READY", "EVM_RPC_UNAVAILABLE", 0)
    assert query(dsn, "SELECT count(*) FROM evm_nonce_reservations") == [(0,)]
    query(dsn, UNKNOWN_UNRESERVED, ("SUBMITTING",))
    query(dsn, UNKNOWN_UNRESERVED, ("UNKNOWN",))
    launch(procs, dsn, (a.url, b.url), da, db, **RETRY_FAST).wait_ready()
    wait_until(lambda: all_completed(dsn, ids), 60, "the unreserved send sent anew")
    _moved_once(world, 2 * USDT)
    assert nodes(dsn)["send"][:2] == ("COMPLETED", 2)
