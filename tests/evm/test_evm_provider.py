"""The `evm` provider against a real anvil (issue 11): a native transfer through
preflight → prepare → sign → submit → observe, nonce reservations raced by several
connections, recover from the chain alone, and evm_nonce_reaper's verdicts."""

from __future__ import annotations

import json

import pytest
import trio
from runtime.rt_procs import query

from evm.anvil import ADDRESSES, CHAIN_ID, KEYS
from qtg.config import ConfigError, Settings
from qtg.db import Database
from qtg.domain.context import ExecutionContext
from qtg.domain.execution import build_sign_request
from qtg.providers.base import ObserveStatus, PreflightError, RecoverOutcome
from qtg.providers.evm import nonces as nonce_store
from qtg.providers.registry import build_registry
from qtg.runtime.registry import resolve_workers
from qtg.services import evm_nonces
from qtg.services.context import ServiceContext
from qtg.services.movements import create_movement
from qtg.services.templates import create_template


def settings_for(anvil, dsn: str, **more) -> Settings:
    return Settings.from_env(
        {
            "MG_DATABASE_URL": dsn,
            "MG_PROVIDERS": "evm",
            "MG_EVM_RPC_URLS": f"{CHAIN_ID}={anvil.url}",
            "MG_EVM_SIGNER_PRIVATE_KEY": KEYS[0],
            **more,
        }
    )


def context(node_id: str, amount: str = "1.5", attempt: int = 1, refs=None) -> ExecutionContext:
    return ExecutionContext(
        request_id="r-" + node_id,
        request_node_id=node_id,
        compiled_plan_hash="0" * 64,
        template_key="t",
        template_version=1,
        node_key="send",
        node_kind="action",
        action_type="evm_transfer",
        attempt_no=attempt,
        intent={"asset": "ETH", "amount": amount, "destination": ADDRESSES[1]},
        input_params={},
        resolved_bindings={},
        risk_controls={},
        prior_artifacts=[],
        node_config={"evm": {"chain_id": CHAIN_ID}},
        provider_context={},
        timeout_policy={},
        node_provider_refs=refs or {},
    )


async def send(registry, ctx: ExecutionContext):
    executor = registry.executor_for("evm_transfer")
    await executor.preflight(ctx)
    prepared = await executor.prepare(ctx)
    signature = await registry.signer(prepared.signer_key).sign(build_sign_request(ctx, prepared))
    return (
        executor,
        prepared,
        await executor.submit(ctx, prepared, signature, "k-" + ctx.request_node_id),
    )


async def test_native_transfer_moves_eth_once_and_consumes_its_nonce(anvil, dsn, db) -> None:
    registry = build_registry(settings_for(anvil, dsn), db)
    assert registry.capabilities == {"evm_rpc"}
    before_to, nonce_before = anvil.balance(ADDRESSES[1]), anvil.nonce(ADDRESSES[0])
    try:
        executor, prepared, result = await send(registry, context("n1"))
        assert json.loads(prepared.payload)["nonce"] == str(nonce_before)
        refs = result.provider_refs
        observed = await executor.observe(context("n1", refs=refs))
        assert observed.status is ObserveStatus.COMPLETED, observed
        health = await registry.signer("evm_local").health()
        assert health.signer_address == ADDRESSES[0]
    finally:
        await registry.aclose()
    assert anvil.balance(ADDRESSES[1]) - before_to == 1_500_000_000_000_000_000
    assert anvil.nonce(ADDRESSES[0]) == nonce_before + 1  # exactly one transaction
    rows = query(dsn, "SELECT nonce, state, tx_hash FROM evm_nonce_reservations")
    assert rows == [(nonce_before, "consumed", refs["tx_hash"])]


async def test_preflight_refuses_a_bad_destination_and_an_unknown_chain(anvil, dsn, db) -> None:
    registry = build_registry(settings_for(anvil, dsn), db)
    executor = registry.executor_for("evm_transfer")
    try:
        bad = context("n2")
        bad = ExecutionContext(
            **{
                **{f: getattr(bad, f) for f in bad.__struct_fields__},
                "intent": {"amount": "1", "destination": "0xabc"},
            }
        )
        with pytest.raises(PreflightError) as exc:
            await executor.preflight(bad)
        assert exc.value.code == "EVM_BAD_DESTINATION"
        other = ExecutionContext(
            **{
                **{f: getattr(bad, f) for f in bad.__struct_fields__},
                "node_config": {"evm": {"chain_id": 1}},
            }
        )
        with pytest.raises(PreflightError) as exc:
            await executor.preflight(other)
        assert exc.value.code == "EVM_CHAIN_UNKNOWN"
    finally:
        await registry.aclose()


async def race(dsn: str, take, connections: int = 6) -> None:
    """Run `take(db, i)` for i < `connections` side by side, each on a pool of its own."""
    dbs = [Database(dsn, min_size=1, max_size=1) for _ in range(connections)]
    try:
        async with trio.open_nursery() as nursery:
            for i, db in enumerate(dbs):
                nursery.start_soon(take, db, i)
    finally:
        for db in dbs:
            await db.close()


async def test_reservations_raced_by_many_connections_are_distinct_and_consecutive(dsn) -> None:
    nonces: list[int] = []

    async def take(db: Database, i: int) -> None:
        for j in range(5):
            nonces.append(
                await nonce_store.reserve(
                    db,
                    chain_id=CHAIN_ID,
                    address=ADDRESSES[0],
                    request_node_id=f"n{i}-{j}",
                    attempt_no=1,
                    chain_floor=3,
                )
            )

    await race(dsn, take)
    assert sorted(nonces) == list(range(3, 33))


async def test_reserve_is_idempotent_per_attempt_and_reuses_a_released_nonce(db) -> None:
    args = {"chain_id": CHAIN_ID, "address": ADDRESSES[0], "chain_floor": 0}
    a = await nonce_store.reserve(db, request_node_id="a", attempt_no=1, **args)
    assert await nonce_store.reserve(db, request_node_id="a", attempt_no=1, **args) == a
    b = await nonce_store.reserve(db, request_node_id="b", attempt_no=1, **args)
    await nonce_store.mark(
        db, chain_id=CHAIN_ID, address=ADDRESSES[0], nonce=a, state="released",
        owner="a", attempt_no=1,
    )  # fmt: skip
    assert (
        await nonce_store.reserve(db, request_node_id="c", attempt_no=1, **args) == a
    )  # gap filled
    assert await nonce_store.reserve(db, request_node_id="d", attempt_no=1, **args) == b + 1


async def test_runs_raced_with_single_reservations_stay_consecutive(dsn) -> None:
    """An allowance raise and its spend take consecutive nonces (reserve_run) while other
    connections take single nonces and give some back: no nonce of ours runs between a
    raise and its spend, and the spend is never below its raise."""
    runs: list[list[int]] = []
    singles: list[int] = []
    args = {"chain_id": CHAIN_ID, "address": ADDRESSES[0], "attempt_no": 1, "chain_floor": 3}

    async def take(db: Database, i: int) -> None:
        for j in range(6):
            key = f"n{i}-{j}"
            if i % 2:
                keys = [f"{key}:approve", key]
                runs.append(await nonce_store.reserve_run(db, request_node_ids=keys, **args))
                continue
            nonce = await nonce_store.reserve(db, request_node_id=key, **args)
            if j % 3 == 0:  # given back (a refused submit): a gap someone fills
                await nonce_store.release_unsigned(db, request_node_id=key, attempt_no=1)
            else:
                singles.append(nonce)

    await race(dsn, take)
    assert len(runs) == 18 and all(spend == raise_ + 1 for raise_, spend in runs), runs
    live = singles + [n for run in runs for n in run]
    assert len(set(live)) == len(live) == 48
    assert min(live) >= 3


async def test_a_run_reuses_released_runs_whole_and_mints_past_a_lone_released_nonce(db) -> None:
    args = {"chain_id": CHAIN_ID, "address": ADDRESSES[0], "chain_floor": 0}
    for i in range(6):  # nonces 0..5
        await nonce_store.reserve(db, request_node_id=f"s{i}", attempt_no=1, **args)
    for nonce in (0, 3, 4):  # a lone gap (0) and a run of two (3, 4)
        await nonce_store.mark(
            db, chain_id=CHAIN_ID, address=ADDRESSES[0], nonce=nonce, state="released",
            owner=f"s{nonce}", attempt_no=1,
        )  # fmt: skip

    async def run(key: str) -> list[int]:
        keys = [f"{key}:approve", key]
        return await nonce_store.reserve_run(db, request_node_ids=keys, attempt_no=1, **args)

    assert await run("a") == [3, 4]  # the released run, whole
    assert await run("a") == [3, 4]  # the attempt's own, again (idempotent prepare)
    assert await run("b") == [6, 7]  # no run left: minted, the lone gap left alone
    await nonce_store.mark(
        db, chain_id=CHAIN_ID, address=ADDRESSES[0], nonce=7, state="released",
        owner="b", attempt_no=1,
    )  # fmt: skip
    assert await run("c") == [8, 9]  # minted past a released nonce on top, never onto it
    single = await nonce_store.reserve(db, request_node_id="d", attempt_no=1, **args)
    assert single == 0  # single reservations fill the lone gaps
    # an attempt holding only its spend's nonce (its raise appeared between two
    # prepares) gives it back and takes a run: the raise is never above its spend
    e = await nonce_store.reserve(db, request_node_id="e", attempt_no=1, **args)
    assert e == 7
    assert await run("e") == [10, 11]
    assert await nonce_store.for_attempt(db, request_node_id="e", attempt_no=1) == {
        "chain_id": CHAIN_ID,
        "address": ADDRESSES[0].lower(),
        "nonce": 11,
        "state": "reserved",
        "tx_hash": None,
    }


async def test_a_nonce_released_while_one_is_minted_is_never_minted_again(db) -> None:
    """A release does not take the account lock: one that commits after reserve's
    take_released found nothing released and before its mint must not be minted again
    (found by the race above in CI: a UniqueViolation out of reserve)."""
    args = {"chain_id": CHAIN_ID, "address": ADDRESSES[0], "chain_floor": 0}
    await nonce_store.reserve(db, request_node_id="a", attempt_no=1, **args)
    top = await nonce_store.reserve(db, request_node_id="b", attempt_no=1, **args)
    mint = {
        "chain_id": CHAIN_ID,
        "address": ADDRESSES[0].lower(),
        "request_node_id": "c",
        "attempt_no": 1,
        "floor": 0,
    }
    async with db.transaction() as tx:  # reserve's steps, one by one
        await tx.execute(nonce_store.SQL.lock_account, mint)
        assert await tx.fetchval(nonce_store.SQL.take_released, mint) is None
        # meanwhile, on another connection: the top reservation is given back
        assert await nonce_store.release_unsigned(db, request_node_id="b", attempt_no=1) == [top]
        assert await tx.fetchval(nonce_store.SQL.take_next, mint) == top + 1
    # the released one is the next reservation's
    assert await nonce_store.reserve(db, request_node_id="d", attempt_no=1, **args) == top


async def test_recover_decides_from_the_chain_never_resends(anvil, dsn, db) -> None:
    registry = build_registry(settings_for(anvil, dsn), db)
    executor = registry.executor_for("evm_transfer")
    try:
        _, _, result = await send(registry, context("n3"))
        outcome = await executor.recover(context("n3", refs=result.provider_refs))
        assert outcome.outcome is RecoverOutcome.SUBMITTED
        # a hash the chain does not know is no proof of anything (issue 24): still in flight
        ctx = context("n4")
        prepared = await executor.prepare(ctx)
        nonce = int(json.loads(prepared.payload)["nonce"])
        refs = {
            "chain_id": CHAIN_ID,
            "tx_hash": "0x" + "ab" * 32,
            "from": ADDRESSES[0],
            "nonce": nonce,
        }
        sent_before = anvil.nonce(ADDRESSES[0])
        outcome = await executor.recover(context("n4", refs=refs))
        assert outcome.outcome is RecoverOutcome.SUBMITTED
        rows = query(dsn, "SELECT state FROM evm_nonce_reservations WHERE nonce = %s", (nonce,))
        assert rows == [("reserved",)]
        # no refs and no signed bytes kept (they are kept before any broadcast): provably
        # never sent, the nonce goes back and a new attempt is safe
        outcome = await executor.recover(context("n4"))
        assert outcome.outcome is RecoverOutcome.NOT_SUBMITTED
        assert anvil.nonce(ADDRESSES[0]) == sent_before
        rows = query(dsn, "SELECT state FROM evm_nonce_reservations WHERE nonce = %s", (nonce,))
        assert rows == [("released",)]
    finally:
        await registry.aclose()


async def test_reaper_releases_unbroadcast_and_consumes_used_nonces(anvil, dsn, db) -> None:
    settings = settings_for(anvil, dsn, MG_EVM_NONCE_RESERVATION_STALE_SECONDS="0.001")
    registry = build_registry(settings, db)
    try:
        [worker] = [
            w
            for w in resolve_workers(settings, registry.capabilities)
            if w.name == "evm_nonce_reaper"
        ]
        assert worker.enabled and worker.spec.group == "core"
        used = anvil.nonce(ADDRESSES[0])
        # the chain uses `used` (sent outside qtg); `used + 1` is never broadcast
        anvil.call(
            "eth_sendTransaction", {"from": ADDRESSES[0], "to": ADDRESSES[1], "value": "0x1"}
        )
        args = {"chain_id": CHAIN_ID, "address": ADDRESSES[0], "chain_floor": used}
        await nonce_store.reserve(db, request_node_id="x", attempt_no=1, **args)
        await nonce_store.reserve(db, request_node_id="y", attempt_no=1, **args)
        query(dsn, "SELECT pg_sleep(0.01)")  # updated_at strictly older than the 1 ms threshold
        ctx = ServiceContext(db=db, settings=settings, providers=registry)
        assert await evm_nonces.reap_stale_nonces(ctx) == 2
        rows = query(dsn, "SELECT nonce, state FROM evm_nonce_reservations ORDER BY nonce")
        assert rows == [(used, "consumed"), (used + 1, "released")]
    finally:
        await registry.aclose()


async def test_the_reaper_settles_only_its_own_classs_reservations(anvil, dsn, db) -> None:
    """Issue 25: a reservation belongs to the class of the movement whose node
    took it; a `default` reaper leaves a `testnet` one to testnet's runtimes (on
    main it settled both)."""
    settings = settings_for(anvil, dsn, MG_EVM_NONCE_RESERVATION_STALE_SECONDS="0.001")
    registry = build_registry(settings, db)
    await create_template(
        db, actor="alice", template_key="t", name="t",
        graph={"nodes": [{"key": "send", "kind": "action", "action_type": "evm_transfer"}]},
    )  # fmt: skip
    node_ids = {}
    for cls in ("default", "testnet"):
        created, _ = await create_movement(
            db, settings.replace(network_class=cls), template_key="t",
            intent={"asset": "ETH", "amount": "1", "destination": ADDRESSES[1]},
            idempotency_key=f"nonce-{cls}", actor="alice",
        )  # fmt: skip
        node_ids[cls] = str(created["nodes"][0]["id"])
    try:
        args = {"chain_id": CHAIN_ID, "address": ADDRESSES[0]}
        floor = anvil.nonce(ADDRESSES[0])
        for cls in ("default", "testnet"):  # never broadcast: each is released when reaped
            await nonce_store.reserve(
                db, request_node_id=node_ids[cls], attempt_no=1, chain_floor=floor, **args
            )
        query(dsn, "SELECT pg_sleep(0.01)")  # updated_at strictly older than the 1 ms threshold
        reservations = "SELECT request_node_id, state FROM evm_nonce_reservations ORDER BY nonce"
        ctx = ServiceContext(db=db, settings=settings, providers=registry)
        assert await evm_nonces.reap_stale_nonces(ctx) == 1
        assert query(dsn, reservations) == [
            (node_ids["default"], "released"),
            (node_ids["testnet"], "reserved"),
        ]
        testnet = ServiceContext(
            db=db, settings=settings.replace(network_class="testnet"), providers=registry
        )
        assert await evm_nonces.reap_stale_nonces(testnet) == 1
        assert query(dsn, reservations)[1] == (node_ids["testnet"], "released")
    finally:
        await registry.aclose()


def test_settings_name_a_bad_rpc_url_and_mask_the_key() -> None:
    with pytest.raises(ConfigError, match="MG_EVM_RPC_URLS"):
        Settings.from_env({"MG_EVM_RPC_URLS": "mainnet=http://x"})
    with pytest.raises(ConfigError, match="MG_EVM_RPC_URLS"):
        Settings.from_env({"MG_EVM_RPC_URLS": "1=ftp://x"})
    redacted = Settings.from_env({"MG_EVM_SIGNER_PRIVATE_KEY": KEYS[0]}).redacted()
    assert redacted["MG_EVM_SIGNER_PRIVATE_KEY"] == "***"
    assert KEYS[0] not in repr(redacted)


def test_without_rpc_urls_the_reaper_is_skipped() -> None:
    [worker] = [
        w for w in resolve_workers(Settings.from_env({}), set()) if w.name == "evm_nonce_reaper"
    ]
    assert not worker.enabled
