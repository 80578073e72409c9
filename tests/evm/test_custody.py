"""Issue 45 items 4 and 5 under a real `bin/qtg-runtime` and a real anvil: keys out of
the runtime (a keystore; a PKCS#11 token in tests/evm/test_custody_pkcs11.py), and a
signer that checks what it signs.

- the keystore backend signs and the transfer lands, with no key in the runtime's
  environment and neither key nor passphrase in its logs;
- a movement whose destination or amount is changed in the database after approval
  (with its plan hash re-forged, so only the seal can tell) is refused by the signer:
  the node waits, a critical page is raised, nothing is signed, the chain is unchanged;
  past MG_NODE_TRANSIENT_ATTENTION_SECONDS the movement needs a person, who cancels it;
- a signer whose identity is not the enrolled one waits and pages; enrolling the right
  identity (the operator's way out) lets the same movement complete.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from eth_account import Account
from runtime.rt_procs import RuntimeProcess, all_completed, base_env, query, wait_until

from evm.anvil import ADDRESSES, CHAIN_ID, KEYS
from evm.test_transient_and_lanes import FAST, fresh_address, seed
from qtg.db import Database
from qtg.domain.execution import plan_from_rows
from qtg.domain.plan import compiled_plan_hash
from qtg.services import progress
from qtg.services.health import set_expected_signer_identity
from qtg.services.movements import cancel_movement

pytestmark = pytest.mark.slow

WEI = 10**18
PASSPHRASE = "correct horse battery staple"


def launch_keyless(procs: list, dsn: str, anvil, **env: str) -> RuntimeProcess:
    """A runtime whose environment names no private key (only `env`'s backend)."""
    full = base_env(
        MG_DATABASE_URL=dsn,
        MG_PROVIDERS="evm",
        MG_EVM_RPC_URLS=f"{CHAIN_ID}={anvil.url}",
        MG_EXECUTOR_HEALTH_INTERVAL_SECONDS="0.5",
        **{**FAST, **env},
    )
    assert "MG_EVM_SIGNER_PRIVATE_KEY" not in full and "MG_EVM_SIGNER_KEY_FILE" not in full
    assert not any(KEYS[0][2:].lower() in v.lower() for v in full.values())
    proc = RuntimeProcess.launcher(full)
    procs.append(proc)
    return proc


def keystore_env(tmp_path: Path, key: str = KEYS[0]) -> dict[str, str]:
    keystore = tmp_path / "signer.keystore.json"
    keystore.write_text(json.dumps(Account.encrypt(key, PASSPHRASE, iterations=2**10)))
    passphrase = tmp_path / "signer.passphrase"
    passphrase.write_text(PASSPHRASE + "\n")
    return {
        "MG_EVM_SIGNER_BACKEND": "keystore",
        "MG_EVM_SIGNER_KEYSTORE_FILE": str(keystore),
        "MG_EVM_SIGNER_KEYSTORE_PASSPHRASE_FILE": str(passphrase),
    }


def logged(proc: RuntimeProcess) -> str:
    with proc._cond:
        return "\n".join(proc.lines)


def test_the_keystore_backend_signs_and_the_transfer_lands(anvil, dsn, procs, tmp_path) -> None:
    to = fresh_address()
    sent_before = anvil.nonce(ADDRESSES[0])
    proc = launch_keyless(procs, dsn, anvil, **keystore_env(tmp_path))
    proc.wait_ready()
    ids = seed(dsn, [(to, "0.25")], key="custody.keystore")
    wait_until(lambda: all_completed(dsn, ids), 30, "the keystore-signed transfer to complete")
    assert anvil.balance(to) == WEI // 4
    assert anvil.nonce(ADDRESSES[0]) == sent_before + 1
    [(tx_hash,)] = query(dsn, "SELECT tx_hash FROM evm_nonce_reservations")
    tx = anvil.call("eth_getTransactionByHash", tx_hash)
    assert tx["from"].lower() == ADDRESSES[0].lower()
    text = logged(proc)
    assert KEYS[0][2:] not in text.lower() and PASSPHRASE not in text
    # the approval's audit row carries the seal the signer compared with
    [(seal, audited)] = query(
        dsn,
        "SELECT r.approval_seal, o.detail->>'approval_seal' FROM movement_requests r"
        " JOIN audit_outbox o ON o.object_id = r.id::text AND o.action = 'movement.approved'"
        " UNION ALL SELECT r.approval_seal, e.detail->>'approval_seal' FROM movement_requests r"
        " JOIN audit_events e ON e.object_id = r.id::text AND e.action = 'movement.approved'",
    )
    assert seal is not None and seal == audited


def tamper(dsn: str, request_id: str, **intent_changes: Any) -> None:
    """An attacker with write access to the database who also knows how the plan hash
    is taken: the intent is changed and compiled_plan_hash re-forged to match, so the
    dispatcher's drift check passes and only the approval seal can tell."""

    async def forge() -> tuple[dict[str, Any], str]:
        async with Database(dsn, min_size=1, max_size=1) as db, db.transaction() as tx:
            snap = await progress.load_snapshot(tx, request_id, plan_edges=True)
        intent = {**snap.request["intent"], **intent_changes}
        plan = plan_from_rows(snap.nodes, snap.plan_edges)
        return intent, compiled_plan_hash(plan, intent, snap.request["input_params"])

    intent, forged = trio.run(forge)
    query(
        dsn,
        "UPDATE movement_requests SET intent = %s::jsonb, compiled_plan_hash = %s WHERE id = %s",
        (json.dumps(intent), forged, request_id),
    )


def node_wait(dsn: str, ids: list[str]) -> tuple | None:
    rows = query(
        dsn,
        "SELECT node_state, error_code, dispatch_not_before IS NOT NULL"
        " FROM movement_request_nodes WHERE request_id = ANY(%s::uuid[])",
        (ids,),
    )
    return rows[0] if rows and rows[0][1] else None


def pages(dsn: str, ids: list[str]) -> list[tuple]:
    return query(
        dsn,
        "SELECT kind, severity, subject FROM notifications WHERE request_id = ANY(%s::uuid[])"
        " AND kind = 'custody_refusal'",
        (ids,),
    )


@pytest.mark.parametrize("edit", ["destination", "amount"])
def test_a_movement_edited_after_approval_is_refused_and_paged(
    anvil, dsn, procs, tmp_path, edit
) -> None:
    approved_to, attacker = fresh_address(), fresh_address()
    ids = seed(dsn, [(approved_to, "0.5")], key=f"custody.tamper.{edit}")  # approved by bob
    tamper(dsn, ids[0], **({"destination": attacker} if edit == "destination" else {"amount": "9"}))
    sent_before, balance_before = anvil.nonce(ADDRESSES[0]), anvil.balance(ADDRESSES[0])
    proc = launch_keyless(
        procs, dsn, anvil, MG_NODE_TRANSIENT_ATTENTION_SECONDS="12", **keystore_env(tmp_path)
    )
    proc.wait_ready()
    state, code, waiting = wait_until(lambda: node_wait(dsn, ids), 30, "the signer's refusal")
    assert (state, code, waiting) == ("READY", "CUSTODY_SEAL_MISMATCH", True)
    [(_, severity, subject)] = wait_until(lambda: pages(dsn, ids), 10, "the critical page")
    assert severity == "critical" and "CUSTODY_SEAL_MISMATCH" in subject
    # it stays refused across retries (every 5 s here): never signed
    wait_until(
        lambda: query(
            dsn,
            "SELECT transient_tries >= 2 FROM movement_request_nodes WHERE request_id = %s",
            (ids[0],),
        )[0][0],
        30,
        "a second refusal",
    )
    assert query(dsn, "SELECT count(*) FROM evm_signed_transactions") == [(0,)]
    assert anvil.nonce(ADDRESSES[0]) == sent_before
    assert anvil.balance(ADDRESSES[0]) == balance_before
    assert anvil.balance(attacker) == 0 and anvil.balance(approved_to) == 0
    # past the attention bound the movement is in front of a person, who cancels it
    wait_until(
        lambda: query(
            dsn, "SELECT 1 FROM movement_requests WHERE id = %s"
            " AND request_state = 'MANUAL_INTERVENTION'", (ids[0],),
        ),
        30,
        "the refused movement to need a person",
    )  # fmt: skip

    async def cancel() -> None:
        async with Database(dsn, min_size=1, max_size=1) as db:
            await cancel_movement(db, ids[0], actor="carol", reason="edited after approval")

    trio.run(cancel)
    assert query(dsn, "SELECT request_state FROM movement_requests WHERE id = %s", (ids[0],)) == [
        ("CANCELLED",)
    ]
    assert query(dsn, "SELECT count(*) FROM evm_signed_transactions") == [(0,)]
    assert anvil.nonce(ADDRESSES[0]) == sent_before
    assert anvil.balance(attacker) == 0 and anvil.balance(approved_to) == 0


def test_a_signer_that_is_not_the_enrolled_identity_waits_and_pages(
    anvil, dsn, procs, tmp_path
) -> None:
    to = fresh_address()
    proc = launch_keyless(procs, dsn, anvil, **keystore_env(tmp_path))
    proc.wait_ready()
    wait_until(
        lambda: query(dsn, "SELECT 1 FROM signers WHERE signer_key = 'evm_local'"),
        30,
        "the runtime's signer in the roster",
    )

    def enrol(address: str) -> None:
        async def run() -> None:
            async with Database(dsn, min_size=1, max_size=1) as db:
                await set_expected_signer_identity(db, "evm_local", address, actor="admin")

        trio.run(run)

    enrol(ADDRESSES[1])  # the roster expects another key than the one this runtime holds
    sent_before = anvil.nonce(ADDRESSES[0])
    ids = seed(dsn, [(to, "0.125")], key="custody.identity")
    state, code, _ = wait_until(lambda: node_wait(dsn, ids), 30, "the identity refusal")
    assert (state, code) == ("READY", "SIGNER_IDENTITY_MISMATCH")
    [(_, severity, subject)] = wait_until(lambda: pages(dsn, ids), 10, "the critical page")
    assert severity == "critical" and "SIGNER_IDENTITY_MISMATCH" in subject
    assert query(dsn, "SELECT count(*) FROM evm_signed_transactions") == [(0,)]
    assert anvil.nonce(ADDRESSES[0]) == sent_before and anvil.balance(to) == 0
    # the way out: an admin enrols the identity the runtime really signs as
    enrol(ADDRESSES[0])
    wait_until(lambda: all_completed(dsn, ids), 30, "the movement to complete once enrolled")
    assert anvil.balance(to) == WEI // 8
    assert anvil.nonce(ADDRESSES[0]) == sent_before + 1
    # signed at last: the page is resolved (a later refusal pages again)
    assert query(
        dsn,
        "SELECT resolved_at IS NOT NULL FROM notifications WHERE kind = 'custody_refusal'",
    ) == [(True,)]
