"""Pure CCIP rules (qtg/domain/ccip.py): lanes, logs, the reaper's verdict, drift checks."""

from __future__ import annotations

import json

import pytest
from eth_abi import encode

from qtg.config import ConfigError
from qtg.domain import ccip
from qtg.domain.ccip import Execution, LaneRegistry, Verdict, reap_verdict

ROUTER = "0x" + "11" * 20
TOKEN = "0x" + "22" * 20
MID = "0x" + "ab" * 32


def lane(**extra) -> ccip.Lane:
    raw = {
        "name": "l",
        "chain_id": 1,
        "source_selector": "1",
        "dest_selector": 2**64 - 1,
        "router": ROUTER,
        **extra,
    }
    return ccip.parse_lanes(json.dumps([raw]))["l"]


def test_lanes_parse_and_bad_items_name_the_variable_and_field() -> None:
    got = lane(tokens=[TOKEN.upper().replace("0X", "0x")])
    assert got.dest_selector == 2**64 - 1 and got.dest_router == ROUTER
    assert got.tokens == {TOKEN: "supported"} and got.execution == "router"
    assert ccip.parse_lanes("") == {}
    for bad, field in [
        ({"dest_selector": 2**64}, "dest_selector"),
        ({"router": "0x12"}, "router"),
        ({"execution": "off_ramp"}, "off_ramp"),  # off_ramp execution needs the off ramp
        ({"tokens": {TOKEN: "pool?"}}, "tokens"),
    ]:
        with pytest.raises(ConfigError, match=f"MG_CCIP_LANES: lane 0: {field}"):
            lane(**bad)
    with pytest.raises(ConfigError, match="used twice"):
        raw = {
            "name": "l",
            "chain_id": 1,
            "source_selector": 1,
            "dest_selector": 1,
            "router": ROUTER,
        }
        ccip.parse_lanes(json.dumps([raw, raw]))


def test_the_message_id_comes_from_whichever_send_event_the_receipt_has() -> None:
    # OnRamp 1.6: abi.encode(message) — offset, then the header's messageId
    v16 = {
        "topics": [ccip.CCIP_MESSAGE_SENT, "0x1", "0x2"],
        "data": "0x" + "20".rjust(64, "0") + MID[2:] + "00" * 32 * 4,
    }
    # OnRamp 1.5: messageId is the 13th head word of EVM2EVMMessage
    head = ["00" * 32] * 12 + [MID[2:]]
    v15 = {"topics": [ccip.CCIP_SEND_REQUESTED], "data": "0x" + "20".rjust(64, "0") + "".join(head)}
    local = {"topics": [ccip.MESSAGE_EXECUTED], "data": MID + "00" * 96}
    transfer = {"topics": ["0xddf252ad" + "00" * 28], "data": "0x" + "00" * 32}
    for logs in ([transfer, v16], [v15], [transfer, local]):
        assert ccip.message_id_from_logs(logs) == MID
    assert ccip.message_id_from_logs([transfer]) is None


def test_the_execution_state_is_read_for_that_message_only() -> None:
    other = "0x" + "cd" * 32
    executed = {
        "topics": [ccip.MESSAGE_EXECUTED],
        "data": other + "00" * 96,
        "transactionHash": "0x01",
    }
    assert ccip.execution_from_logs([executed], MID) is None
    mine = {**executed, "data": MID + "00" * 96, "transactionHash": "0xAB"}
    assert ccip.execution_from_logs([executed, mine], MID) == (Execution.SUCCESS, "0xab")

    def changed(state: int) -> dict:
        data = encode(["bytes32", "uint8", "bytes", "uint256"], [b"\x00" * 32, state, b"", 1])
        return {
            "topics": [ccip.EXECUTION_STATE_CHANGED, "0x1", "0x2", MID],
            "data": "0x" + data.hex(),
            "transactionHash": "0x02",
        }

    assert ccip.execution_from_logs([changed(1)], MID) is None  # in progress
    assert ccip.execution_from_logs([changed(2)], MID) == (Execution.SUCCESS, "0x02")
    assert ccip.execution_from_logs([changed(3)], MID)[0] is Execution.MANUAL_EXECUTION_NEEDED


@pytest.mark.parametrize(
    ("facts", "verdict"),
    [
        ({"receipt_status": 1, "message_id": MID}, Verdict.SENT),
        ({"receipt_status": 1, "message_id": MID, "executed": True}, Verdict.DELIVERED),
        ({"receipt_status": 0}, Verdict.REVERTED),
        ({"receipt_status": 1, "state": "sent", "message_id": MID}, Verdict.STRANDED),
        # nonce 7 went to another transaction, read from its block
        ({"tx_known": False, "mined_nonce": 8, "consumed_by_other": True}, Verdict.RELEASED),
        # used, but what used it is not read: no lookup found ours is no proof (issue 43)
        ({"tx_known": False, "mined_nonce": 8}, Verdict.STRANDED),
        ({"tx_known": False, "mined_nonce": 7}, Verdict.STRANDED),  # the chain cannot tell
        ({"tx_known": True, "mined_nonce": 7}, Verdict.STRANDED),  # broadcast, unmined
        ({"tx_known": False, "mined_nonce": None}, Verdict.STRANDED),  # no client here
    ],
)
def test_the_reaper_releases_only_what_the_chain_proves_unsent(facts, verdict) -> None:
    base = {
        "state": "pending",
        "receipt_status": None,
        "message_id": None,
        "tx_known": True,
        "nonce": 7,
        "mined_nonce": 7,
    }
    assert reap_verdict(**{**base, **facts}) is verdict


def test_drift_checks_compare_the_registry_with_the_configured_lane() -> None:
    pool = "0x" + "33" * 20
    configured = lane(
        on_ramp="0x" + "44" * 20,
        tokens={TOKEN: pool},
        rate_limits={TOKEN: {"capacity": 5, "rate": 1}},
    )
    same = ccip.registry_from_json(
        {
            "router": ROUTER.upper().replace("0X", "0x"),
            "on_ramp": "0x" + "44" * 20,
            "tokens": {TOKEN: {"pool": pool, "rate_limit": {"rate": 1, "capacity": 5}}},
        }
    )
    assert all(e == o for _, e, o in ccip.drift_checks(configured, same))
    gone = LaneRegistry(router=None, on_ramp=None, tokens={})
    assert [(c, o) for c, e, o in ccip.drift_checks(configured, gone) if e != o] == [
        ("router", "none"),
        ("on_ramp", "none"),
        (f"pool:{TOKEN}", "none"),
        (f"rate_limit:{TOKEN}", "none"),
    ]


def test_the_execution_search_starts_at_the_send_or_below_the_destinations_height() -> None:
    same = lane()
    assert ccip.execution_from_block(same, 1234, None) == 1234
    other = lane(dest_chain_id=10)
    assert ccip.execution_from_block(other, 1234, 5000) == 5000 - ccip.DEST_BLOCK_MARGIN
    assert ccip.execution_from_block(other, 1234, 20) == 0
    assert ccip.execution_from_block(other, 1234, 9999, known=4900) == 4900
