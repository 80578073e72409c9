"""verify_drift against a real anvil (issue 11): a changed contract (anvil_setCode)
and an unreachable chain are findings; a chain that matches again clears them;
GET /v3/drift shows them to a viewer and refuses bad query input with a 4xx."""

from __future__ import annotations

import pytest
from api.conftest import api, stream_overrides  # noqa: F401  (the real API server fixture)
from runtime.rt_procs import query

from evm.anvil import CHAIN_ID, KEYS, deploy_token, free_port
from qtg.config import ConfigError, Settings
from qtg.providers.registry import build_registry
from qtg.services.context import ServiceContext
from qtg.services.drift import verify_drift

OPEN = (
    "SELECT chain_id, subject, check_name, observed FROM drift_findings"
    " WHERE cleared_at IS NULL ORDER BY chain_id, subject, check_name"
)
PAGES = (
    "SELECT kind, severity, occurrences, resolved_at IS NOT NULL FROM notifications"
    " WHERE dedupe_key = %s"
)


async def test_a_changed_contract_and_a_dead_chain_are_found_then_cleared(
    anvil,
    dsn,
    db,
    api,  # noqa: F811
) -> None:
    token = deploy_token(anvil, 10**9)
    original = anvil.call("eth_getCode", token, "latest")
    dead = 999  # nothing listens on this loopback port
    settings = Settings.from_env(
        {
            "MG_DATABASE_URL": dsn,
            "MG_PROVIDERS": "evm",
            "MG_EVM_RPC_URLS": f"{CHAIN_ID}={anvil.url},{dead}=http://127.0.0.1:{free_port()}",
            "MG_EVM_SIGNER_PRIVATE_KEY": KEYS[0],
            "MG_EVM_RPC_READ_RETRIES": "0",
            "MG_VERIFY_DRIFT_CONTRACTS": f"{CHAIN_ID}:{token}:erc20",
        }
    )
    registry = build_registry(settings, db)
    ctx = ServiceContext(db=db, settings=settings, providers=registry)
    try:
        assert await verify_drift(ctx) == 1  # first sight: baselines; the dead chain: a finding
        assert query(dsn, OPEN) == [(dead, "chain", "reachable", "no: RpcUnavailable")]
        anvil.call("anvil_setCode", token, "0x6001600155")  # someone replaced the contract
        assert await verify_drift(ctx) >= 1
        found = query(dsn, OPEN)
        assert (CHAIN_ID, token.lower(), "code_hash") in [r[:3] for r in found]
        assert await verify_drift(ctx) == 0  # a drift that lasts stays one finding
        code_page = f"drift:{CHAIN_ID}:{token.lower()}:code_hash"
        # ...and pages once (issue 14's outbox), open until the chain matches again
        assert query(dsn, PAGES, (code_page,)) == [("drift", "warning", 1, False)]
        reply = await api["vic"].get("/v3/drift", params={"open": "true"})
        assert reply.status_code == 200
        items = reply.json()["items"]
        assert {(i["chain_id"], i["check_name"]) for i in items} >= {
            (dead, "reachable"),
            (CHAIN_ID, "code_hash"),
        }
        bad = await api["vic"].get("/v3/drift", params={"limit": "lots"})
        assert bad.status_code == 422 and "limit" in bad.text
        anvil.call("anvil_setCode", token, original)  # the chain matches its baseline again
        await verify_drift(ctx)
        assert [r[:3] for r in query(dsn, OPEN) if r[0] == CHAIN_ID] == []
        [(cleared,)] = query(
            dsn,
            "SELECT count(*) FROM drift_findings WHERE check_name = 'code_hash'"
            " AND cleared_at IS NOT NULL",
        )
        assert cleared == 1
        assert query(dsn, PAGES, (code_page,)) == [("drift", "warning", 1, True)]
    finally:
        await registry.aclose()


def test_a_bad_drift_contract_setting_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="MG_VERIFY_DRIFT_CONTRACTS"):
        Settings.from_env({"MG_VERIFY_DRIFT_CONTRACTS": "31337:notanaddress"})


async def test_a_template_token_is_watched_by_default_and_holds_its_transfers(
    anvil, dsn, db
) -> None:
    """Issue 43 item 4: drift watching is on by default for every configured token — here
    one a template pays with, listed nowhere else; its code swapped, transfers wait."""
    from evm.test_chain_faults import context, fresh_address
    from qtg.providers.base import RetryLater
    from qtg.services.templates import create_template

    token = deploy_token(anvil, 10**9)
    settings = Settings.from_env(
        {
            "MG_DATABASE_URL": dsn,
            "MG_PROVIDERS": "evm",
            "MG_EVM_RPC_URLS": f"{CHAIN_ID}={anvil.url}",
            "MG_EVM_SIGNER_PRIVATE_KEY": KEYS[0],
        }
    )
    assert settings.verify_drift_enabled and not settings.verify_drift_contracts
    evm = {"chain_id": CHAIN_ID, "token": token, "decimals": 0}
    await create_template(
        db,
        actor="alice",
        template_key="token.pay",
        name="token",
        graph={
            "nodes": [
                {
                    "key": "send",
                    "kind": "action",
                    "action_type": "evm_transfer",
                    "config": {"evm": evm},
                }
            ],
            "edges": [],
        },
    )
    registry = build_registry(settings, db)
    ctx = ServiceContext(db=db, settings=settings, providers=registry)
    try:
        await verify_drift(ctx)  # first sight: the token's baselines
        baselines = query(
            dsn,
            "SELECT check_name FROM drift_baselines WHERE lower(subject) = %s",
            (token.lower(),),
        )
        assert {b for (b,) in baselines} == {"code_hash", "decimals", "symbol"}
        anvil.call("anvil_setCode", token, "0x600160005260206000f3")
        await verify_drift(ctx)
        assert (CHAIN_ID, token.lower(), "code_hash") in [r[:3] for r in query(dsn, OPEN)]
        executor = registry.executor_for("evm_transfer")
        with pytest.raises(RetryLater) as held:
            await executor.preflight(context("drifted", fresh_address(), "5", token=token))
        assert held.value.code == "EVM_DRIFT_HOLD"
    finally:
        await registry.aclose()
