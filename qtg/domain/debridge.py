"""Pure deBridge DLN rules (issue 46): chains, calldata, the Order, events, the status API.

No I/O: the `debridge` provider reads both chains and the order-status API and
feeds the facts here, so what decides "created", "fulfilled" and "cancelled and
refunded" can be read and tested on its own. Shapes are DLN's
(debridge-finance/dln-contracts: DlnOrderLib.OrderCreation and Order, DlnSource's
CreatedOrder and ClaimedOrderCancel, DlnDestination's FulfilledOrder and takeOrders).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode
from eth_hash.auto import keccak

from qtg.domain.errors import ConfigError
from qtg.domain.evm import address_word, is_address

CHAINS_ENV = "MG_DEBRIDGE_CHAINS"

#: DlnOrderLib.OrderCreation
ORDER_CREATION = "(address,uint256,bytes,uint256,uint256,bytes,address,bytes,bytes,bytes,bytes)"
#: DlnOrderLib.Order: makerOrderNonce, makerSrc, giveChainId, giveTokenAddress,
#: giveAmount, takeChainId, takeTokenAddress, takeAmount, receiverDst,
#: givePatchAuthoritySrc, orderAuthorityAddressDst, allowedTakerDst,
#: allowedCancelBeneficiarySrc, externalCall
ORDER = (
    "(uint64,bytes,uint256,bytes,uint256,uint256,bytes,uint256,bytes,bytes,bytes,bytes,bytes,bytes)"
)


def _selector(signature: str) -> str:
    return keccak(signature.encode())[:4].hex()


def _topic(signature: str) -> str:
    return "0x" + keccak(signature.encode()).hex()


CREATE_ORDER = _selector(f"createOrder({ORDER_CREATION},bytes,uint32,bytes)")
FULFILL_ORDER = _selector(f"fulfillOrder({ORDER},uint256,bytes32,bytes,address)")
SEND_EVM_ORDER_CANCEL = _selector(f"sendEvmOrderCancel({ORDER},address,uint256)")
TAKE_ORDERS = _selector("takeOrders(bytes32)")
GIVE_ORDERS = _selector("giveOrders(bytes32)")
GLOBAL_FIXED_NATIVE_FEE = _selector("globalFixedNativeFee()")
CREATED_ORDER = _topic(f"CreatedOrder({ORDER},bytes32,bytes,uint256,uint256,uint32,bytes)")
FULFILLED_ORDER = _topic(f"FulfilledOrder({ORDER},bytes32,address,address)")
CLAIMED_ORDER_CANCEL = _topic("ClaimedOrderCancel(bytes32,address,uint256,address)")
TRANSFER = _topic("Transfer(address,address,uint256)")

#: DlnDestination.takeOrders(orderId).status
TAKE_NOT_SET, TAKE_FULFILLED, TAKE_SENT_UNLOCK, TAKE_SENT_ORDER_CANCEL = 0, 1, 2, 3
#: DlnSource.giveOrders(orderId).status
GIVE_NOT_SET, GIVE_CREATED, GIVE_CLAIMED_UNLOCK, GIVE_CLAIMED_CANCEL = 0, 1, 2, 3
#: The order-status API's states (stats-api.dln.trade) that say the taker paid.
API_FULFILLED = frozenset({"Fulfilled", "SentUnlock", "ClaimedUnlock"})
API_STATES = frozenset(
    {
        "Created",
        "Fulfilled",
        "SentUnlock",
        "ClaimedUnlock",
        "OrderCancelled",
        "SentOrderCancel",
        "ClaimedOrderCancel",
    }
)


@dataclass(frozen=True)
class Chain:
    """One chain's DLN deployment (MG_DEBRIDGE_CHAINS entry): its tokens by asset symbol."""

    chain_id: int
    dln_source: str
    dln_destination: str
    tokens: Mapping[str, str]


def _chain_error(index: int, what: str) -> ConfigError:
    return ConfigError(f"{CHAINS_ENV}: entry {index}: {what}")


def parse_chains(raw: str) -> dict[int, Chain]:
    """MG_DEBRIDGE_CHAINS: a JSON list of {chain_id, dln_source, dln_destination,
    tokens: {ASSET: address}}, by chain id. Empty: no chains. A bad entry stops
    start-up naming the entry and the field."""
    if not raw.strip():
        return {}
    try:
        items = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"{CHAINS_ENV}: not JSON: {exc}") from None
    if not isinstance(items, list):
        raise ConfigError(f"{CHAINS_ENV}: must be a JSON list of chains")
    out: dict[int, Chain] = {}
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise _chain_error(i, "must be an object")
        chain_id = item.get("chain_id")
        if not isinstance(chain_id, int) or isinstance(chain_id, bool) or chain_id <= 0:
            raise _chain_error(i, f"chain_id {chain_id!r} is not a positive integer")
        if chain_id in out:
            raise _chain_error(i, f"chain_id {chain_id} appears twice")
        addresses = {}
        for key in ("dln_source", "dln_destination"):
            value = item.get(key)
            if not is_address(value):
                raise _chain_error(i, f"{key} {value!r} is not an address")
            addresses[key] = str(value).lower()
        tokens = item.get("tokens")
        if not isinstance(tokens, Mapping) or not tokens:
            raise _chain_error(i, "tokens must be an object of asset → token address")
        for asset, token in tokens.items():
            if not is_address(token):
                raise _chain_error(i, f"tokens.{asset} {token!r} is not an address")
        out[chain_id] = Chain(
            chain_id=chain_id,
            tokens={str(k).upper(): str(v).lower() for k, v in tokens.items()},
            **addresses,
        )
    return out


# ---- the Order
@dataclass(frozen=True)
class Order:
    """DlnOrderLib.Order as CreatedOrder carries it (addresses as 0x hex)."""

    maker_order_nonce: int
    maker_src: str
    give_chain_id: int
    give_token: str
    give_amount: int
    take_chain_id: int
    take_token: str
    take_amount: int
    receiver_dst: str
    give_patch_authority_src: str
    order_authority_address_dst: str
    allowed_taker_dst: str
    allowed_cancel_beneficiary_src: str
    external_call: str

    def as_tuple(self) -> tuple[Any, ...]:
        def raw(value: str) -> bytes:
            return bytes.fromhex(value.removeprefix("0x"))

        return (
            self.maker_order_nonce,
            raw(self.maker_src),
            self.give_chain_id,
            raw(self.give_token),
            self.give_amount,
            self.take_chain_id,
            raw(self.take_token),
            self.take_amount,
            raw(self.receiver_dst),
            raw(self.give_patch_authority_src),
            raw(self.order_authority_address_dst),
            raw(self.allowed_taker_dst),
            raw(self.allowed_cancel_beneficiary_src),
            raw(self.external_call),
        )

    def encoded(self) -> str:
        """abi.encode(order): what the provider keeps to name the order later."""
        return "0x" + abi_encode([ORDER], [self.as_tuple()]).hex()


def _order_from(values: Sequence[Any]) -> Order:
    hexed: list[Any] = ["0x" + v.hex() if isinstance(v, bytes) else v for v in values]
    return Order(*hexed)


def decode_order(encoded: str) -> Order:
    """The Order of `Order.encoded()`; ValueError when it is not one."""
    try:
        (values,) = abi_decode([ORDER], bytes.fromhex(encoded.removeprefix("0x")))
    except Exception as exc:  # eth_abi's decoding errors have no common base but Exception
        raise ValueError(f"not an ABI-encoded DLN Order: {exc}") from None
    return _order_from(values)


def order_id(order: Order) -> str:
    """The local DlnSource's id (keccak256(abi.encode(order)); DLN packs its own encoding)."""
    return "0x" + keccak(bytes.fromhex(order.encoded()[2:])).hex()


# ---- calldata
def _word(value: int) -> str:
    return f"{value:064x}"


def create_order_data(
    *,
    give_token: str,
    give_amount: int,
    take_token: str,
    take_amount: int,
    take_chain_id: int,
    receiver: str,
    authority: str,
) -> str:
    """createOrder(OrderCreation, affiliateFee, referralCode, permitEnvelope): `authority`
    (qtg's signer) may patch the order on the source, cancel it on the destination, and
    is the only allowed cancel beneficiary; any taker may fulfil it."""

    def addr(value: str) -> bytes:
        return bytes.fromhex(value.removeprefix("0x"))

    creation = (
        give_token,
        give_amount,
        addr(take_token),
        take_amount,
        take_chain_id,
        addr(receiver),
        authority,
        addr(authority),
        b"",
        b"",
        addr(authority),
    )
    args = abi_encode([ORDER_CREATION, "bytes", "uint32", "bytes"], [creation, b"", 0, b""])
    return "0x" + CREATE_ORDER + args.hex()


def fulfill_order_data(order: Order, unlock_authority: str) -> str:
    """fulfillOrder(order, takeAmount, orderId, permitEnvelope, unlockAuthority)."""
    args = abi_encode(
        [ORDER, "uint256", "bytes32", "bytes", "address"],
        [
            order.as_tuple(),
            order.take_amount,
            bytes.fromhex(order_id(order)[2:]),
            b"",
            unlock_authority,
        ],
    )
    return "0x" + FULFILL_ORDER + args.hex()


def send_evm_order_cancel_data(order: Order, beneficiary: str) -> str:
    """sendEvmOrderCancel(order, cancelBeneficiary, executionFee 0)."""
    args = abi_encode([ORDER, "address", "uint256"], [order.as_tuple(), beneficiary, 0])
    return "0x" + SEND_EVM_ORDER_CANCEL + args.hex()


def take_orders_data(order_id_hex: str) -> str:
    return "0x" + TAKE_ORDERS + order_id_hex.removeprefix("0x").rjust(64, "0")


def give_orders_data(order_id_hex: str) -> str:
    return "0x" + GIVE_ORDERS + order_id_hex.removeprefix("0x").rjust(64, "0")


def first_word(raw: str) -> int:
    """The first 32-byte word of an eth_call answer (a status enum, a fee)."""
    body = raw.removeprefix("0x")
    return int(body[:64] or "0", 16)


# ---- events
def _of(log: Mapping[str, Any], topic: str, address: str) -> bool:
    topics = log.get("topics") or []
    return (
        bool(topics)
        and str(topics[0]).lower() == topic
        and str(log.get("address", "")).lower() == address.lower()
    )


def created_from_logs(
    logs: Sequence[Mapping[str, Any]], dln_source: str
) -> tuple[Order, str] | None:
    """The CreatedOrder (order, orderId) of a createOrder receipt, from the configured
    DlnSource only."""
    for log in logs:
        if _of(log, CREATED_ORDER, dln_source):
            values = abi_decode(
                [ORDER, "bytes32", "bytes", "uint256", "uint256", "uint32", "bytes"],
                bytes.fromhex(str(log["data"]).removeprefix("0x")),
            )
            return _order_from(values[0]), "0x" + values[1].hex()
    return None


def fulfilled_in_logs(
    logs: Sequence[Mapping[str, Any]], dln_destination: str, order: Order, order_id_hex: str
) -> bool:
    """The receipt holds the configured DlnDestination's FulfilledOrder of this order id
    AND the take token's Transfer of takeAmount to receiverDst: the receiver was paid."""
    fulfilled = False
    for log in logs:
        if _of(log, FULFILLED_ORDER, dln_destination):
            values = abi_decode(
                [ORDER, "bytes32", "address", "address"],
                bytes.fromhex(str(log["data"]).removeprefix("0x")),
            )
            fulfilled = fulfilled or "0x" + values[1].hex() == order_id_hex.lower()
    if not fulfilled:
        return False
    return transferred(logs, order.take_token, order.receiver_dst) == order.take_amount


def transferred(logs: Sequence[Mapping[str, Any]], token: str, to: str) -> int:
    """The sum of `token`'s Transfer logs to `to` in a receipt."""
    total = 0
    for log in logs:
        topics = [str(t).lower() for t in log.get("topics") or []]
        if (
            len(topics) == 3
            and topics[0] == TRANSFER
            and str(log.get("address", "")).lower() == token.lower()
            and topics[2] == "0x" + address_word(to)
        ):
            total += int(str(log["data"]), 16)
    return total


@dataclass(frozen=True)
class Refund:
    """A ClaimedOrderCancel on the source: the give amount went back."""

    order_id: str
    beneficiary: str
    paid_amount: int
    give_token: str


def refund_from_logs(
    logs: Sequence[Mapping[str, Any]], dln_source: str, order_id_hex: str
) -> Refund | None:
    for log in logs:
        if _of(log, CLAIMED_ORDER_CANCEL, dln_source):
            oid, beneficiary, paid, token = abi_decode(
                ["bytes32", "address", "uint256", "address"],
                bytes.fromhex(str(log["data"]).removeprefix("0x")),
            )
            if "0x" + oid.hex() == order_id_hex.lower():
                return Refund("0x" + oid.hex(), beneficiary.lower(), paid, token.lower())
    return None


def refund_problem(refund: Refund, order: Order, signer: str) -> str | None:
    """Why a ClaimedOrderCancel is no proof that this order's give amount came back (None:
    it is): the beneficiary must be the order's allowedCancelBeneficiarySrc and qtg's
    signer, the amount the order's giveAmount, the token its giveTokenAddress."""
    allowed = order.allowed_cancel_beneficiary_src.lower()
    if refund.beneficiary.lower() != allowed or allowed != signer.lower():
        return (
            f"beneficiary {refund.beneficiary} is not the order's cancel beneficiary "
            f"{allowed} and qtg's signer {signer.lower()}"
        )
    if refund.paid_amount != order.give_amount:
        return f"paid {refund.paid_amount}, not the order's give amount {order.give_amount}"
    if refund.give_token.lower() != order.give_token.lower():
        return f"token {refund.give_token} is not the order's give token {order.give_token}"
    return None


# ---- the order-status API (GET {url}/api/Orders/{orderId})
def state_from_body(body: Any) -> str | None:
    """The order's state from the status API's answer ({"orderId": …, "state": …}); None
    when the body names no known state. Only a hint: the destination chain decides."""
    if not isinstance(body, Mapping):
        return None
    state = body.get("state", body.get("status"))
    return state if isinstance(state, str) and state in API_STATES else None
