"""The issue's "Done when": a multi-node DAG with a branch, driven from creation
to COMPLETED by the three passes, and every failure path. Real PostgreSQL,
the real sandbox provider."""

from __future__ import annotations

import pytest

from qtg.db import Query
from qtg.providers.sandbox.signer import SandboxSigner
from qtg.services.context import ServiceContext
from qtg.services.dispatch import dispatch_ready_nodes
from qtg.services.movements import complete_manual_node, get_movement, retry_node

from .helpers import Q, drive, eventually, movement, node, states, template

CALLBACK = "http://127.0.0.1:9/callbacks"  # never contacted here: only outbox rows matter

#: CEX withdrawal -> destination-chain receive -> CCTP burn/attestation/mint, with a
#: branch: after the receive, a protocol check runs beside the CCTP lane and the
#: mint waits for both (a join).
BRIDGE_NODES = [
    node("withdraw", "cex_withdrawal"),
    node("receive", "destination_chain_receive_observe", "observe", txid="$ref:withdraw.txid"),
    node("burn", "cctp_burn", source_tx="$ref:withdraw.txid"),
    node("attest", "cctp_attestation", "observe", message_hash="$ref:burn.message_hash"),
    node("check", "protocol_observe", "observe"),
    node("mint", "cctp_mint", attestation="$ref:attest.attestation"),
]
BRIDGE_EDGES = [
    ["withdraw", "receive"],
    ["receive", "burn"],
    ["burn", "attest"],
    ["attest", "mint"],
    ["receive", "check"],
    ["check", "mint"],
]


async def test_bridge_with_branch_completes_with_full_trail(svc: ServiceContext) -> None:
    await template(svc, "bridge", BRIDGE_NODES, BRIDGE_EDGES)
    m = await movement(svc, "bridge", callback_url=CALLBACK)
    assert m["request_state"] == "APPROVED"
    assert states(m) == {
        "withdraw": "READY", "receive": "BLOCKED", "burn": "BLOCKED",
        "attest": "BLOCKED", "check": "BLOCKED", "mint": "BLOCKED",
    }  # fmt: skip

    done = await drive(svc, m["id"])

    assert done["request_state"] == "COMPLETED"
    assert set(states(done).values()) == {"COMPLETED"}
    # one side effect per action node, never a second submit
    subs = await svc.db.fetch(Q["submissions"])
    action_ids = {str(n["id"]) for n in done["nodes"] if n["node_kind"] == "action"}
    assert sorted(s["request_node_id"] for s in subs) == sorted(action_ids)
    assert all(s["duplicate_submits"] == 0 for s in subs)
    # $ref resolution: the mint's prepared payload carries the attestation the
    # attest node observed, which came from the burn's message hash
    nodes = {n["node_key"]: n for n in done["nodes"]}
    mint = await svc.db.fetchrow(Q["node"], {"rid": m["id"], "key": "mint"})
    assert nodes["attest"]["provider_refs"]["attestation"] in mint["prepared_action"]["payload"]
    burn = await svc.db.fetchrow(Q["node"], {"rid": m["id"], "key": "burn"})
    assert nodes["withdraw"]["provider_refs"]["txid"] in burn["prepared_action"]["payload"]
    # signed actions carry a signature the sandbox signer verifies
    signer = svc.providers.signer("sandbox")
    assert isinstance(signer, SandboxSigner)
    assert signer.verify(burn["prepared_action"]["payload"], burn["prepared_action"]["signature"])

    events = await svc.db.fetch(Q["events"], {"rid": m["id"]})
    # the join: mint became READY only after both of its predecessors completed
    at = {
        (e["node_key"], e["to_state"]): e["id"]
        for e in events
        if e["event_type"] == "node_state_changed"
    }
    assert at[("mint", "READY")] > at[("attest", "COMPLETED")]
    assert at[("mint", "READY")] > at[("check", "COMPLETED")]
    # every node went through its path, each change recorded once
    assert [e["to_state"] for e in events if e["node_key"] == "burn"] == [
        "READY", "SUBMITTING", "SUBMITTED", "COMPLETED",
    ]  # fmt: skip
    assert [e["to_state"] for e in events if e["node_key"] == "receive"] == [
        "READY", "OBSERVING", "COMPLETED",
    ]  # fmt: skip
    kinds = [e["event_type"] for e in events]
    assert kinds[0] == "request_created"
    assert "frontier_advanced" in kinds
    assert [e["to_state"] for e in events if e["event_type"] == "request_state_changed"] == [
        "APPROVED", "EXECUTING", "COMPLETED",
    ]  # fmt: skip
    # a callback-outbox row for every event, and audit rows for the human actions
    callbacks = await svc.db.fetch(Q["callbacks"], {"rid": m["id"]})
    assert [c["event_id"] for c in callbacks] == [e["id"] for e in events]
    audit = await svc.db.fetch(Q["audit"], {"oid": str(m["id"])})
    assert [(a["action"], a["actor"]) for a in audit] == [
        ("movement.created", "alice"), ("movement.approved", "bob"),
    ]  # fmt: skip


async def test_submit_refused_fails_the_node_and_the_request(svc: ServiceContext) -> None:
    await template(
        svc,
        "refused",
        [node("withdraw", "cex_withdrawal", sandbox={"fail": "submit_rejected"})],
        [],
    )
    m = await movement(svc, "refused")
    done = await drive(svc, m["id"])
    assert done["request_state"] == "FAILED"
    withdraw = done["nodes"][0]
    assert (withdraw["node_state"], withdraw["error_code"]) == ("FAILED", "SANDBOX_SUBMIT_REJECTED")
    assert await svc.db.fetch(Q["submissions"]) == []

    # retry: a new attempt with a new idempotency key, which fails again the same way
    retried = await retry_node(svc.db, m["id"], "withdraw", actor="carol")
    assert retried["request_state"] == "EXECUTING"
    assert states(retried)["withdraw"] == "READY"
    again = await drive(svc, m["id"])
    assert again["request_state"] == "FAILED"
    assert again["nodes"][0]["attempt_no"] == 2


async def test_failure_after_a_side_effect_needs_a_human(svc: ServiceContext) -> None:
    await template(
        svc,
        "half",
        [
            node("withdraw", "cex_withdrawal"),
            node("bridge", "ccip_send", sandbox={"fail": "observe_failed"}),
        ],
        [["withdraw", "bridge"]],
    )
    m = await movement(svc, "half", callback_url=CALLBACK)
    done = await drive(svc, m["id"])
    assert done["request_state"] == "MANUAL_INTERVENTION"
    assert states(done) == {"withdraw": "COMPLETED", "bridge": "FAILED"}
    events = await svc.db.fetch(Q["events"], {"rid": m["id"]})
    attention = [e for e in events if e["event_type"] == "request_attention"]
    assert len(attention) == 1
    callbacks = await svc.db.fetch(Q["callbacks"], {"rid": m["id"]})
    assert "request_attention" in [c["event_type"] for c in callbacks]


async def test_manual_node_waits_for_an_operator(svc: ServiceContext) -> None:
    await template(
        svc,
        "manual",
        [
            node("withdraw", "cex_withdrawal"),
            node("confirm", "manual_confirm", "manual"),
            node("finality", "destination_chain_finality_observe", "observe"),
        ],
        [["withdraw", "confirm"], ["confirm", "finality"]],
    )
    m = await movement(svc, "manual")
    waiting = await drive(svc, m["id"])
    assert waiting["request_state"] == "WAITING_MANUAL_ACTION"
    assert states(waiting) == {"withdraw": "COMPLETED", "confirm": "READY", "finality": "BLOCKED"}
    # the dispatcher never touches a manual node, however often it runs
    assert (await drive(svc, m["id"]))["request_state"] == "WAITING_MANUAL_ACTION"

    after = await complete_manual_node(
        svc.db, m["id"], "confirm", actor="dora", artifacts={"ticket": "OPS-1"}
    )
    assert after["request_state"] == "EXECUTING"
    assert states(after)["finality"] == "READY"
    done = await drive(svc, m["id"])
    assert done["request_state"] == "COMPLETED"
    confirm = {n["node_key"]: n for n in done["nodes"]}["confirm"]
    assert confirm["artifacts"] == {"ticket": "OPS-1"}
    assert confirm["provider_refs"] == {"completed_by": "dora"}


async def test_an_approval_moves_the_request_then_releases_its_roots(svc: ServiceContext) -> None:
    # One transaction: the request APPROVED with its first frontier (one UPDATE
    # of the request), then each root READY; the join waits.
    await template(
        svc,
        "two_roots",
        [node("a", "cex_withdrawal"), node("b", "cex_withdrawal"), node("join", "cex_withdrawal")],
        [["a", "join"], ["b", "join"]],
    )
    m = await movement(svc, "two_roots")
    assert m["request_state"] == "APPROVED"
    assert m["current_frontier"] == ["a", "b"]
    assert states(m) == {"a": "READY", "b": "READY", "join": "BLOCKED"}
    events = await svc.db.fetch(Q["events"], {"rid": m["id"]})
    approval = [e for e in events if e["event_type"] != "request_created"]
    assert [(e["event_type"], e["node_key"], e["to_state"]) for e in approval] == [
        ("request_state_changed", None, "APPROVED"),
        ("frontier_advanced", None, None),
        ("node_state_changed", "a", "READY"),
        ("node_state_changed", "b", "READY"),
    ]
    assert approval[1]["payload"] == {"frontier": ["a", "b"]}
    assert len({e["xact_id"] for e in approval}) == 1


async def test_manual_only_frontier_waits_right_after_approval(svc: ServiceContext) -> None:
    await template(svc, "gate", [node("gate", "manual_release", "manual")], [])
    m = await movement(svc, "gate")
    assert m["request_state"] == "WAITING_MANUAL_ACTION"


@pytest.mark.parametrize(
    ("fail", "outcome", "node_state", "submissions"),
    [
        # the side effect happened, then the submit call crashed: recovery finds it
        ("submit_crash_after", "COMPLETED", "COMPLETED", 1),
        # it crashed before anything was sent: recovery says so, the node FAILS cleanly
        ("submit_crash_before", "FAILED", "FAILED", 0),
    ],
)
async def test_unknown_submit_outcome_is_resolved_by_recovery(
    svc: ServiceContext, fail: str, outcome: str, node_state: str, submissions: int
) -> None:
    await template(svc, "crashy", [node("withdraw", "cex_withdrawal", sandbox={"fail": fail})], [])
    m = await movement(svc, "crashy")
    done = await drive(svc, m["id"])
    assert done["request_state"] == outcome
    assert states(done)["withdraw"] == node_state
    events = await svc.db.fetch(Q["events"], {"rid": m["id"]})
    assert "UNKNOWN" in [e["to_state"] for e in events if e["node_key"] == "withdraw"]
    subs = await svc.db.fetch(Q["submissions"])
    assert len(subs) == submissions
    assert all(s["duplicate_submits"] == 0 for s in subs)


async def test_plan_edited_after_approval_is_refused_as_drift(svc: ServiceContext) -> None:
    await template(svc, "drift", [node("withdraw", "cex_withdrawal", venue="a")], [])
    m = await movement(svc, "drift")
    await svc.db.execute(
        Query("tests/edit", 'UPDATE plan_nodes SET config = \'{"venue": "b"}\'::jsonb')
    )
    done = await drive(svc, m["id"])
    assert done["request_state"] == "FAILED"
    assert done["nodes"][0]["error_code"] == "PLAN_HASH_DRIFT"
    assert await svc.db.fetch(Q["submissions"]) == []


async def test_timeout_policy_edit_is_not_drift(svc: ServiceContext) -> None:
    # The reference: timeout_policy is outside both hashes.
    await template(svc, "nodrift", [node("withdraw", "cex_withdrawal")], [])
    m = await movement(svc, "nodrift")
    await svc.db.execute(
        Query(
            "tests/edit",
            "UPDATE plan_nodes SET timeout_policy = '{\"observe_seconds\": 5}'::jsonb",
        )
    )
    assert (await drive(svc, m["id"]))["request_state"] == "COMPLETED"


async def test_unresolved_ref_fails_the_node(svc: ServiceContext) -> None:
    await template(
        svc,
        "badref",
        [
            node("withdraw", "cex_withdrawal"),
            node("burn", "cctp_burn", source_tx="$ref:withdraw.no_such_field"),
        ],
        [["withdraw", "burn"]],
    )
    m = await movement(svc, "badref")
    done = await drive(svc, m["id"])
    burn = {n["node_key"]: n for n in done["nodes"]}["burn"]
    assert (burn["node_state"], burn["error_code"]) == ("FAILED", "CONFIG_REF_UNRESOLVED")
    assert "no_such_field" in burn["error_detail"]
    # the withdrawal had moved money: a human must look
    assert done["request_state"] == "MANUAL_INTERVENTION"


async def test_risk_controls_refuse_before_any_executor_call(svc: ServiceContext) -> None:
    await template(
        svc,
        "capped",
        [node("withdraw", "cex_withdrawal")],
        [],
        risk_controls={"max_amount": "50"},
    )
    m = await movement(svc, "capped", amount="50.01")
    done = await drive(svc, m["id"])
    assert done["nodes"][0]["error_code"] == "RISK_CONTROL_VIOLATION"
    assert done["request_state"] == "FAILED"
    assert await svc.db.fetch(Q["submissions"]) == []


async def test_expired_observation_goes_unknown_never_failed(svc: ServiceContext) -> None:
    svc = ServiceContext(
        svc.db, svc.settings.replace(observe_timeout_enforcement_enabled=True), svc.providers
    )
    nodes = [
        node("withdraw", "cex_withdrawal"),
        node("receive", "destination_chain_receive_observe", "observe",
             sandbox={"observations_to_complete": 1000, "retry_after_seconds": 0.05}),
    ]  # fmt: skip
    nodes[1]["timeout_policy"] = {"observe_seconds": 3600}
    await template(svc, "slow", nodes, [["withdraw", "receive"]])
    m = await movement(svc, "slow", callback_url=CALLBACK)

    # run until the receive node is being observed (it never completes by
    # itself: 1000 observations), then age it past its timeout
    async def receive_observing() -> bool:
        await drive(svc, m["id"], stop=frozenset({"EXECUTING"}))
        return states(await get_movement(svc.db, m["id"]))["receive"] == "OBSERVING"

    await eventually(receive_observing)
    await svc.db.execute(
        Query(
            "tests/age",
            "UPDATE movement_request_nodes SET started_at = now() - interval '2 hours' "
            "WHERE node_key = 'receive'",
        )
    )
    done = await drive(svc, m["id"])
    receive = {n["node_key"]: n for n in done["nodes"]}["receive"]
    assert (receive["node_state"], receive["error_code"]) == ("UNKNOWN", "OBSERVATION_TIMEOUT")
    assert done["request_state"] == "MANUAL_INTERVENTION"
    events = await svc.db.fetch(Q["events"], {"rid": m["id"]})
    assert any(e["event_type"] == "request_attention" for e in events)
    assert "FAILED" not in {e["to_state"] for e in events}


async def test_observation_timeout_is_off_by_default(svc: ServiceContext) -> None:
    slowly = {"observations_to_complete": 2, "retry_after_seconds": 0.05}
    nodes = [node("receive", "destination_chain_receive_observe", "observe", sandbox=slowly)]
    nodes[0]["timeout_policy"] = {"observe_seconds": 1}
    await template(svc, "lenient", nodes, [])
    m = await movement(svc, "lenient")
    assert await dispatch_ready_nodes(svc) == 1  # READY -> OBSERVING, started_at set
    assert states(await get_movement(svc.db, m["id"]))["receive"] == "OBSERVING"
    await svc.db.execute(
        Query(
            "tests/age", "UPDATE movement_request_nodes SET started_at = now() - interval '2 hours'"
        )
    )
    assert (await drive(svc, m["id"]))["request_state"] == "COMPLETED"
