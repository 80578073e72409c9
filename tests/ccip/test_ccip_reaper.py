"""ccip_stranded_reaper (issue 12, reference §11) against real PostgreSQL and a real anvil:

- an intent older than the threshold with nothing on chain is stranded and pages
  (a request_attention event, a critical notification), once;
- one whose ccipSend was mined after all gets its message id (and, delivered,
  its execution state); one whose nonce went to another transaction is released
  and node_recovery is woken;
- two reapers on their own pools, at once, never process one intent twice.
"""

from __future__ import annotations

import trio
from evm.anvil import ADDRESSES, CHAIN_ID, KEYS, free_port
from runtime.rt_procs import query

from ccip.flow import intent, never_broadcast, nodes
from ccip.local import SELECTOR, send, set_up
from qtg.config import Settings
from qtg.db import Database, Query
from qtg.domain.ccip import IntentState, ccip_send_data, evm2any_message
from qtg.providers.ccip import intents
from qtg.providers.registry import build_registry
from qtg.services import ccip as reaping
from qtg.services.context import ServiceContext

EVENTS = (
    "SELECT n.id::text, e.payload->>'reason' FROM movement_events e"
    " JOIN movement_request_nodes n ON n.id = e.node_id"
    " WHERE e.event_type = 'request_attention' ORDER BY e.id"
)


#: seconds until the youngest intent is older than the reapers' threshold (1 ms, below)
AGE_LEFT = Query(
    "test/ccip_intent_age_left",
    "SELECT extract(epoch FROM max(updated_at) + interval '1 millisecond' - clock_timestamp())"
    "::float8 FROM ccip_send_intents",
)


async def aged(db: Database) -> None:
    """Wait (by the database's clock) until every intent is older than the reapers'
    threshold, MG_CCIP_SEND_INTENT_STRANDED_SECONDS below: the claim compares with its
    transaction's start, and an intent written less than that before it is not yet due
    (the machine can be that quick)."""
    left = await db.fetchval(AGE_LEFT)
    if left is not None and left > 0:
        await trio.sleep(left)
    assert await db.fetchval(AGE_LEFT) < 0


def settings_for(dsn: str, anvil, local, **env: str) -> Settings:
    return Settings.from_env(
        {
            "MG_DATABASE_URL": dsn,
            "MG_PROVIDERS": "evm,ccip",
            "MG_EVM_RPC_URLS": f"{CHAIN_ID}={anvil.url}",
            "MG_EVM_SIGNER_PRIVATE_KEY": KEYS[0],
            "MG_CCIP_LANES": local.lanes_env(),
            "MG_CCIP_SEND_INTENT_STRANDED_SECONDS": "0.001",
            **env,
        }
    )


async def test_nothing_on_chain_is_stranded_and_pages_once(anvil, dsn, db) -> None:
    local = set_up(anvil)
    settings = settings_for(dsn, anvil, local)
    ctx = ServiceContext(db=db, settings=settings, providers=build_registry(settings, db))
    [node] = await nodes(db, local, 1)
    free = anvil.nonce(ADDRESSES[1])  # nobody used it: the chain cannot tell
    row = await intent(db, local, node, tx_hash=never_broadcast(), nonce=free, sender=ADDRESSES[1])
    young = ServiceContext(
        db=db,
        settings=settings.replace(ccip_send_intent_stranded_seconds=3600.0),
        providers=ctx.providers,
    )
    assert await reaping.reap_stranded_intents(young) == 0  # younger than the threshold
    assert query(dsn, "SELECT state FROM ccip_send_intents") == [("pending",)]
    await aged(db)
    try:
        assert await reaping.reap_stranded_intents(ctx) == 1
        assert await reaping.reap_stranded_intents(ctx) == 0  # stranded is out of its scan
    finally:
        await ctx.providers.aclose()
    [(state, detail)] = query(dsn, "SELECT state, state_detail FROM ccip_send_intents")
    assert (state, detail) == ("stranded", "nothing on chain, nonce still free")
    assert query(dsn, EVENTS) == [(node, "ccip send intent stranded")]
    pages = query(
        dsn,
        "SELECT kind, severity, occurrences, links->>'intent_id' FROM notifications"
        " WHERE kind = 'ccip_stranded'",
    )
    assert pages == [("ccip_stranded", "critical", 1, str(row["id"]))]
    # later the chain answers (here: recovery releases it): the page is resolved
    assert await intents.move(db, row["id"], IntentState.RELEASED, intents.SENDABLE)
    assert query(
        dsn, "SELECT resolved_at IS NOT NULL FROM notifications WHERE kind = 'ccip_stranded'"
    ) == [(True,)]


async def test_the_chain_decides_sent_delivered_and_released(anvil, dsn, db, hub) -> None:
    local = set_up(anvil)
    settings = settings_for(dsn, anvil, local)
    ctx = ServiceContext(db=db, settings=settings, providers=build_registry(settings, db))
    sent_node, used_node = await nodes(db, local, 2)
    # a ccipSend that went out after all (sent here by hand; no SUBMITTED was recorded)
    send(anvil, local.bnm, "0x095ea7b3" + local.router[2:].rjust(64, "0") + f"{10**17:064x}")
    message = evm2any_message(local.receiver, local.bnm, 10**17, None, 200_000)
    nonce = anvil.nonce(ADDRESSES[0])
    receipt = send(anvil, local.router, ccip_send_data(SELECTOR, message))
    await intent(
        db, local, sent_node, tx_hash=receipt["transactionHash"], nonce=nonce, sender=ADDRESSES[0]
    )
    # a transaction that was never broadcast, whose nonce another one used
    await intent(db, local, used_node, tx_hash=never_broadcast(), nonce=0, sender=ADDRESSES[0])
    woken = hub.subscribe("qtg_recover")  # released: node_recovery is woken
    await aged(db)
    try:
        assert await reaping.reap_stranded_intents(ctx) == 2
    finally:
        await ctx.providers.aclose()
    with trio.fail_after(5):
        await woken.wait()
    rows = query(
        dsn,
        "SELECT request_node_id::text, state, message_id IS NOT NULL, dest_tx_hash"
        " FROM ccip_send_intents ORDER BY id",
    )
    assert rows == [
        (sent_node, "success", True, receipt["transactionHash"]),
        (used_node, "released", False, None),
    ]
    assert query(dsn, EVENTS) == []  # the chain could tell: nobody is paged


async def test_two_reapers_at_once_never_process_one_intent_twice(
    anvil, dsn, db, monkeypatch
) -> None:
    local = set_up(anvil)
    monkeypatch.setattr(reaping, "REAP_BATCH", 15)  # several claims per reaper
    count = 45
    for node in await nodes(db, local, count):
        nonce = anvil.nonce(ADDRESSES[1])
        await intent(db, local, node, tx_hash=never_broadcast(), nonce=nonce, sender=ADDRESSES[1])
    await aged(db)
    done: dict[str, int] = {"a": 0, "b": 0}

    async def reaper(name: str) -> None:
        async with Database(dsn, min_size=1, max_size=2) as own:
            settings = settings_for(dsn, anvil, local)
            ctx = ServiceContext(db=own, settings=settings, providers=build_registry(settings, own))
            try:
                while (n := await reaping.reap_stranded_intents(ctx)) > 0:
                    done[name] += n
            finally:
                await ctx.providers.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reaper, "a")
        nursery.start_soon(reaper, "b")
    assert done["a"] + done["b"] == count  # every intent once, none twice
    assert done["a"] > 0 and done["b"] > 0  # both really reaped, side by side
    events = query(dsn, EVENTS)
    assert len(events) == count and len({node for node, _ in events}) == count
    assert query(dsn, "SELECT DISTINCT state FROM ccip_send_intents") == [("stranded",)]
    assert query(
        dsn, "SELECT count(*), max(occurrences) FROM notifications WHERE kind = 'ccip_stranded'"
    ) == [(count, 1)]


async def test_a_chain_that_does_not_answer_strands_the_intent(anvil, dsn, db) -> None:
    local = set_up(anvil, drips=0)
    settings = settings_for(dsn, anvil, local, MG_EVM_RPC_READ_RETRIES="0")
    ctx = ServiceContext(db=db, settings=settings, providers=build_registry(settings, db))
    [node] = await nodes(db, local, 1)
    await intent(db, local, node, tx_hash=never_broadcast(), nonce=0, sender=ADDRESSES[1])
    ctx.providers.evm_rpcs[CHAIN_ID].url = f"http://127.0.0.1:{free_port()}"  # the node is gone
    await aged(db)
    try:
        assert await reaping.reap_stranded_intents(ctx) == 1  # not an endless retry
    finally:
        await ctx.providers.aclose()
    assert query(dsn, "SELECT state, state_detail FROM ccip_send_intents") == [
        ("stranded", "the chain did not answer: RpcUnavailable")
    ]
    assert query(dsn, EVENTS) == [(node, "ccip send intent stranded")]


async def test_the_reaper_strands_only_its_own_classs_intents(anvil, dsn, db) -> None:
    """Issue 25: a `default` reaper leaves a `testnet` intent (and its page) to
    testnet's runtimes. On main it stranded it and raised a critical page."""
    local = set_up(anvil)
    settings = settings_for(dsn, anvil, local)
    [mine] = await nodes(db, local, 1)
    [theirs] = await nodes(db, local, 1, network_class="testnet", first=1)
    for node in (mine, theirs):
        nonce = anvil.nonce(ADDRESSES[1])  # nobody uses it: the chain cannot tell
        await intent(db, local, node, tx_hash=never_broadcast(), nonce=nonce, sender=ADDRESSES[1])
    await aged(db)
    for cls, node in (("default", mine), ("testnet", theirs)):
        ctx_settings = settings.replace(network_class=cls)
        ctx = ServiceContext(
            db=db, settings=ctx_settings, providers=build_registry(ctx_settings, db)
        )
        try:
            assert await reaping.reap_stranded_intents(ctx) == 1
        finally:
            await ctx.providers.aclose()
        # the other class's intent is untouched until its own reaper runs
        assert query(dsn, EVENTS)[-1] == (node, "ccip send intent stranded")
        if cls == "default":
            states = query(
                dsn,
                "SELECT request_node_id::text, state FROM ccip_send_intents ORDER BY id",
            )
            assert states == [(mine, "stranded"), (theirs, "pending")]
            # every page (ccip_stranded, request_attention) is about default's movement
            assert query(
                dsn,
                "SELECT DISTINCT n.id::text FROM notifications p"
                " JOIN movement_request_nodes n ON n.request_id = p.request_id"
                " AND n.node_key = 'send'",
            ) == [(mine,)]
    assert len(query(dsn, EVENTS)) == 2


class SlowRpc:
    """The real client, whose receipt lookups wait until the test lets them go."""

    def __init__(self, real) -> None:
        self.real = real
        self.entered = trio.Event()
        self.release = trio.Event()

    async def receipt(self, tx_hash: str):
        self.entered.set()
        await self.release.wait()
        return await self.real.receipt(tx_hash)

    def __getattr__(self, name: str):
        return getattr(self.real, name)


async def _reap_with_a_slow_chain(anvil, dsn, db, while_asking) -> tuple[int, str]:
    """Reap one aged intent while the chain's answer is held back; `while_asking(row,
    node)` runs meanwhile. Returns the pass's count and the intent's node."""
    local = set_up(anvil)
    settings = settings_for(dsn, anvil, local)
    ctx = ServiceContext(db=db, settings=settings, providers=build_registry(settings, db))
    [node] = await nodes(db, local, 1)
    free = anvil.nonce(ADDRESSES[1])
    row = await intent(db, local, node, tx_hash=never_broadcast(), nonce=free, sender=ADDRESSES[1])
    slow = SlowRpc(ctx.providers.evm_rpcs[CHAIN_ID])
    ctx.providers.evm_rpcs[CHAIN_ID] = slow
    await aged(db)
    done: list[int] = []
    try:
        async with trio.open_nursery() as nursery:

            async def reap() -> None:
                done.append(await reaping.reap_stranded_intents(ctx))

            nursery.start_soon(reap)
            with trio.fail_after(20):
                await slow.entered.wait()
            await while_asking(row, node)
            slow.release.set()
    finally:
        await ctx.providers.aclose()
    return done[0], node


async def test_a_slow_chain_lookup_holds_no_lock(anvil, dsn, db) -> None:
    """Issue 44 item 3: while the reaper waits for the chain, the intent and its
    node are free (an operator's resolution takes the node NOWAIT: no NODE_BUSY)."""

    async def lock_both(row, node: str) -> None:
        async with db.transaction() as tx:
            with trio.fail_after(5):
                await tx.fetch(
                    Query(
                        "test/ccip_lock_node_nowait",
                        "SELECT id FROM movement_request_nodes WHERE id = %(id)s"
                        " FOR NO KEY UPDATE NOWAIT",
                    ),
                    {"id": node},
                )
                await tx.fetch(
                    Query(
                        "test/ccip_lock_intent_nowait",
                        "SELECT id FROM ccip_send_intents WHERE id = %(id)s FOR UPDATE NOWAIT",
                    ),
                    {"id": row["id"]},
                )

    done, node = await _reap_with_a_slow_chain(anvil, dsn, db, lock_both)
    assert done == 1  # then the verdict is written as before
    assert query(dsn, "SELECT state FROM ccip_send_intents") == [("stranded",)]
    assert query(dsn, EVENTS) == [(node, "ccip send intent stranded")]


async def test_a_verdict_on_an_intent_that_moved_meanwhile_is_dropped(anvil, dsn, db) -> None:
    """Recovery releases the intent while the reaper waits for the chain: the
    reaper's "stranded" (made on the old state) is dropped, never written over it."""

    async def release(row, node: str) -> None:
        assert await intents.move(db, row["id"], IntentState.RELEASED, intents.SENDABLE)

    done, _ = await _reap_with_a_slow_chain(anvil, dsn, db, release)
    assert done == 0
    assert query(dsn, "SELECT state FROM ccip_send_intents") == [("released",)]
    assert query(dsn, EVENTS) == []
