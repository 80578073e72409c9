"""When evm_nonce_reaper's last full pass ran, per runtime process.

The worker passes every MG_EVM_REORG_WATCH_SECONDS (its reorg watch and cancel step,
issue 43 item 5) but its full pass (stale claims, every account's reconcile) only every
MG_EVM_NONCE_REAPER_INTERVAL_SECONDS: this remembers which is due. Kept on the
ServiceContext, so one process's passes share it and a new process starts with a full pass.
"""

from __future__ import annotations

import time


class ReaperCadence:
    __slots__ = ("last_full",)

    def __init__(self) -> None:
        self.last_full: float | None = None

    def full_due(self, interval: float, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return self.last_full is None or now - self.last_full >= interval

    def seconds_to_full(self, interval: float, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        return 0.0 if self.last_full is None else max(0.0, self.last_full + interval - now)

    def ran_full(self, now: float | None = None) -> None:
        self.last_full = time.monotonic() if now is None else now
