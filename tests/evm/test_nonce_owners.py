"""Issue 44 item 5: every write to a nonce row checks its owner, and the nonce reaper's
reconcile honours network classes.

On a23afdb `sql/evm_nonces/mark.sql` moved a reservation by (chain, address, nonce) alone:
a node attempt whose nonce had been given back and taken by another attempt could still
release or consume the new owner's reservation with a late write; and the reaper's
reconcile reopened (and re-sent) reservations of every network class.
"""

from __future__ import annotations

import trio
from runtime.rt_procs import query

from evm.anvil import ADDRESSES, CHAIN_ID, KEYS
from qtg.config import Settings
from qtg.db import Database
from qtg.providers.evm import nonces as nonce_store
from qtg.providers.registry import build_registry
from qtg.services import evm_nonces
from qtg.services.context import ServiceContext
from qtg.services.movements import create_movement
from qtg.services.templates import create_template

ARGS = {"chain_id": CHAIN_ID, "address": ADDRESSES[0]}
ROWS = 12


async def test_stale_owners_racing_new_owners_never_move_a_nonce_they_gave_back(dsn, db) -> None:
    """Each nonce was reserved by an attempt (`old-i`), given back, and taken by another
    (`new-i`). Then three connections replay the old owners' late writes (released,
    consumed, broadcast: a refusal, a look, a broadcast that came back late) while three
    others write the new owners' broadcast, all at once. Every row ends the new owner's,
    broadcast; no stale write moved anything (on a23afdb a stale `consumed` stuck)."""
    for i in range(ROWS):
        await nonce_store.reserve(
            db, request_node_id=f"old-{i}", attempt_no=1, chain_floor=0, **ARGS
        )
        await nonce_store.release_unsigned(db, request_node_id=f"old-{i}", attempt_no=1)
        taken = await nonce_store.reserve(
            db, request_node_id=f"new-{i}", attempt_no=1, chain_floor=0, **ARGS
        )
        assert taken == i  # the released nonce, reused
    stale_moved: list[tuple[int, str]] = []
    fresh_moved: list[int] = []
    go = trio.Event()

    async def write(conn: Database, k: int) -> None:
        await go.wait()
        for i in range(k % 3, ROWS, 3):
            if k < 3:  # an old owner's late writes, in every order
                for state in ("released", "consumed", "broadcast"):
                    if await nonce_store.mark(
                        conn, nonce=i, state=state, owner=f"old-{i}", attempt_no=1, **ARGS
                    ):
                        stale_moved.append((i, state))
                    await trio.lowlevel.checkpoint()
            elif await nonce_store.mark(
                conn, nonce=i, state="broadcast", owner=f"new-{i}", attempt_no=1, **ARGS
            ):
                fresh_moved.append(i)

    conns = [Database(dsn, min_size=1, max_size=1) for _ in range(6)]
    try:
        async with trio.open_nursery() as nursery:
            for k, conn in enumerate(conns):
                nursery.start_soon(write, conn, k)
            go.set()
    finally:
        for conn in conns:
            await conn.close()
    assert stale_moved == []
    assert sorted(fresh_moved) == list(range(ROWS))
    rows = query(
        dsn, "SELECT nonce, request_node_id, state FROM evm_nonce_reservations ORDER BY nonce"
    )
    assert rows == [(i, f"new-{i}", "broadcast") for i in range(ROWS)]


async def test_an_allowance_raise_is_its_nodes_and_no_one_elses(db) -> None:
    """A raise's reservation is keyed `<node id>:approve…`: its node's attempt may move it,
    the same node's other attempt and a node whose id it starts with may not."""
    [raise_nonce, send_nonce] = await nonce_store.reserve_run(
        db,
        request_node_ids=["n1:approve:0xtoken", "n1"],
        attempt_no=2,
        chain_floor=0,
        **ARGS,
    )
    mark = nonce_store.mark
    assert not await mark(
        db, nonce=raise_nonce, state="broadcast", owner="n1", attempt_no=1, **ARGS
    )
    assert not await mark(db, nonce=raise_nonce, state="broadcast", owner="n", attempt_no=2, **ARGS)
    assert await mark(db, nonce=raise_nonce, state="broadcast", owner="n1", attempt_no=2, **ARGS)
    assert await mark(db, nonce=send_nonce, state="consumed", owner="n1", attempt_no=2, **ARGS)
    # consumed is final, for its owner too
    assert not await mark(db, nonce=send_nonce, state="released", owner="n1", attempt_no=2, **ARGS)


async def test_reconcile_reopens_only_its_own_classs_reorged_nonces(anvil, dsn, db) -> None:
    """A consumed nonce the chain no longer counts (a reorg) belongs to the class of the
    movement whose node took it: a `default` reaper leaves a `testnet` one (and its
    allowance raise) to testnet's runtimes (on a23afdb it reopened both)."""
    settings = Settings.from_env(
        {
            "MG_DATABASE_URL": dsn,
            "MG_PROVIDERS": "evm",
            "MG_EVM_RPC_URLS": f"{CHAIN_ID}={anvil.url}",
            "MG_EVM_SIGNER_PRIVATE_KEY": KEYS[0],
        }
    )
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
            idempotency_key=f"reorg-{cls}", actor="alice",
        )  # fmt: skip
        node_ids[cls] = str(created["nodes"][0]["id"])
    floor = anvil.nonce(ADDRESSES[0])
    owners = {
        "default": [node_ids["default"]],
        "testnet": [f"{node_ids['testnet']}:approve", node_ids["testnet"]],
    }
    for cls in ("default", "testnet"):  # consumed at nonces the chain has not counted
        keys = owners[cls]
        for nonce in await nonce_store.reserve_run(
            db, request_node_ids=keys, attempt_no=1, chain_floor=floor, **ARGS
        ):
            assert await nonce_store.mark(
                db, nonce=nonce, state="consumed", owner=keys[-1], attempt_no=1, **ARGS
            )
    states = (
        "SELECT split_part(request_node_id, ':', 1), state FROM evm_nonce_reservations "
        "ORDER BY nonce"
    )
    try:
        ctx = ServiceContext(db=db, settings=settings, providers=registry)
        await evm_nonces.reap_stale_nonces(ctx)
        assert query(dsn, states) == [
            (node_ids["default"], "broadcast"),
            (node_ids["testnet"], "consumed"),
            (node_ids["testnet"], "consumed"),
        ]
        testnet = ServiceContext(
            db=db, settings=settings.replace(network_class="testnet"), providers=registry
        )
        await evm_nonces.reap_stale_nonces(testnet)
        assert [s for _, s in query(dsn, states)] == ["broadcast"] * 3
    finally:
        await registry.aclose()
