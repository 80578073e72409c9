"""The test Stargate V2 pool and LayerZero V2 endpoint keep the rules the provider relies
on (issue 46): a send on A takes the amount once and emits OFTSent and a PacketV1 whose
GUID is LayerZero's; B pays the recipient only for a packet the DVN verified, once — a
replayed or tampered delivery is refused; quoteOFT and quoteSend answer in IOFT's shapes.
"""

from __future__ import annotations

from evm.anvil import ADDRESSES

from qtg.domain.evm import address_word
from qtg.domain.stargate import (
    Chain,
    decode_packet,
    native_fee_from,
    oft_receipt_from,
    quote_oft_data,
    quote_send_data,
    received_from_logs,
    send_data,
    send_param,
    sent_from_logs,
    transferred,
)
from stargate.local import (
    DVN,
    EID_A,
    EID_B,
    NATIVE_FEE,
    deliver,
    deliveries,
    lz_receive_data,
    packets,
    set_up,
    transact,
    usdt_balance,
    verify_data,
)
from stargate.local import (
    send as send_call,
)

HOLDER, RECIPIENT = ADDRESSES[0], ADDRESSES[1]
USDT = 10**6


def _send(a, da, amount: int, min_amount: int | None = None, value: int = NATIVE_FEE) -> dict:
    transact(a, da.token, "0x095ea7b3" + address_word(da.pool) + f"{amount:064x}")
    param = send_param(EID_B, RECIPIENT, amount, amount if min_amount is None else min_amount)
    return transact(a, da.pool, send_data(param, NATIVE_FEE, HOLDER), value=value)


def _chain(dep):
    return Chain(dep.chain_id, dep.eid, dep.pool, dep.endpoint, dep.token)


def test_a_send_is_delivered_once_to_the_recipient(chains) -> None:
    a, b = chains
    da, db = set_up(a, b, 100 * USDT)
    param = send_param(EID_B, RECIPIENT, 25 * USDT, 25 * USDT)
    fee = native_fee_from(a.call("eth_call", {"to": da.pool, "data": quote_send_data(param)}))
    assert fee == NATIVE_FEE
    sent_ld, received_ld = oft_receipt_from(
        a.call("eth_call", {"to": da.pool, "data": quote_oft_data(param)})
    )
    assert (sent_ld, received_ld) == (25 * USDT, 25 * USDT)
    before = a.balance(HOLDER)
    receipt = _send(a, da, 25 * USDT)
    assert receipt["status"] == "0x1"
    assert usdt_balance(a, da, HOLDER) == 75 * USDT  # taken once, into A's pool
    assert usdt_balance(a, da, da.pool) == 25 * USDT
    sent = sent_from_logs(receipt["logs"], _chain(da))
    assert sent is not None
    p = sent.packet
    assert (p.nonce, p.src_eid, p.dst_eid, p.sender, p.receiver) == (
        1,
        EID_A,
        EID_B,
        da.pool,
        db.pool,
    )
    assert (p.to, p.amount, sent.amount_sent, sent.amount_received) == (
        RECIPIENT.lower(),
        25 * USDT,
        25 * USDT,
        25 * USDT,
    )
    assert sent.sender == HOLDER.lower()
    assert before - a.balance(HOLDER) > NATIVE_FEE  # the fee and gas, in ETH
    [encoded] = packets(a, da)
    assert decode_packet(encoded) == p
    delivered = deliver(b, db, encoded)
    assert delivered["status"] == "0x1"
    assert received_from_logs(delivered["logs"], _chain(db), p.guid) == (
        RECIPIENT.lower(),
        25 * USDT,
    )
    assert transferred(delivered["logs"], db.token, db.pool, RECIPIENT) == 25 * USDT
    assert usdt_balance(b, db, RECIPIENT) == 25 * USDT
    # a replay: the DVN cannot verify a delivered nonce again, nor lzReceive run twice
    assert transact(b, db.endpoint, verify_data(encoded), DVN)["status"] == "0x0"
    assert transact(b, db.endpoint, lz_receive_data(encoded), DVN)["status"] == "0x0"
    assert usdt_balance(b, db, RECIPIENT) == 25 * USDT and deliveries(b, db) == 1


def test_a_delivery_needs_the_dvns_verification_of_that_very_message(chains) -> None:
    a, b = chains
    da, db = set_up(a, b, 100 * USDT)
    _send(a, da, 5 * USDT)
    [encoded] = packets(a, da)
    # not verified: the permissionless lzReceive has nothing to match
    assert transact(b, db.endpoint, lz_receive_data(encoded), HOLDER)["status"] == "0x0"
    # verified by someone who is not the DVN: refused
    assert transact(b, db.endpoint, verify_data(encoded), HOLDER)["status"] == "0x0"
    # verified, then delivered with a larger amount: the payload hash does not match
    assert transact(b, db.endpoint, verify_data(encoded), DVN)["status"] == "0x1"
    tampered = encoded[:-16] + f"{50 * USDT:016x}"
    assert decode_packet(tampered).amount == 50 * USDT
    assert transact(b, db.endpoint, lz_receive_data(tampered), HOLDER)["status"] == "0x0"
    assert usdt_balance(b, db, RECIPIENT) == 0
    # the verified message itself, by anyone (the executor is permissionless)
    assert transact(b, db.endpoint, lz_receive_data(encoded), HOLDER)["status"] == "0x1"
    assert usdt_balance(b, db, RECIPIENT) == 5 * USDT


def test_a_send_below_its_minimum_or_without_its_fee_reverts_and_takes_nothing(chains) -> None:
    a, b = chains
    da, _ = set_up(a, b, 100 * USDT)

    send_call(a, da.pool, "setFeeBps(uint256)", f"{6:064x}")  # 0.06 %: receives less than sent
    assert _send(a, da, 10 * USDT)["status"] == "0x0"  # minAmountLD = amount: slippage
    assert _send(a, da, 10 * USDT, value=NATIVE_FEE - 1)["status"] == "0x0"
    assert usdt_balance(a, da, HOLDER) == 100 * USDT and packets(a, da) == []
    ok = _send(a, da, 10 * USDT, min_amount=9 * USDT)
    sent = sent_from_logs(ok["logs"], _chain(da))
    assert sent is not None and (sent.amount_sent, sent.amount_received) == (10 * USDT, 9_994_000)
