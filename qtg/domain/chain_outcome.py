"""What happened to one nonce of ours: decided by the chain, never by one "not found"
(issues 24 and 43).

The rule, for every chain executor (evm, ccip, cctp):

    A transaction that may have been broadcast is never reported FAILED, and its
    nonce is never released, until the chain has consumed that nonce; then the
    outcome is whatever consumed it — read from the block that consumed it.

Every signed transaction of a nonce is kept (the payment, each fee-bumped
replacement, a reaper's gap fill). While the nonce is unconsumed the newest
signed bytes are broadcast again (idempotent: the same bytes are the same
transaction) and, after MG_EVM_REPLACE_AFTER_SECONDS, replaced at the same
nonce with a fee bump — never a new nonce for the same payment. Once the chain
has consumed the nonce at the depth we trust, one of ours with a receipt → its
receipt decides. Without one, a missing receipt proves nothing (a lagging index,
a pruned node): the transaction that consumed the nonce is found in its block
(qtg.providers.evm.consumed) and its hash decides —

- one of this attempt's: paid; its receipt (read from the block) decides, and
  until a receipt can be read the node waits (never a new attempt);
- one qtg signed for something else (a gap fill, a cancel, another attempt):
  this attempt's can never land, proven by that hash: a new attempt is safe;
- one qtg never signed: the key is used elsewhere (or the ledger lost what it
  signed): the signer is held (qtg.providers.evm.holds) and a person decides.

While nothing can be read the verdict is a wait, flagged for a page once the
evidence has been missing for MG_EVM_EVIDENCE_ATTENTION_SECONDS.

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


#: Observe action types an operator cannot settle FAILED by saying so (issue 46): their
#: money left with an earlier node and may still arrive; the provider proves the failure
#: from the chains (the executor's `prove_failure`, e.g. a cancelled DLN order's refund).
PROVIDER_PROVEN_FAILURES = frozenset({"debridge_fulfillment"})

#: Observe action types no one can settle FAILED (issue 46), and why: their money left
#: with an earlier node, nothing can call it back, and it may still arrive — so no chain
#: can ever prove that no money moved. Operators may settle them COMPLETED (naming the
#: delivery), or resume the movement so recovery asks again.
NEVER_FAILED_BY_OPERATORS: dict[str, str] = {
    "stargate_delivery": "the send's tokens left the source chain and its LayerZero "
    "message cannot be cancelled: the destination may still deliver it, so no chain "
    "can prove that no money moved (a send that reverted is FAILED on its own receipt)",
}


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
    #: consumed at depth, and the consuming transaction (or, when it is ours, its
    #: receipt) cannot be read yet: wait, never a new attempt (paged past the bound)
    AWAIT_EVIDENCE = "await_evidence"
    #: consumed at depth by a transaction qtg signed for something else (a gap fill, a
    #: cancel, another attempt), named in `consumer`: ours can never land
    NOT_LANDED = "not_landed"
    #: consumed at depth by a transaction qtg never signed: the key is used elsewhere;
    #: the signer is held and a person decides (ours can never land, but the foreign
    #: transaction may itself be this payment, signed by a ledger since lost)
    FOREIGN_CONSUMER = "foreign_consumer"
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
    #: the hash of the transaction from the signer with this nonce, read from the block
    #: where the account's count passed it (None: not looked for, or unreadable)
    consumer: str | None = None
    consumer_block: int | None = None
    #: every hash qtg signed for this nonce, whatever for (gap fills, other attempts)
    qtg_signed: Sequence[str] = ()
    #: seconds the nonce has been consumed at depth without a receipt of ours (None:
    #: not so), and the bound past which that wait pages
    evidence_missing_seconds: float | None = None
    evidence_attention_seconds: float = 120.0


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    receipt: Receipt | None = None
    #: the consuming transaction, when the verdict rests on it
    consumer: str | None = None
    consumer_block: int | None = None
    #: a wait for evidence that has lasted past its bound: page a person
    attention: bool = False


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
        consumer, block = facts.consumer, facts.consumer_block
        if consumer is None or consumer in ours:
            # unreadable, or ours without a readable receipt: paid or not, only the chain
            # can say; absence of a receipt is never evidence
            missing = facts.evidence_missing_seconds
            late = missing is not None and missing >= facts.evidence_attention_seconds
            return Judgement(
                Verdict.AWAIT_EVIDENCE, consumer=consumer, consumer_block=block, attention=late
            )
        if consumer in set(facts.qtg_signed):
            return Judgement(Verdict.NOT_LANDED, consumer=consumer, consumer_block=block)
        return Judgement(Verdict.FOREIGN_CONSUMER, consumer=consumer, consumer_block=block)
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


def not_landed_proof(judgement: Judgement, nonce: int) -> str:
    """What proves a NOT_LANDED verdict, for the node's error_detail (FAILED or a new
    attempt must name its proof): the transaction that consumed the nonce, or that
    this attempt never signed anything for it."""
    if judgement.consumer is None:
        return f"nonce {nonce} is used at the trusted depth and this attempt signed nothing for it"
    return (
        f"nonce {nonce} was consumed by qtg's own transaction {judgement.consumer} "
        f"(block {judgement.consumer_block}), not by this attempt's: this attempt's can never "
        "be mined"
    )


#: Refusal wordings that mean the bytes (or others at the same nonce) are already with
#: the node: geth "already known", Nethermind "AlreadyKnown", Besu/Erigon "known
#: transaction", "nonce too low" (maybe used by these very bytes), an underpriced
#: replacement (another transaction of that nonce is in the mempool, maybe ours).
IN_FLIGHT_REFUSALS = (
    "already known",
    "alreadyknown",
    "known transaction",
    "already imported",
    "already exists",
    "nonce too low",
    "replacement transaction underpriced",
    "replacement underpriced",
)


def refusal_may_be_in_flight(message: str) -> bool:
    """A broadcast refusal after which the bytes may be (or have been) on their way: the
    nonce is not released and the chain decides (issue 43: the "known transaction"
    wording used to release a nonce whose bytes were in a mempool)."""
    text = message.lower()
    return any(phrase in text for phrase in IN_FLIGHT_REFUSALS)


def transfer_flows(logs: Sequence[Mapping[str, Any]], token: str) -> dict[str, int]:
    """Net ERC-20 flow per address (lower-case hex) of `token`'s Transfer logs in `logs`."""
    flows: dict[str, int] = {}
    for log in logs:
        topics = [str(t).lower() for t in log.get("topics") or []]
        if str(log.get("address", "")).lower() != token.lower() or len(topics) != 3:
            continue
        if topics[0] != TRANSFER_TOPIC:
            continue
        data = str(log.get("data") or "0x")
        value = int(data, 16) if data not in ("0x", "") else 0
        source, target = "0x" + topics[1][-40:], "0x" + topics[2][-40:]
        flows[source] = flows.get(source, 0) - value
        flows[target] = flows.get(target, 0) + value
    return flows


def balances_problem(
    block_logs: Sequence[Mapping[str, Any]],
    token: str,
    before: Mapping[str, int],
    after: Mapping[str, int],
) -> str | None:
    """Issue 43 item 4: an ERC-20 payment is proven by balances, not only by its log. For
    each address in `before`/`after` (the sender and the destination, read at the
    receipt's block - 1 and block), the balance must have changed by exactly the net of
    the token's Transfer logs in that block (ours and any other in the same block). A
    token that logs a Transfer without moving balances fails this. None: they agree."""
    flows = transfer_flows(block_logs, token)
    for address, was in before.items():
        key = address.lower()
        moved = after[address] - was
        logged = flows.get(key, 0)
        if moved != logged:
            return (
                f"token {token.lower()}: the balance of {key} moved by {moved} in the block, "
                f"its Transfer logs say {logged} (before {was}, after {after[address]})"
            )
    return None
