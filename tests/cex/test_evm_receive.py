"""`evm_receive` (destination_chain_receive_observe) against a real anvil: COMPLETED only when
the named transaction is mined and pays the intent's destination exactly its amount."""

from __future__ import annotations

from typing import Any

import pytest
from evm.anvil import ADDRESSES, CHAIN_ID, KEYS, deploy_token, wait_receipt
from providers.helpers import make_context

from qtg.config import ConfigError, Settings
from qtg.providers.base import ObserveStatus
from qtg.providers.registry import build_registry

DEST = "0x" + "d5" * 20


def settings(dsn: str, anvil: Any, providers: str = "evm,evm_receive") -> Settings:
    return Settings.from_env({}).replace(
        database_url=dsn,
        providers=providers,
        evm_rpc_urls=f"{CHAIN_ID}={anvil.url}",
        evm_signer_private_key=KEYS[1],
    )


def pay(anvil: Any, token: str, to: str, value: int) -> str:
    data = "0xa9059cbb" + to[2:].lower().rjust(64, "0") + f"{value:064x}"
    tx = anvil.call("eth_sendTransaction", {"from": ADDRESSES[0], "to": token, "data": data})
    wait_receipt(anvil, tx)
    return tx


def ctx(txid: str, token: str | None, amount: str = "12.5") -> Any:
    cfg: dict[str, Any] = {"chain_id": CHAIN_ID, "decimals": 6 if token else 18}
    if token:
        cfg["token"] = token
    return make_context(
        "destination_chain_receive_observe", node_kind="observe",
        node_config={"txid": txid, "evm_receive": cfg},
        intent={"asset": "USDC", "amount": amount, "destination": DEST},
    )  # fmt: skip


async def test_a_transfer_of_the_amount_to_the_destination_completes(db, dsn, anvil) -> None:
    token = deploy_token(anvil, 10**12)
    registry = build_registry(settings(dsn, anvil), db)
    try:
        ex = registry.executor_for("destination_chain_receive_observe")
        right = pay(anvil, token, DEST, 12_500_000)
        done = await ex.observe(ctx(right, token))
        assert done.status == ObserveStatus.COMPLETED
        assert done.artifacts["dest_tx_hash"] == right
        assert done.artifacts["amount_base_units"] == "12500000"
        # one base unit short, or to someone else: never COMPLETED, a person looks
        short = pay(anvil, token, DEST, 12_499_999)
        elsewhere = pay(anvil, token, "0x" + "d6" * 20, 12_500_000)
        for tx in (short, elsewhere):
            seen = await ex.observe(ctx(tx, token))
            assert (seen.status, seen.error_code) == (ObserveStatus.UNKNOWN, "EVM_RECEIVE_MISMATCH")
        # another token's Transfer of the same amount is not this token's
        other = deploy_token(anvil, 10**12)
        seen = await ex.observe(ctx(pay(anvil, other, DEST, 12_500_000), token))
        assert seen.status == ObserveStatus.UNKNOWN
        # a transaction the chain does not have yet: pending
        unknown = "0x" + "ab" * 32
        assert (await ex.observe(ctx(unknown, token))).status == ObserveStatus.PENDING
        # native coin: the transaction's own to and value
        native = anvil.call(
            "eth_sendTransaction", {"from": ADDRESSES[0], "to": DEST, "value": hex(25 * 10**17)}
        )
        wait_receipt(anvil, native)
        assert (await ex.observe(ctx(native, None, "2.5"))).status == ObserveStatus.COMPLETED
        assert (await ex.observe(ctx(native, None, "2.4"))).status == ObserveStatus.UNKNOWN
    finally:
        await registry.aclose()


async def test_evm_receive_needs_the_evm_provider_first(db, dsn, anvil) -> None:
    with pytest.raises(ConfigError, match="evm_receive needs the evm provider"):
        build_registry(settings(dsn, anvil, "evm_receive,evm"), db)
