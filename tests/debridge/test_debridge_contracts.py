"""The test DLN keeps the rules the `debridge` provider relies on (issue 46).

createOrder on A locks the give amount once and names the order (its id only in
CreatedOrder); fulfillOrder on B pays takeAmount to receiverDst once; a second
fulfilment is refused; the order's authority may cancel only while it is
unfulfilled, and the cancel's claim on A refunds the give amount (ClaimedOrderCancel),
after which no taker can fulfil it.
"""

from __future__ import annotations

from evm.anvil import ADDRESSES

from debridge.local import (
    CHAIN_B,
    FIXED_FEE,
    MESSENGER,
    TAKER,
    balance,
    calldata,
    give_status,
    send,
    set_up,
    take_status,
)
from qtg.domain.debridge import (
    GIVE_CLAIMED_CANCEL,
    GIVE_CREATED,
    TAKE_FULFILLED,
    TAKE_SENT_ORDER_CANCEL,
    create_order_data,
    created_from_logs,
    fulfill_order_data,
    fulfilled_in_logs,
    order_id,
    refund_from_logs,
    send_evm_order_cancel_data,
)
from qtg.domain.evm import address_word

MAKER, RECEIVER = ADDRESSES[0], ADDRESSES[1]


def _create(a, dep, give: int, take: int, value: int = FIXED_FEE):
    approve = calldata("approve(address,uint256)", address_word(dep.source), f"{give:064x}")
    assert send(a, dep.token_a, approve)["status"] == "0x1"
    data = create_order_data(
        give_token=dep.token_a,
        give_amount=give,
        take_token=dep.token_b,
        take_amount=take,
        take_chain_id=CHAIN_B,
        receiver=RECEIVER,
        authority=MAKER,
    )
    return send(a, dep.source, data, value=value)


def test_an_order_is_created_fulfilled_once_and_unlocked_to_the_taker(chains) -> None:
    a, b = chains
    dep = set_up(a, b, 100_000_000)
    receipt = _create(a, dep, 10_100_000, 10_000_000)
    assert receipt["status"] == "0x1"
    order, oid = created_from_logs(receipt["logs"], dep.source)
    assert oid == order_id(order)  # the local id rule, checked against the contract's
    assert (order.give_amount, order.take_amount, order.take_chain_id) == (
        10_100_000,
        10_000_000,
        CHAIN_B,
    )
    assert (order.receiver_dst, order.maker_src) == (RECEIVER.lower(), MAKER.lower())
    assert order.order_authority_address_dst == MAKER.lower()
    assert balance(a, dep.token_a, MAKER) == 100_000_000 - 10_100_000
    assert balance(a, dep.token_a, dep.source) == 10_100_000  # locked, not burned
    assert give_status(a, dep, oid) == GIVE_CREATED
    fulfil = send(b, dep.destination, fulfill_order_data(order, TAKER), TAKER)
    assert fulfil["status"] == "0x1"
    assert fulfilled_in_logs(fulfil["logs"], dep.destination, order, oid)
    assert balance(b, dep.token_b, RECEIVER) == 10_000_000
    assert take_status(b, dep, oid) == TAKE_FULFILLED
    again = send(b, dep.destination, fulfill_order_data(order, TAKER), TAKER)
    assert again["status"] == "0x0"  # IncorrectOrderStatus: paid once
    assert balance(b, dep.token_b, RECEIVER) == 10_000_000
    # the authority cannot cancel a fulfilled order
    cancel = send(b, dep.destination, send_evm_order_cancel_data(order, MAKER))
    assert cancel["status"] == "0x0"


def test_a_wrong_fee_or_a_tampered_order_is_refused(chains) -> None:
    a, b = chains
    dep = set_up(a, b, 100_000_000)
    assert _create(a, dep, 1_000_000, 1_000_000, value=0)["status"] == "0x0"  # WrongFixedFee
    assert balance(a, dep.token_a, MAKER) == 100_000_000
    order, oid = created_from_logs(_create(a, dep, 2_000_000, 1_000_000)["logs"], dep.source)
    richer = type(order)(**{**order.__dict__, "take_amount": 2_000_000})
    # a richer order under the real order's id: MismatchedOrderId
    data = fulfill_order_data(richer, TAKER).replace(order_id(richer)[2:], oid[2:])
    assert send(b, dep.destination, data, TAKER)["status"] == "0x0"
    assert balance(b, dep.token_b, RECEIVER) == 0


def test_a_cancel_refunds_the_give_amount_on_the_source_and_blocks_fulfilment(chains) -> None:
    a, b = chains
    dep = set_up(a, b, 100_000_000)
    order, oid = created_from_logs(_create(a, dep, 5_000_000, 4_900_000)["logs"], dep.source)
    # only the order's authority may cancel
    other = send(b, dep.destination, send_evm_order_cancel_data(order, MAKER), sender=TAKER)
    assert other["status"] == "0x0"
    cancel = send(b, dep.destination, send_evm_order_cancel_data(order, MAKER))
    assert cancel["status"] == "0x1"
    assert take_status(b, dep, oid) == TAKE_SENT_ORDER_CANCEL
    late = send(b, dep.destination, fulfill_order_data(order, TAKER), TAKER)
    assert late["status"] == "0x0"  # a cancelled order cannot be fulfilled
    assert balance(a, dep.token_a, MAKER) == 95_000_000  # not refunded before the claim
    claim = calldata("claimCancel(bytes32,address)", oid[2:], address_word(MAKER))
    assert send(a, dep.source, claim)["status"] == "0x0"  # only the messenger delivers
    claimed = send(a, dep.source, claim, sender=MESSENGER)
    assert claimed["status"] == "0x1"
    refund = refund_from_logs(claimed["logs"], dep.source, oid)
    assert refund is not None and refund.paid_amount == 5_000_000
    assert refund.beneficiary == MAKER.lower() and refund.give_token == dep.token_a
    assert balance(a, dep.token_a, MAKER) == 100_000_000
    assert give_status(a, dep, oid) == GIVE_CLAIMED_CANCEL
    assert send(a, dep.source, claim, sender=MESSENGER)["status"] == "0x0"  # once
