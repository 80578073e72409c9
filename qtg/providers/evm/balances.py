"""The evm provider's balance fetcher (issue 13): what configured addresses hold on chain.

One fetcher per chain, venue `evm:<chain_id>`: for each address (the signer's
and MG_EVM_BALANCE_ADDRESSES_CSV), the native coin (`eth_getBalance`, asset
`native`, 18 decimals) and each ERC-20 of MG_EVM_BALANCE_TOKENS_CSV
(`balanceOf`, scaled by the token's own `decimals()`; asset = the token's
address). Every read of a fetch goes out at once (`EvmRpc.read_many`), so the
lists cost one batch request, not a round trip per address and token (issue 29
item 3). Amounts are exact Decimals; any RPC failure raises, so the snapshot
records a failure rather than a zero.
"""

from __future__ import annotations

from decimal import Decimal

from qtg.domain.evm import ERC20_DECIMALS_DATA, erc20_balance_of_data
from qtg.providers.balances import Balance
from qtg.providers.evm.rpc import EvmRpc

NATIVE_DECIMALS = 18


def scaled(raw: int, decimals: int) -> Decimal:
    """`raw` base units as an exact decimal amount."""
    return Decimal(raw).scaleb(-decimals)


class EvmBalanceFetcher:
    def __init__(self, rpc: EvmRpc, addresses: list[str], tokens: list[str]) -> None:
        self.rpc = rpc
        self.key = f"evm:{rpc.chain_id}"
        self.venue_key = f"evm:{rpc.chain_id}"
        self.addresses = list(dict.fromkeys(a.lower() for a in addresses))
        self.tokens = list(dict.fromkeys(t.lower() for t in tokens))

    async def fetch_balances(self) -> list[Balance]:
        """Every read of the lists at once (`EvmRpc.read_many`): the tokens' decimals and
        each address's native and token balances in one round trip per
        MG_EVM_RPC_BATCH_MAX reads, not one per address and token (issue 29 item 3)."""
        reads: list[tuple[str, tuple[object, ...]]] = [
            ("eth_call", ({"to": token, "data": ERC20_DECIMALS_DATA}, "latest"))
            for token in self.tokens
        ]
        for address in self.addresses:
            reads.append(("eth_getBalance", (address, "latest")))
            for token in self.tokens:
                reads.append(
                    ("eth_call", ({"to": token, "data": erc20_balance_of_data(address)}, "latest"))
                )
        raws = iter(int(raw, 16) for raw in await self.rpc.read_many(reads))
        decimals = {token: next(raws) for token in self.tokens}
        rows: list[Balance] = []
        for address in self.addresses:
            rows.append(
                Balance(account=address, asset="native", amount=scaled(next(raws), NATIVE_DECIMALS))
            )
            for token in self.tokens:
                rows.append(
                    Balance(
                        account=address,
                        asset=token,
                        amount=scaled(next(raws), decimals[token]),
                        detail={"decimals": decimals[token]},
                    )
                )
        return rows
