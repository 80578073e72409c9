"""Pure EVM rules (issue 11): RPC URL parsing, amounts, ERC-20 calldata, nonce decisions.

Kept free of I/O so the rules that decide what happened to a nonce can be read
and tested on their own; the provider and evm_nonce_reaper only feed them facts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any, TypeGuard

from qtg.domain.errors import ConfigError

_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
#: keccak("transfer(address,uint256)")[:4]
ERC20_TRANSFER_SELECTOR = "a9059cbb"
#: keccak("balanceOf(address)")[:4]
ERC20_BALANCE_OF_SELECTOR = "70a08231"
#: keccak("approve(address,uint256)")[:4], keccak("allowance(address,address)")[:4] and
#: keccak("increaseAllowance(address,uint256)")[:4]: the allowance raises of ccip and cctp
ERC20_APPROVE_SELECTOR = "095ea7b3"
ERC20_ALLOWANCE_SELECTOR = "dd62ed3e"
ERC20_INCREASE_ALLOWANCE_SELECTOR = "39509351"
#: decimals() and symbol()
ERC20_DECIMALS_DATA = "0x313ce567"
ERC20_SYMBOL_DATA = "0x95d89b41"


def parse_rpc_urls(raw: str) -> dict[int, tuple[str, ...]]:
    """`MG_EVM_RPC_URLS` (`chain_id=url,…`, several URLs of one chain joined by `|`:
    `1=https://a|https://b`) as {chain_id: (url, …)}; a bad item names the variable."""
    out: dict[int, tuple[str, ...]] = {}
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        chain, sep, joined = item.partition("=")
        chain = chain.strip()
        if not sep or not chain.isdigit() or int(chain) <= 0:
            raise ConfigError(
                f"MG_EVM_RPC_URLS: expected chain_id=url[|url…] with a positive integer "
                f"chain id, got {item!r}"
            )
        urls = tuple(url.strip() for url in joined.split("|"))
        for url in urls:
            if not (url.startswith("http://") or url.startswith("https://")):
                raise ConfigError(
                    f"MG_EVM_RPC_URLS: chain {chain}: each url must be http(s), got {url!r}"
                )
        if len(set(urls)) != len(urls):
            raise ConfigError(f"MG_EVM_RPC_URLS: chain {chain} lists a url twice")
        if int(chain) in out:
            raise ConfigError(
                f"MG_EVM_RPC_URLS: chain {chain} is listed twice (several urls: {chain}=url1|url2)"
            )
        out[int(chain)] = urls
    return out


def parse_drift_contracts(raw: str) -> list[tuple[int, str, bool]]:
    """`MG_VERIFY_DRIFT_CONTRACTS` (`chain_id:address[:erc20],…`) as (chain, address, erc20)."""
    out: list[tuple[int, str, bool]] = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        parts = item.split(":")
        if (
            len(parts) not in (2, 3)
            or not parts[0].isdigit()
            or not is_address(parts[1])
            or (len(parts) == 3 and parts[2] != "erc20")
        ):
            raise ConfigError(
                f"MG_VERIFY_DRIFT_CONTRACTS: expected chain_id:address[:erc20], got {item!r}"
            )
        out.append((int(parts[0]), parts[1].lower(), len(parts) == 3))
    return out


#: JSON-RPC error codes that say the request itself is wrong (it will be wrong again):
#: parse error, invalid request, method not found, invalid params, execution reverted.
PERMANENT_RPC_CODES = frozenset({-32700, -32600, -32601, -32602, 3})
#: Messages that say the transaction can never work as built (the chain's state, not
#: the node's health): retrying them is pointless, and they fail a node before submit.
PERMANENT_RPC_MESSAGES = (
    "revert",
    "insufficient funds",
    "gas required exceeds",
    "intrinsic gas too low",
    "invalid sender",
    "invalid chain id",
    "chain id mismatch",
)


def rpc_error_transient(code: int, message: str) -> bool:
    """Whether a JSON-RPC error answer may clear by itself (issue 24 item 5): a node
    behind, rate-limited, out of resources, an internal error (-32603, -32005, -32000
    "header not found" …) — retried with backoff, failed over, never a failure.
    The request's own faults and a transaction the chain refuses are permanent."""
    if code in PERMANENT_RPC_CODES:
        return False
    text = message.lower()
    return not any(word in text for word in PERMANENT_RPC_MESSAGES)


#: What a node answers to eth_sendRawTransaction when it has judged the bytes and
#: not taken them (geth, erigon, reth, anvil and the hosted providers word these
#: alike): a fee below its floor or the one in flight, funds, gas, a nonce that
#: cannot be used, the transaction's own encoding or signature, a fee cap.
SEND_REFUSAL_MESSAGES = (
    "underpriced",
    "insufficient funds",
    "intrinsic gas too low",
    "gas limit",
    "invalid sender",
    "invalid chain id",
    "chain id mismatch",
    "only replay-protected",
    "nonce too low",
    "nonce too high",
    "already known",
    "known transaction",
    "fee cap",
    "max fee per gas less than",
    "tip higher than",
    "exceeds the configured cap",
    "oversized data",
    "rlp",
    "invalid transaction",
    "revert",
)
#: The request itself was malformed or not understood: it was never processed.
SEND_REQUEST_REFUSED_CODES = frozenset({-32700, -32600, -32601, -32602})


def send_refused(code: int, message: str) -> bool:
    """Whether an error answer to eth_sendRawTransaction says the node did NOT take
    the bytes (a refusal: they are not in its mempool), as opposed to an error of
    the node or of a proxy in front of it — an internal error, a timeout, a rate
    limit, "header not found" — after which the bytes may well be on their way to
    the network. Only a refusal may ever lead to FAILED; anything else is an
    ambiguous broadcast, which the chain decides (never pay twice)."""
    if code in SEND_REQUEST_REFUSED_CODES:
        return True
    text = message.lower()
    return any(word in text for word in SEND_REFUSAL_MESSAGES)


def nonce_lane_key(tx: Mapping[str, Any]) -> str:
    """The nonce lane of an EVM transaction payload (issue 15): one sender on one chain.
    A batching dispatcher submits one lane's transactions in nonce-reservation order."""
    return f"evm:{tx['chainId']}:{str(tx['from']).lower()}"


def is_address(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and bool(_ADDRESS.match(value))


def to_base_units(amount: str, decimals: int) -> int:
    """A decimal amount string in whole units ("1.5") to integer base units; exact or refused."""
    try:
        value = Decimal(amount)
    except (InvalidOperation, TypeError):
        raise ValueError(f"amount {amount!r} is not a decimal number") from None
    scaled = value.scaleb(decimals)
    if scaled != scaled.to_integral_value() or scaled <= 0:
        raise ValueError(f"amount {amount!r} is not a positive multiple of 10^-{decimals}")
    return int(scaled)


def intent_problem(intent: Mapping[str, Any], decimals: object) -> tuple[str, str, str] | None:
    """What makes `intent` impossible for an EVM transfer of a token with
    `decimals`: (field, message, code), or None. Only what the intent itself
    gives is judged (a destination from the node config is the template's)."""
    if "destination" in intent and not is_address(intent["destination"]):
        return (
            "destination",
            f"{intent['destination']!r} is not an EVM address (0x and 40 hex digits)",
            "EVM_BAD_DESTINATION",
        )
    if "amount" in intent and isinstance(decimals, int) and not isinstance(decimals, bool):
        try:
            to_base_units(str(intent["amount"]), decimals)
        except ValueError as exc:
            return "amount", str(exc), "EVM_BAD_AMOUNT"
    return None


def address_word(address: str) -> str:
    """An address as a left-padded ABI word (32 bytes, hex, no 0x): a call argument, a
    log topic after "0x" (CCTP's mintRecipient, sender and burnToken too)."""
    return address.lower().removeprefix("0x").rjust(64, "0")


def erc20_transfer_data(to: str, value: int) -> str:
    """Calldata of ERC-20 `transfer(to, value)`."""
    return "0x" + ERC20_TRANSFER_SELECTOR + address_word(to) + f"{value:064x}"


def erc20_balance_of_data(owner: str) -> str:
    return "0x" + ERC20_BALANCE_OF_SELECTOR + address_word(owner)


def erc20_approve_data(spender: str, value: int) -> str:
    """Calldata of ERC-20 `approve(spender, value)` (sets the allowance)."""
    return "0x" + ERC20_APPROVE_SELECTOR + address_word(spender) + f"{value:064x}"


def erc20_increase_allowance_data(spender: str, added: int) -> str:
    """Calldata of `increaseAllowance(spender, added)` (raises it; not every token has it)."""
    return "0x" + ERC20_INCREASE_ALLOWANCE_SELECTOR + address_word(spender) + f"{added:064x}"


def erc20_allowance_data(owner: str, spender: str) -> str:
    return "0x" + ERC20_ALLOWANCE_SELECTOR + address_word(owner) + address_word(spender)


class NonceVerdict(StrEnum):
    """What evm_nonce_reaper does with a stale reservation."""

    CONSUMED = "consumed"  # the chain used the nonce
    RELEASED = "released"  # never broadcast, not used: free for reuse
    WAIT = "wait"  # broadcast, not mined yet: leave it (maybe page a person)


def nonce_verdict(*, state: str, nonce: int, mined_nonce: int, signed: bool) -> NonceVerdict:
    """Decide from the chain alone. `mined_nonce` is the account's `latest` transaction count
    (every nonce below it is used); `signed` says signed bytes were kept for the reservation
    (they are kept before any broadcast). A nonce is released only if nothing was ever
    signed for broadcast AND the chain did not use it: a "not found" for a signed
    transaction proves nothing (issue 24), and releasing its nonce would let a second
    transaction race the first."""
    if nonce < mined_nonce:
        return NonceVerdict.CONSUMED
    if state == "reserved" and not signed:
        return NonceVerdict.RELEASED
    return NonceVerdict.WAIT


_QUANTITY = re.compile(r"^0x[0-9a-fA-F]{1,64}$")
_DATA = re.compile(r"^0x([0-9a-fA-F]{2})*$")
#: JSON-RPC reads whose answer must be a hex quantity (`null` is never one)
QUANTITY_METHODS = frozenset(
    {
        "eth_chainId",
        "eth_blockNumber",
        "eth_getTransactionCount",
        "eth_getBalance",
        "eth_estimateGas",
        "eth_maxPriorityFeePerGas",
        "eth_gasPrice",
    }
)
#: reads whose answer must be hex data
DATA_METHODS = frozenset({"eth_call", "eth_getCode"})


def answer_problem(method: str, result: object) -> str | None:
    """Why `result` cannot be `method`'s answer (a `null`, a number where hex was due, a
    fee history without base fees), or None. Such an answer is no answer (issue 43 item
    6): the read fails over to the next URL and, failing everywhere, is a wait — never a
    TypeError that fails a movement. Lookups whose `null` means "not found" (receipts,
    transactions by hash, blocks) are not judged here."""
    if method in QUANTITY_METHODS:
        if not isinstance(result, str) or not _QUANTITY.match(result):
            return f"{method} answered {str(result)[:40]!r}, not a hex quantity"
    elif method in DATA_METHODS:
        if not isinstance(result, str) or not _DATA.match(result):
            return f"{method} answered {str(result)[:40]!r}, not hex data"
    elif method == "eth_feeHistory":
        fees = result.get("baseFeePerGas") if isinstance(result, dict) else None
        if (
            not isinstance(fees, list)
            or not fees
            or not all(isinstance(f, str) and _QUANTITY.match(f) for f in fees)
        ):
            return f"eth_feeHistory answered {str(result)[:60]!r}, without base fees"
    return None
