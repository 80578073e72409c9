"""The `evm_receive` executor (issue 28): `destination_chain_receive_observe` on an EVM chain.

It watches, it never sends. Node config:

    {"txid": "$ref:withdraw.txid",          # the transaction that should pay
     "evm_receive": {"chain_id": 31337, "token": "0x…" | absent (native), "decimals": 6}}

The intent gives `destination` and `amount` (whole units). The deposit is seen
when the transaction is mined and pays exactly that: for an ERC-20 a Transfer
log of the token to the destination with that value; for the native coin the
transaction's own `to` and `value`. A mined transaction that pays something
else is UNKNOWN for a person (EVM_RECEIVE_MISMATCH), never COMPLETED.

Registered by the provider entry point `evm_receive`, listed after `evm` in
MG_PROVIDERS: it reads the evm provider's JSON-RPC clients (registry.evm_rpcs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qtg.config import ConfigError, Settings
from qtg.db import Database
from qtg.domain.context import ExecutionContext
from qtg.domain.evm import address_word, is_address, to_base_units
from qtg.providers.base import (
    ObserveResult,
    ObserveStatus,
    PreflightError,
    PreparedAction,
    RecoverOutcome,
    RecoverResult,
    SubmitRejected,
    SubmitResult,
)

if TYPE_CHECKING:
    from qtg.providers.registry import ProviderRegistry

EXECUTOR_KEY = "evm_receive"
ACTION_TYPES = frozenset({"destination_chain_receive_observe"})
#: keccak("Transfer(address,address,uint256)")
TRANSFER_TOPIC = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"


def _address_topic(address: str) -> str:
    return "0x" + address_word(address)


def paid(
    tx: dict[str, Any], receipt: dict[str, Any], want: dict[str, Any]
) -> dict[str, Any] | None:
    """The payment in a mined transaction that matches `want` (to, value, token), or None."""
    if want["token"] is None:
        to = (tx.get("to") or "").lower()
        if to == want["to"].lower() and int(tx.get("value", "0x0"), 16) == want["value"]:
            return {"log_index": None}
        return None
    for log in receipt.get("logs") or []:
        topics = log.get("topics") or []
        if (
            (log.get("address") or "").lower() == want["token"].lower()
            and len(topics) == 3
            and topics[0] == TRANSFER_TOPIC
            and topics[2].lower() == _address_topic(want["to"])
            and int(log.get("data") or "0x0", 16) == want["value"]
        ):
            return {"log_index": int(log["logIndex"], 16)}
    return None


class EvmReceiveExecutor:
    key = EXECUTOR_KEY
    action_types = ACTION_TYPES

    def __init__(self, rpcs: dict[int, Any]) -> None:
        self._rpcs = rpcs

    def _want(self, ctx: ExecutionContext) -> tuple[Any, dict[str, Any]]:
        cfg = dict(ctx.node_config.get("evm_receive") or {})
        chain_id = cfg.get("chain_id")
        rpc = self._rpcs.get(chain_id) if isinstance(chain_id, int) else None
        if rpc is None:
            raise PreflightError(
                f"node config evm_receive.chain_id {chain_id!r} names no chain in MG_EVM_RPC_URLS",
                code="EVM_CHAIN_UNKNOWN",
            )
        to = ctx.intent.get("destination")
        token = cfg.get("token")
        if not is_address(to) or (token is not None and not is_address(token)):
            raise PreflightError("destination or evm_receive.token is not an address")
        value = to_base_units(str(ctx.intent.get("amount")), int(cfg.get("decimals", 18)))
        return rpc, {"chain_id": chain_id, "to": to, "token": token, "value": value}

    async def preflight(self, ctx: ExecutionContext) -> None:
        self._want(ctx)

    async def prepare(self, ctx: ExecutionContext) -> PreparedAction:
        raise SubmitRejected("destination_chain_receive_observe only watches", code="OBSERVE_ONLY")

    async def submit(
        self,
        ctx: ExecutionContext,
        prepared: PreparedAction,
        signature: str | None,
        idempotency_key: str,
    ) -> SubmitResult:
        raise SubmitRejected("destination_chain_receive_observe only watches", code="OBSERVE_ONLY")

    async def observe(self, ctx: ExecutionContext) -> ObserveResult:
        rpc, want = self._want(ctx)
        txid = ctx.node_config.get("txid") or ctx.provider_context.get("txid")
        if not isinstance(txid, str) or not txid.startswith("0x"):
            return ObserveResult(
                status=ObserveStatus.PENDING,
                retry_after_seconds=10.0,
                error_code="EVM_RECEIVE_NO_TXID",
                error_detail="no transaction id to look at yet",
            )
        receipt = await rpc.receipt(txid)
        if receipt is None:
            return ObserveResult(status=ObserveStatus.PENDING, retry_after_seconds=2.0)
        tx = await rpc.transaction(txid) or {}
        match = paid(tx, receipt, want) if int(receipt["status"], 16) == 1 else None
        refs = {"dest_tx_hash": txid, "chain_id": want["chain_id"]}
        if match is None:
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                provider_refs=refs,
                error_code="EVM_RECEIVE_MISMATCH",
                error_detail=(
                    f"{txid} is mined but does not pay {want['value']} base units to {want['to']}"
                ),
            )
        return ObserveResult(
            status=ObserveStatus.COMPLETED,
            provider_refs=refs,
            artifacts={
                "received": True,
                "dest_tx_hash": txid,
                "block_number": int(receipt["blockNumber"], 16),
                "amount_base_units": str(want["value"]),
                **match,
            },
        )

    async def recover(self, ctx: ExecutionContext) -> RecoverResult:
        # Nothing was ever sent by this executor: watching again is always safe.
        return RecoverResult(outcome=RecoverOutcome.SUBMITTED)


def register(registry: ProviderRegistry, settings: Settings, db: Database) -> None:
    """Entry point `qtg.providers:evm_receive`; needs the evm provider registered first."""
    if not registry.evm_rpcs:
        raise ConfigError(
            "MG_PROVIDERS: evm_receive needs the evm provider listed before it (MG_EVM_RPC_URLS)"
        )
    registry.add_executor(EvmReceiveExecutor(registry.evm_rpcs))
