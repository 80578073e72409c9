"""The `ccxt` executor (issue 28 item 3): `cex_withdrawal` and `cex_withdrawal_status`.

A withdrawal goes out through ccxt's unified `withdraw` with the venue's
client-side id (OKX `clientId`), derived from the attempt's idempotency key, so
the venue's withdrawal history can always be asked "did this attempt happen?".

Money rules:

- write-ahead: the attempt's row (`ccxt_withdrawal_attempts`: client id, asset,
  amount, address, sent_at) is committed before the request leaves. No row:
  the request was never sent — the one local proof that nothing happened.
- a reply that never came (timeout, connection cut, a venue error that is not a
  refusal) is UNKNOWN, never a resend: recovery asks the history by client id
  (or, for a venue without one, by address + amount + time window).
- "not found" once is not proof. NOT_SUBMITTED only when the history, read
  after MG_CCXT_WITHDRAWAL_GRACE_SECONDS past sent_at, has not shown the
  withdrawal on two reads at least MG_CCXT_WITHDRAWAL_RECHECK_SECONDS apart;
  before that the answer is UNKNOWN (the node waits for recovery or a person).
- a refusal the venue states (auth, permission, funds, bad address or argument)
  is SubmitRejected: nothing left the account.

Node config: `venue` (a ccxt exchange id of MG_CCXT_VENUES_CSV), and optional
`ccxt: {"chain": "USDC-ERC20", "fee": "1.5"}` passed to the venue as is. The
intent gives `asset`, `amount` (decimal) and `destination` (the address).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
from collections.abc import Mapping
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

import trio

from qtg.db import Database, sql_family
from qtg.domain.context import ExecutionContext
from qtg.providers.base import (
    HealthReport,
    HealthState,
    IntentRejected,
    ObserveResult,
    ObserveStatus,
    PreflightError,
    PreparedAction,
    RecoverOutcome,
    RecoverResult,
    SubmitRejected,
    SubmitResult,
)

SQL = sql_family(
    "ccxt_withdrawals",
    "write_ahead",
    "for_attempt",
    "record_withdrawal_id",
    "mark_absent",
    "claimed_ids",
)

EXECUTOR_KEY = "ccxt"
ACTION_TYPES = frozenset({"cex_withdrawal", "cex_withdrawal_status"})
#: Tests only: SIGKILL this process at a named point of submit() (see tests/cex).
CRASH_ENV = "QTG_TEST_CRASH_AT"
#: venues whose withdraw takes a client-side id, and the parameter's name
CLIENT_ID_PARAMS = {"okx": "clientId"}
#: how far before sent_at an address+amount match may lie (clock skew between us and the venue)
SKEW = timedelta(seconds=60)


def client_id_for(idempotency_key: str) -> str:
    """The venue's client-side id of one attempt: 32 letters and digits (OKX's limit),
    the same for the same idempotency key, so recovery can look it up."""
    return "qtg" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:29]


def _rejections() -> tuple[type[Exception], ...]:
    """ccxt errors that are the venue's own refusal of the request: nothing was done."""
    import ccxt

    return (
        ccxt.AuthenticationError,
        ccxt.PermissionDenied,
        ccxt.AccountSuspended,
        ccxt.InsufficientFunds,
        ccxt.InvalidAddress,
        ccxt.BadRequest,
    )


def _intent(ctx: ExecutionContext) -> tuple[str, Decimal, str]:
    asset = ctx.intent.get("asset")
    destination = ctx.intent.get("destination")
    try:
        amount = Decimal(str(ctx.intent.get("amount")))
    except InvalidOperation:
        raise PreflightError("intent.amount is not a decimal", code="CEX_BAD_AMOUNT") from None
    if not amount.is_finite() or amount <= 0:
        raise PreflightError("intent.amount must be positive", code="CEX_BAD_AMOUNT")
    if not isinstance(asset, str) or not asset.strip():
        raise PreflightError("intent.asset is missing", code="CEX_BAD_ASSET")
    if not isinstance(destination, str) or not destination.strip():
        raise PreflightError("intent.destination is missing", code="CEX_BAD_DESTINATION")
    return asset.strip(), amount, destination.strip()


def _status(item: Mapping[str, Any]) -> str:
    return str(item.get("status") or "pending")


def _refs(venue: str, client_id: str | None, item: Mapping[str, Any]) -> dict[str, Any]:
    refs: dict[str, Any] = {"venue": venue, "withdrawal_id": str(item["id"])}
    if client_id:
        refs["client_id"] = client_id
    if item.get("txid"):
        refs["txid"] = item["txid"]
    return refs


class CcxtWithdrawalExecutor:
    key = EXECUTOR_KEY
    action_types = ACTION_TYPES

    def __init__(
        self,
        db: Database,
        exchanges: dict[str, Any],
        *,
        grace_seconds: float,
        recheck_seconds: float,
        client_id_params: Mapping[str, str] = CLIENT_ID_PARAMS,
    ) -> None:
        self._db = db
        # venue -> its withdraw's client-side id parameter; a venue missing here is
        # matched by address + amount + time window instead
        self._client_params = dict(client_id_params)
        self._exchanges = exchanges
        self._locks = {venue: trio.Lock() for venue in exchanges}
        self._grace = timedelta(seconds=grace_seconds)
        self._recheck = timedelta(seconds=recheck_seconds)

    def __repr__(self) -> str:
        return f"CcxtWithdrawalExecutor({sorted(self._exchanges)!r})"

    # ---------------------------------------------------------------- helpers
    def _venue(self, venue: Any) -> str:
        if not isinstance(venue, str) or venue not in self._exchanges:
            raise PreflightError(
                f"node config venue {venue!r} is not one of MG_CCXT_VENUES_CSV "
                f"({', '.join(sorted(self._exchanges))})",
                code="CEX_VENUE_UNKNOWN",
            )
        return venue

    async def _call(self, venue: str, method: str, *args: Any) -> Any:
        """One ccxt call in a worker thread (ccxt's sync client; its own timeout bounds it)."""
        exchange = self._exchanges[venue]

        def run() -> Any:
            if method == "withdraw":
                _ensure_currency(exchange, args[0])
            return getattr(exchange, method)(*args)

        async with self._locks[venue]:
            return await trio.to_thread.run_sync(run, abandon_on_cancel=True)

    async def _by_client_id(self, venue: str, client_id: str) -> dict[str, Any] | None:
        """The venue's history entry of this client id (None: the history shows none)."""
        rows = await self._call(
            venue, "fetch_withdrawals", None, None, None, {self._client_params[venue]: client_id}
        )
        found = [r for r in rows if (r.get("info") or {}).get("clientId") == client_id]
        if len(found) > 1:
            raise RuntimeError(f"{venue}: {len(found)} withdrawals carry client id {client_id}")
        return found[0] if found else None

    async def _by_address(
        self, venue: str, row: Mapping[str, Any], request_node_id: str, attempt_no: int
    ) -> dict[str, Any] | None:
        """A venue with no client-side id: the one withdrawal to the same address of the
        same amount and asset since sent_at (less the skew) that no other attempt claims."""
        since = int((row["sent_at"] - SKEW).timestamp() * 1000)
        rows = await self._call(venue, "fetch_withdrawals", None, since, None, {})
        async with self._db.transaction() as tx:
            claimed = {
                r["withdrawal_id"]
                for r in await tx.fetch(
                    SQL.claimed_ids, {"request_node_id": request_node_id, "attempt_no": attempt_no}
                )
            }
        found = [
            r
            for r in rows
            if str(r.get("address") or "").lower() == row["address"].lower()
            and r.get("amount") == row["amount"]
            and r.get("currency") == row["asset"]
            and str(r.get("id")) not in claimed
        ]
        if len(found) > 1:
            raise RuntimeError(
                f"{venue}: {len(found)} unclaimed withdrawals of {row['amount']} {row['asset']} "
                f"to {row['address']}: a person must say which is this node's"
            )
        return found[0] if found else None

    async def _attempt(self, ctx: ExecutionContext) -> dict[str, Any] | None:
        async with self._db.transaction() as tx:
            return await tx.fetchrow(
                SQL.for_attempt,
                {"request_node_id": ctx.request_node_id, "attempt_no": ctx.attempt_no},
            )

    # --------------------------------------------------------------- contract
    def check_intent(self, intent: Mapping[str, Any], node_config: Mapping[str, Any]) -> None:
        """At movement creation: an amount that is no positive decimal or a missing
        destination can never be withdrawn; refuse it before anyone approves it."""
        try:
            amount = Decimal(str(intent.get("amount")))
        except InvalidOperation:
            raise IntentRejected("amount", "amount is not a decimal") from None
        if not amount.is_finite() or amount <= 0:
            raise IntentRejected("amount", "amount must be positive")
        destination = intent.get("destination")
        if not isinstance(destination, str) or not destination.strip():
            raise IntentRejected("destination", "a withdrawal needs a destination address")

    async def preflight(self, ctx: ExecutionContext) -> None:
        if ctx.action_type == "cex_withdrawal":
            self._venue(ctx.node_config.get("venue"))
            _intent(ctx)

    async def prepare(self, ctx: ExecutionContext) -> PreparedAction:
        venue = self._venue(ctx.node_config.get("venue"))
        asset, amount, address = _intent(ctx)
        extra = ctx.node_config.get("ccxt") or {}
        if not isinstance(extra, Mapping):
            raise PreflightError("node config ccxt must be an object", code="CEX_BAD_CONFIG")
        body = {
            "venue": venue,
            "asset": asset,
            "amount": str(amount),
            "address": address,
            "params": {k: str(v) for k, v in sorted(extra.items())},
        }
        payload = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return PreparedAction(
            action_type=ctx.action_type,
            payload_format="json",
            payload=payload,
            payload_hash=hashlib.sha256(payload.encode()).hexdigest(),
        )

    async def submit(
        self,
        ctx: ExecutionContext,
        prepared: PreparedAction,
        signature: str | None,
        idempotency_key: str,
    ) -> SubmitResult:
        body = json.loads(prepared.payload)
        venue = self._venue(body["venue"])
        client_param = self._client_params.get(venue)
        client_id = client_id_for(idempotency_key)
        async with self._db.transaction() as tx:
            await tx.execute(
                SQL.write_ahead,
                {
                    "request_node_id": ctx.request_node_id,
                    "attempt_no": ctx.attempt_no,
                    "venue": venue,
                    "client_id": client_id,
                    "asset": body["asset"],
                    "amount": Decimal(body["amount"]),
                    "address": body["address"],
                },
            )
        params = dict(body["params"])
        if client_param:
            params[client_param] = client_id
        crash_point("before_withdraw")
        try:
            item = await self._call(
                venue, "withdraw", body["asset"], Decimal(body["amount"]), body["address"], params
            )
        except _rejections() as exc:
            raise SubmitRejected(
                f"{venue} refused the withdrawal: {type(exc).__name__}", code="CEX_REJECTED"
            ) from None
        crash_point("after_withdraw")
        if item.get("id") is None:
            raise RuntimeError(f"{venue} answered the withdrawal without an id")
        async with self._db.transaction() as tx:
            await tx.execute(
                SQL.record_withdrawal_id,
                {
                    "request_node_id": ctx.request_node_id,
                    "attempt_no": ctx.attempt_no,
                    "withdrawal_id": str(item["id"]),
                },
            )
        return SubmitResult(provider_refs=_refs(venue, client_id if client_param else None, item))

    async def observe(self, ctx: ExecutionContext) -> ObserveResult:
        refs = dict(ctx.provider_context) if ctx.node_kind == "observe" else {}
        refs.update(ctx.node_provider_refs)
        venue = self._venue(refs.get("venue") or ctx.node_config.get("venue"))
        item = None
        if refs.get("client_id") and venue in self._client_params:
            item = await self._by_client_id(venue, refs["client_id"])
        elif refs.get("withdrawal_id"):
            item = await self._call(venue, "fetch_withdrawal", str(refs["withdrawal_id"]))
            if not item or item.get("id") is None:
                item = None
        if item is None:
            # The venue answered, but its history does not show it (yet): not proof of
            # anything. Keep looking; the observe timeout hands it to a person.
            return ObserveResult(
                status=ObserveStatus.PENDING,
                retry_after_seconds=5.0,
                error_code="CEX_WITHDRAWAL_NOT_IN_HISTORY",
                error_detail=f"{venue}'s withdrawal history does not show it yet",
            )
        found = _refs(venue, refs.get("client_id"), item)
        status = _status(item)
        artifacts = {
            "withdrawal_id": found["withdrawal_id"],
            "withdrawal_status": status,
            "amount": str(item.get("amount")),
            "txid": item.get("txid"),
            "fee": str((item.get("fee") or {}).get("cost")),
        }
        if status == "ok" and item.get("txid"):
            return ObserveResult(
                status=ObserveStatus.COMPLETED, provider_refs=found, artifacts=artifacts
            )
        if status in ("failed", "canceled"):
            return ObserveResult(
                status=ObserveStatus.FAILED,
                provider_refs=found,
                artifacts=artifacts,
                error_code="CEX_WITHDRAWAL_" + status.upper(),
                error_detail=f"{venue} reports the withdrawal {status}",
            )
        return ObserveResult(
            status=ObserveStatus.PENDING, provider_refs=found, retry_after_seconds=5.0
        )

    async def recover(self, ctx: ExecutionContext) -> RecoverResult:
        """From the write-ahead row and the venue's history alone; never a second request."""
        row = await self._attempt(ctx)
        if row is None:
            return RecoverResult(
                outcome=RecoverOutcome.NOT_SUBMITTED,
                error_code="CEX_NOT_SENT",
                error_detail="no write-ahead record: the withdraw request never left",
            )
        venue = self._venue(row["venue"])
        client_param = self._client_params.get(venue)
        if client_param:
            item = await self._by_client_id(venue, row["client_id"])
        else:
            item = await self._by_address(venue, row, ctx.request_node_id, ctx.attempt_no)
        where = {"request_node_id": ctx.request_node_id, "attempt_no": ctx.attempt_no}
        if item is not None:
            async with self._db.transaction() as tx:
                await tx.execute(
                    SQL.record_withdrawal_id, {**where, "withdrawal_id": str(item["id"])}
                )
            refs = _refs(venue, row["client_id"] if client_param else None, item)
            if _status(item) in ("failed", "canceled"):
                return RecoverResult(
                    outcome=RecoverOutcome.FAILED,
                    provider_refs=refs,
                    error_code="CEX_WITHDRAWAL_" + _status(item).upper(),
                    error_detail=f"{venue} reports the withdrawal {_status(item)}",
                )
            return RecoverResult(outcome=RecoverOutcome.SUBMITTED, provider_refs=refs)
        now = row["db_now"]
        if now - row["sent_at"] < self._grace:
            return _unknown(f"{venue}'s history does not show it yet; within the grace")
        async with self._db.transaction() as tx:
            first_absent = await tx.fetchval(SQL.mark_absent, where)
        if now - first_absent < self._recheck:
            return _unknown(f"{venue}'s history does not show it (first read after the grace)")
        return RecoverResult(
            outcome=RecoverOutcome.NOT_SUBMITTED,
            error_code="CEX_NOT_AT_VENUE",
            error_detail=(
                f"{venue}'s history has shown no such withdrawal on two reads "
                f"{self._recheck.total_seconds():g} s apart, the grace after sending gone"
            ),
        )

    async def health(self) -> HealthReport:
        return HealthReport(state=HealthState.HEALTHY, detail={"venues": sorted(self._exchanges)})


def _unknown(detail: str) -> RecoverResult:
    return RecoverResult(
        outcome=RecoverOutcome.UNKNOWN, error_code="CEX_NOT_YET_PROVEN", error_detail=detail
    )


def _ensure_currency(exchange: Any, code: str) -> None:
    """ccxt's withdraw looks the currency up in its loaded currencies; qtg loads no
    markets (transfers need none), so the asked currency is added by its code."""
    if exchange.currencies is None or not isinstance(exchange.currencies, dict):
        exchange.currencies = {}
    if code not in exchange.currencies:
        exchange.currencies[code] = {"id": code, "code": code, "networks": {}, "precision": None}
        exchange.currencies_by_id = {
            **(exchange.currencies_by_id or {}),
            code: exchange.currencies[code],
        }


def crash_point(name: str) -> None:
    """Tests only (QTG_TEST_CRASH_AT): die here like a kill -9, with no clean-up."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
