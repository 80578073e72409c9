"""What happened to one nonce of ours: decided by the chain, never by one "not found" (issue 24).

The rule, for every chain executor (evm, ccip and any later one):

    A transaction that may have been broadcast is never reported FAILED, and its
    nonce is never released, until the chain has consumed that nonce; then the
    outcome is whatever consumed it.

Every signed transaction of a nonce is kept (the payment, each fee-bumped
replacement, a reaper's gap fill). While the nonce is unconsumed the newest
signed bytes are broadcast again (idempotent: the same bytes are the same
transaction) and, after MG_EVM_REPLACE_AFTER_SECONDS, replaced at the same
nonce with a fee bump — never a new nonce for the same payment. Once the chain
has consumed the nonce at the depth we trust, one of ours mined → its receipt
decides; none of ours → ours can never land, and a new attempt is safe — but
only when two judgements, some time apart, agree (one RPC's lagging answer is
not proof).

`judge` is pure: the provider (qtg.providers.evm.outcome.ChainJudge) gathers the
facts and acts on the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from qtg.domain.errors import ConfigError
from qtg.domain.evm import address_word

#: Geth refuses a same-nonce replacement below +10 % on both fee fields; 12 % clears it.
REPLACEMENT_BUMP_PERCENT = 12
#: Depth names accepted besides a block count (JSON-RPC block tags).
DEPTH_TAGS = frozenset({"safe", "finalized"})


class Verdict(StrEnum):
    #: mined at the trusted depth with status 1 (and the effect, if checked, is there)
    COMPLETED = "completed"
    #: mined at the trusted depth and reverted: the chain proves no value moved
    FAILED_REVERTED = "failed_reverted"
    #: mined with status 1 but the expected effect is missing: money may have gone
    #: elsewhere, a person decides
    NEEDS_PERSON = "needs_person"
    #: mined (or the nonce consumed) above the trusted depth: wait for depth
    AWAIT_DEPTH = "await_depth"
    #: unconsumed: broadcast the newest signed bytes again and wait
    WAIT_REBROADCAST = "wait_rebroadcast"
    #: unconsumed for MG_EVM_REPLACE_AFTER_SECONDS: sign the same payload with a fee bump
    REPLACE_WITH_BUMP = "replace_with_bump"
    #: consumed at depth by a transaction that is not ours, seen once: look again later
    CONFIRM_NOT_LANDED = "confirm_not_landed"
    #: consumed at depth by another transaction, confirmed: ours can never land
    NOT_LANDED = "not_landed"
    #: we never signed anything for this nonce and the chain has not used it: free
    NOTHING_SIGNED = "nothing_signed"


@dataclass(frozen=True, slots=True)
class Receipt:
    tx_hash: str
    status: int
    block: int
    #: None: no effect to check (native coin); False: the expected log is missing
    effect_ok: bool | None = None


@dataclass(frozen=True, slots=True)
class Facts:
    nonce: int
    #: hashes of every transaction we signed for this nonce, oldest first
    ours: Sequence[str]
    #: receipts found for any of `ours` (absent = not found this time)
    receipts: Sequence[Receipt]
    #: the highest block we trust (latest - (confirmations - 1), or the safe/finalized block)
    trusted_head: int
    #: the account's transaction count at trusted_head and at the tip
    count_at_trusted: int
    count_latest: int
    #: seconds since the newest signed transaction of this nonce was signed
    newest_age_seconds: float
    replace_after_seconds: float
    #: seconds since an earlier judgement first found the nonce consumed by another
    #: transaction (None: never, or that finding was contradicted since)
    not_landed_for_seconds: float | None = None
    not_landed_confirm_seconds: float = 15.0


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    receipt: Receipt | None = None


def judge(facts: Facts) -> Judgement:
    """The verdict on one nonce of ours from the chain's facts (see the module docstring)."""
    ours = set(facts.ours)
    for receipt in facts.receipts:
        if receipt.tx_hash not in ours:
            continue
        if receipt.block > facts.trusted_head:
            return Judgement(Verdict.AWAIT_DEPTH, receipt)
        if receipt.status != 1:
            return Judgement(Verdict.FAILED_REVERTED, receipt)
        if receipt.effect_ok is False:
            return Judgement(Verdict.NEEDS_PERSON, receipt)
        return Judgement(Verdict.COMPLETED, receipt)
    if facts.count_at_trusted > facts.nonce:
        if not ours:
            return Judgement(Verdict.NOT_LANDED)  # nothing of ours exists to land
        seen = facts.not_landed_for_seconds
        if seen is not None and seen >= facts.not_landed_confirm_seconds:
            return Judgement(Verdict.NOT_LANDED)
        return Judgement(Verdict.CONFIRM_NOT_LANDED)
    if facts.count_latest > facts.nonce:
        return Judgement(Verdict.AWAIT_DEPTH)  # used at the tip: by ours or not, depth tells
    if not ours:
        return Judgement(Verdict.NOTHING_SIGNED)
    if facts.newest_age_seconds >= facts.replace_after_seconds:
        return Judgement(Verdict.REPLACE_WITH_BUMP)
    return Judgement(Verdict.WAIT_REBROADCAST)


def bumped(old: int, market: int) -> int:
    """A replacement's fee field: at least +REPLACEMENT_BUMP_PERCENT over the old one
    (what nodes require to accept a same-nonce replacement), or the market's if higher."""
    return max(old + (old * REPLACEMENT_BUMP_PERCENT + 99) // 100, market)


def trusted_head(depth: int | str, latest: int, tagged: int | None = None) -> int:
    """The highest block whose contents we trust: `latest - (n - 1)` for a count `n`
    (0 and 1 both mean the tip), or the block the safe/finalized tag names."""
    if isinstance(depth, int):
        return latest - max(depth - 1, 0)
    if tagged is None:
        raise ValueError(f"depth {depth!r} needs the tagged block number")
    return tagged


def parse_depths(raw: str) -> dict[int, int | str]:
    """`MG_EVM_CONFIRMATIONS_BY_CHAIN` (`31337=3,1=safe`): {chain_id: n | "safe" | "finalized"}."""
    out: dict[int, int | str] = {}
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        chain, sep, depth = (part.strip() for part in item.partition("="))
        if not sep or not chain.isdigit() or not (depth.isdigit() or depth in DEPTH_TAGS):
            raise ConfigError(
                f"MG_EVM_CONFIRMATIONS_BY_CHAIN: expected chain_id=n|safe|finalized, got {item!r}"
            )
        out[int(chain)] = int(depth) if depth.isdigit() else depth
    return out


@dataclass(frozen=True, slots=True)
class FeeCap:
    max_fee_wei: int
    max_tip_wei: int


def parse_fee_caps(raw: str) -> dict[int, FeeCap]:
    """`MG_EVM_FEE_CAPS` (`1=200:3,31337=50:2`): per chain, maxFeePerGas and
    maxPriorityFeePerGas caps in gwei (decimals allowed)."""
    from decimal import Decimal, InvalidOperation

    out: dict[int, FeeCap] = {}
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        chain, sep, caps = (part.strip() for part in item.partition("="))
        fee, colon, tip = caps.partition(":")
        try:
            if not sep or not colon or not chain.isdigit():
                raise InvalidOperation
            gwei = [Decimal(fee), Decimal(tip)]
        except InvalidOperation:
            raise ConfigError(
                f"MG_EVM_FEE_CAPS: expected chain_id=max_fee_gwei:max_tip_gwei, got {item!r}"
            ) from None
        if any(g <= 0 for g in gwei):
            raise ConfigError(f"MG_EVM_FEE_CAPS: caps must be positive, got {item!r}")
        out[int(chain)] = FeeCap(int(gwei[0].scaleb(9)), int(gwei[1].scaleb(9)))
    return out


def fee_over_cap(cap: FeeCap | None, max_fee: int, tip: int) -> str | None:
    """Why (max_fee, tip) is above the chain's cap, or None when within it / uncapped."""
    if cap is None:
        return None
    if max_fee > cap.max_fee_wei:
        return f"maxFeePerGas {max_fee} wei is above the cap {cap.max_fee_wei} wei"
    if tip > cap.max_tip_wei:
        return f"maxPriorityFeePerGas {tip} wei is above the cap {cap.max_tip_wei} wei"
    return None


def with_margin(value: int, percent: float) -> int:
    """`value` raised by `percent` (rounded up): a gas estimate or a quoted fee's headroom."""
    return value + -(-int(value * percent) // 100)


def effect_seen(
    logs: Sequence[Mapping[str, Any]], token: str, sender: str, destination: str, amount: int
) -> bool:
    """True when `logs` carry the ERC-20 `Transfer(sender, destination, amount)` of `token`."""
    want = [
        TRANSFER_TOPIC,
        "0x" + address_word(sender),
        "0x" + address_word(destination),
    ]
    for log in logs:
        topics = [str(t).lower() for t in log.get("topics") or []]
        if str(log.get("address", "")).lower() != token.lower() or topics != want:
            continue
        data = str(log.get("data") or "0x")
        if data not in ("0x", "") and int(data, 16) == amount:
            return True
    return False


#: keccak("Transfer(address,address,uint256)")
TRANSFER_TOPIC = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
