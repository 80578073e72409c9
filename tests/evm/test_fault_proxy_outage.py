"""The fault harness's outage meets traffic (issue 44 item 8): armed on the clock
(tests/evm/harness.py start_outage), it starts with the next call, however long
the proxy stays quiet first, so the verdict's `counts["outage"] > 0` holds on
any machine. A window on the clock could fall while the runtimes were still
starting (one CCIP harness run failed so)."""

from __future__ import annotations

import time
import urllib.error

import pytest

from evm.anvil import CHAIN_ID, rpc
from evm.lagproxy import FaultProxy


def test_an_armed_outage_starts_with_the_next_call_after_a_quiet_stretch(anvil) -> None:
    proxy = FaultProxy(anvil.url)
    try:
        proxy.outage_from_next_call(0.5)
        time.sleep(1.0)  # the scenario: the proxy gets no call for longer than the outage
        with pytest.raises(urllib.error.HTTPError) as refused:
            rpc(proxy.url, "eth_chainId")
        assert refused.value.code == 503
        assert proxy.count("outage") == 1
        deadline = time.monotonic() + 10
        while True:  # and it ends: the outage's length after that call
            try:
                assert int(str(rpc(proxy.url, "eth_chainId")), 16) == CHAIN_ID
                break
            except urllib.error.HTTPError:
                assert time.monotonic() < deadline, "the outage never ended"
                time.sleep(0.05)
    finally:
        proxy.close()
