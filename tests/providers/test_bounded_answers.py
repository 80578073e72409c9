"""Provider answers are bounded before they are decoded (issue 44).

A provider's HTTP answer is input from outside like an API body: an RPC node,
Circle's attestation API or the Gateway could answer JSON nested 100,000 deep,
and with eth-account loaded (py_ecc raises the recursion limit to 100,000) a
recursive decoder would run off the C stack and kill the runtime. The answer
is refused as "no answer" instead, naming why, from a real loopback server.
"""

from __future__ import annotations

import sys

import httpx
import pytest
import trio
from receiver import Receiver

from qtg.providers.evm.rpc import EvmRpc, RpcUnavailable
from qtg.providers.gateway import GatewayBalanceFetcher, GatewayError

DEPTH = 100_000
DEEP = b"[" * DEPTH + b"]" * DEPTH


def test_this_process_carries_the_raised_recursion_limit() -> None:
    """The providers are imported here as in the runtime: the limit no longer protects."""
    import qtg.providers.evm.signer  # noqa: F401

    assert sys.getrecursionlimit() >= DEPTH


async def test_an_rpc_node_answering_deep_json_is_no_answer() -> None:
    receiver = Receiver(secret=b"unused")
    async with trio.open_nursery() as nursery:
        await nursery.start(receiver.serve)
        receiver.behave("/rpc", DEEP)
        rpc = EvmRpc(1, [receiver.url("/rpc")], timeout=5.0, concurrency=2, read_retries=1)
        try:
            with pytest.raises(RpcUnavailable, match="deeper than 64"):
                await rpc.call("eth_getBalance", "0x" + "11" * 20, "latest")
        finally:
            await rpc.aclose()
        assert receiver.on("/rpc"), "the answer really came from the server"
        nursery.cancel_scope.cancel()


async def test_a_gateway_answering_deep_json_is_refused() -> None:
    receiver = Receiver(secret=b"unused")
    async with trio.open_nursery() as nursery:
        await nursery.start(receiver.serve)
        receiver.behave("/v1/balances", DEEP)
        async with httpx.AsyncClient(timeout=5) as client:
            fetcher = GatewayBalanceFetcher(client, receiver.url(""), ["0x" + "22" * 20])
            with pytest.raises(GatewayError, match="not JSON"):
                await fetcher.fetch_balances()
        nursery.cancel_scope.cancel()
