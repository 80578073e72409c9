"""The ccxt executor called directly (real PostgreSQL, real anvil, the local OKX over HTTP):
matching by address + amount + time window for a venue without a client-side id, the
`cex_withdrawal_status` observe node, and a history that lags."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from evm.anvil import ADDRESSES, deploy_token
from providers.helpers import make_context

from qtg.db import Query
from qtg.providers.base import ObserveStatus, RecoverOutcome
from qtg.providers.ccxt_withdrawal import CcxtWithdrawalExecutor
from qtg.providers.exchanges import make_exchange
from qtg.services.movements import create_movement
from qtg.services.templates import create_template

from .okx_venue import API_KEY, PASSPHRASE, SECRET, OkxVenue
from .test_ccxt_withdrawal_runtime import dest, twin_graph

NODES = Query(
    "test/cex_withdraw_nodes",
    "SELECT n.id::text AS id FROM movement_request_nodes n JOIN movement_requests r"
    " ON r.id = n.request_id WHERE n.node_key = 'withdraw' ORDER BY r.created_at, r.id",
)
ATTEMPT = Query(
    "test/cex_attempt",
    "SELECT withdrawal_id FROM ccxt_withdrawal_attempts WHERE request_node_id = %(id)s",
)
CLAIM = Query(
    "test/cex_claim",
    "UPDATE ccxt_withdrawal_attempts SET withdrawal_id = %(wd)s WHERE request_node_id = %(id)s",
)


@pytest.fixture
def venue(anvil):
    okx = OkxVenue(anvil.url, deploy_token(anvil, 10**15), ADDRESSES[0]).start()
    yield okx
    okx.stop()


def executor(db: Any, venue: OkxVenue, **kw: Any) -> CcxtWithdrawalExecutor:
    creds = {"apiKey": API_KEY, "secret": SECRET, "password": PASSPHRASE, "api_url": venue.url}
    return CcxtWithdrawalExecutor(
        db, {"okx": make_exchange("okx", creds, 5)},
        grace_seconds=kw.pop("grace", 60), recheck_seconds=1, **kw,
    )  # fmt: skip


async def nodes(db: Any, settings: Any, venue: OkxVenue, n: int) -> list[str]:
    """n real withdraw nodes (the write-ahead row references them)."""
    await create_template(db, actor="alice", template_key="cex.t", name="t",
                          graph=twin_graph(venue.token))  # fmt: skip
    for i in range(n):
        await create_movement(
            db, settings, template_key="cex.t", idempotency_key=f"m{i}", actor="alice",
            intent={"asset": "USDC", "amount": "4", "destination": dest(20)},
        )  # fmt: skip
    async with db.transaction() as tx:
        return [r["id"] for r in await tx.fetch(NODES)]


def ctx_for(node_id: str, **kw: Any):
    return make_context(
        "cex_withdrawal", request_node_id=node_id, node_config={"venue": "okx"},
        intent={"asset": "USDC", "amount": "4", "destination": dest(20)}, **kw,
    )  # fmt: skip


@pytest.fixture
def settings(dsn: str) -> Any:
    from qtg.config import Settings

    return Settings.from_env({}).replace(database_url=dsn)


async def test_without_a_client_id_a_lost_reply_is_matched_by_address_amount_and_window(
    db, settings, venue
) -> None:
    ex = executor(db, venue, client_id_params={})  # as for a venue with no client-side id
    first, second, third = await nodes(db, settings, venue, 3)
    # the third node never sent anything: no write-ahead row is the proof
    assert (await ex.recover(ctx_for(third))).outcome == RecoverOutcome.NOT_SUBMITTED
    for node in (first, second):  # two withdrawals alike in address and amount, replies lost
        venue.lose_replies = 1
        ctx = ctx_for(node)
        with pytest.raises(Exception):  # noqa: B017 - any error: the outcome is unknown
            await ex.submit(ctx, await ex.prepare(ctx), None, ctx.idempotency_key)
    wd1, wd2 = venue.withdrawals()
    assert wd1.client_id == wd2.client_id == ""  # no client id was sent
    # both are in the first node's window and neither is claimed: no guess, a person says
    with pytest.raises(RuntimeError, match="2 unclaimed withdrawals"):
        await ex.recover(ctx_for(first))
    # once one is tied to the other node (an operator, or the ingest's match), the
    # second node never adopts it: it gets the remaining one
    async with db.transaction() as tx:
        await tx.execute(CLAIM, {"id": first, "wd": wd1.wd_id})
    got2 = await ex.recover(ctx_for(second))
    assert got2.outcome == RecoverOutcome.SUBMITTED
    assert got2.provider_refs["withdrawal_id"] == wd2.wd_id
    async with db.transaction() as tx:
        assert (await tx.fetchrow(ATTEMPT, {"id": second}))["withdrawal_id"] == wd2.wd_id
    assert len(venue.withdrawals()) == 2  # recovery never sent anything


async def test_cex_withdrawal_status_follows_the_withdrawal_to_its_txid(db, settings, venue):
    ex = executor(db, venue)
    [node] = await nodes(db, settings, venue, 1)
    ctx = ctx_for(node)
    sent = await ex.submit(ctx, await ex.prepare(ctx), None, ctx.idempotency_key)
    status = make_context(
        "cex_withdrawal_status", node_kind="observe", node_config={"venue": "okx"},
        provider_context=sent.provider_refs,
    )  # fmt: skip
    with trio.fail_after(20):
        # the venue pays in its own time: poll as the observer would, with a deadline
        while (result := await ex.observe(status)).status == ObserveStatus.PENDING:  # noqa: ASYNC110
            await trio.sleep(0.1)
    [wd] = venue.withdrawals()
    assert result.status == ObserveStatus.COMPLETED
    assert result.provider_refs["txid"] == wd.tx_id and wd.state == "2"
    assert result.artifacts["amount"] == "4"


async def test_a_lagging_history_is_pending_then_unknown_in_recovery_never_not_submitted(
    db, settings, venue
) -> None:
    ex = executor(db, venue, grace=3)
    [node] = await nodes(db, settings, venue, 1)
    venue.hide_history_seconds, venue.lose_replies = 3600, 1
    ctx = ctx_for(node)
    with pytest.raises(Exception):  # noqa: B017
        await ex.submit(ctx, await ex.prepare(ctx), None, ctx.idempotency_key)
    # inside the grace: UNKNOWN
    assert (await ex.recover(ctx)).outcome == RecoverOutcome.UNKNOWN
    observed = await ex.observe(
        make_context("cex_withdrawal", request_node_id=node, node_config={"venue": "okx"})
    )
    assert observed.status == ObserveStatus.PENDING  # not found is no verdict
    await trio.sleep(3.1)  # the grace itself is what this test is about
    # first read after the grace: still UNKNOWN (one "not found" is not proof)
    assert (await ex.recover(ctx)).outcome == RecoverOutcome.UNKNOWN
    venue.hide_history_seconds = 0  # the history catches up before the recheck
    assert (await ex.recover(ctx)).outcome == RecoverOutcome.SUBMITTED
    assert len(venue.withdrawals()) == 1


async def test_without_a_client_id_one_lost_reply_is_adopted_by_its_node(db, settings, venue):
    ex = executor(db, venue, client_id_params={})
    [node] = await nodes(db, settings, venue, 1)
    venue.lose_replies = 1
    ctx = ctx_for(node)
    with pytest.raises(Exception):  # noqa: B017
        await ex.submit(ctx, await ex.prepare(ctx), None, ctx.idempotency_key)
    [wd] = venue.withdrawals()
    got = await ex.recover(ctx)
    assert got.outcome == RecoverOutcome.SUBMITTED
    assert got.provider_refs["withdrawal_id"] == wd.wd_id
    assert "client_id" not in got.provider_refs  # none was sent, none is claimed
    async with db.transaction() as tx:
        assert (await tx.fetchrow(ATTEMPT, {"id": node}))["withdrawal_id"] == wd.wd_id
    assert len(venue.withdrawals()) == 1
