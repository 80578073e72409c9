"""Issue 43 item 3 through the HTTP API: resolving FAILED a node whose attempt kept signed
chain bytes that could still be mined answers 202 and leaves the node UNKNOWN
(FAILURE_NOT_PROVEN); a FAILED node whose failure is not proven is refused retry with a
409 whose structured body says FAILURE_NOT_PROVEN, and the movement's node says
failure_proven: false (what the console's retry button follows). The chain side (the
cancel, the proof) is tests/evm/test_operator_failed.py's, against anvil."""

from __future__ import annotations

from qtg.db import Query

from .conftest import Api
from .test_node_resolve import _error, _resolve, _stuck

KEEP_BYTES = Query(
    "tests/failure-proof-keep-bytes",
    "INSERT INTO evm_nonce_reservations (chain_id, address, nonce, state, request_node_id,"
    " attempt_no, tx_hash)"
    " SELECT 31337, '0x' || repeat('a', 40), 7, 'broadcast', n.id::text, n.attempt_no,"
    " '0x' || repeat('b', 64)"
    " FROM movement_request_nodes n WHERE n.request_id = %(rid)s AND n.node_key = 'burn'",
)
FAIL_AS_BEFORE = Query(
    "tests/failure-proof-fail-as-before",
    "UPDATE movement_request_nodes SET node_state = 'FAILED',"
    " error_code = 'RESOLVED_FAILED_BY_OPERATORS'"
    " WHERE request_id = %(rid)s AND node_key = 'burn'",
)


def _burn(movement: dict) -> dict:
    return next(n for n in movement["nodes"] if n["node_key"] == "burn")


async def test_failed_over_live_bytes_waits_for_the_chain(api: Api) -> None:
    rid = await _stuck(api)
    await api.db.execute(KEEP_BYTES, {"rid": rid})  # a payment kept, broadcast, unmined
    proposed = await _resolve(api, "alice", rid, outcome="FAILED")
    assert proposed.status_code == 202, proposed.text
    confirmed = await _resolve(api, "bob", rid, outcome="FAILED")
    assert confirmed.status_code == 202, confirmed.text  # confirmed, not applied
    body = confirmed.json()
    assert body["resolution"]["status"] == "confirmed"
    assert body["resolution"]["applied_at"] is None and body["resolution"]["proof"] is None
    burn = _burn(body["movement"])
    assert (burn["node_state"], burn["error_code"]) == ("UNKNOWN", "FAILURE_NOT_PROVEN")
    assert "cancel" in burn["error_detail"]
    error = _error(await _resolve(api, "alice", rid), 409, "FAILURE_PROOF_PENDING")
    assert error["detail"]["node_key"] == "burn"


async def test_retry_of_an_unproven_failure_is_409_failure_not_proven(api: Api) -> None:
    rid = await _stuck(api)
    await api.db.execute(KEEP_BYTES, {"rid": rid})
    await api.db.execute(FAIL_AS_BEFORE, {"rid": rid})  # FAILED by saying so (a23afdb)
    movement = (await api["vic"].get(f"/v3/movements/{rid}")).json()
    assert _burn(movement)["failure_proven"] is False
    error = _error(
        await api["bob"].post(f"/v3/movements/{rid}/nodes/burn/retry"), 409, "FAILURE_NOT_PROVEN"
    )
    assert error["detail"]["node_key"] == "burn"
    assert error["detail"]["error_code"] == "RESOLVED_FAILED_BY_OPERATORS"
    after = (await api["vic"].get(f"/v3/movements/{rid}")).json()
    assert _burn(after)["node_state"] == "FAILED"  # nothing half-applied


async def test_failed_with_nothing_signed_is_proven_and_retried(api: Api) -> None:
    """The sandbox's node kept no chain bytes: the operators' FAILED is applied at once with
    proof nothing_signed, and retry is allowed."""
    rid = await _stuck(api)
    await _resolve(api, "alice", rid, outcome="FAILED")
    confirmed = await _resolve(api, "bob", rid, outcome="FAILED")
    assert confirmed.status_code == 200, confirmed.text
    body = confirmed.json()
    assert body["resolution"]["proof"]["kind"] == "nothing_signed"
    assert body["resolution"]["applied_at"] is not None
    assert _burn(body["movement"])["failure_proven"] is True
    retried = await api["bob"].post(f"/v3/movements/{rid}/nodes/burn/retry")
    assert retried.status_code == 200, retried.text
    assert _burn(retried.json())["node_state"] == "READY"
