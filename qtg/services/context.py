"""What every service pass is handed: the database, the settings and the providers,
and, in a runtime, its in-process wake-ups and metrics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from qtg.config import Settings
from qtg.db import Database
from qtg.services.known_waits import KnownWaits
from qtg.services.reaper_cadence import ReaperCadence
from qtg.services.right_of_way import RightOfWay
from qtg.services.sweep_cursor import SweepCursor

if TYPE_CHECKING:
    from qtg.providers.registry import ProviderRegistry
    from qtg.services.durability import DurabilityWatch
    from qtg.services.metrics import RuntimeMetrics


@dataclass(frozen=True, slots=True)
class ServiceContext:
    db: Database
    settings: Settings
    providers: ProviderRegistry
    #: Wake this process's workers of a channel in-process (the runtime passes
    #: ListenHub.wake; None outside a reactive runtime: the NOTIFY does it).
    wake: Callable[[str], None] | None = None
    #: The runtime's instruments (node pickup and time-in-state histograms).
    metrics: RuntimeMetrics | None = None
    #: The durability policy's latest verdict and hold (issue 27); None outside a runtime.
    durability: DurabilityWatch | None = None
    #: Per provider (executor key), the bound of its calls in flight that the
    #: passes sharing this context honour (MG_NODE_OBSERVE_PROVIDER_CONCURRENCY
    #: for the observer's batches); made on first use (`provider_limit`).
    provider_limits: dict[str, trio.CapacityLimiter] = field(default_factory=dict)
    #: The observer's claimed batches in flight in this process
    #: (MG_NODE_OBSERVE_BATCHES_IN_FLIGHT), across its lanes; made on first use
    #: (`observe_batch_limit`).
    observe_batches: list[trio.CapacityLimiter] = field(default_factory=list)
    #: The dispatcher's right of way over the observer (qtg.services.right_of_way),
    #: shared by the passes of one process.
    right_of_way: RightOfWay = field(default_factory=RightOfWay)
    #: What the dispatcher last read of the transient waits (qtg.services.known_waits),
    #: so that its passes release due waits only when one may be due.
    dispatch_waits: KnownWaits = field(default_factory=KnownWaits)
    #: This runtime process's instance id (qtg.services.heartbeats.ProcessId), which
    #: its write-aheads record as the owner of their attempts (issue 43 item 7);
    #: None outside a runtime (no owner: recovery waits the SUBMITTING grace).
    instance_id: str | None = None
    #: Where the settle sweep's last window ended (qtg.services.sweep_cursor).
    settle_cursor: SweepCursor = field(default_factory=SweepCursor)
    #: When evm_nonce_reaper's last full pass ran, so that its short reorg-watch passes
    #: between them stay short (qtg.services.reaper_cadence).
    reaper_cadence: ReaperCadence = field(default_factory=ReaperCadence)

    def provider_limit(self, key: str, limit: int) -> trio.CapacityLimiter:
        """The limiter of provider `key`, made with `limit` on first use."""
        limiter = self.provider_limits.get(key)
        if limiter is None:
            limiter = self.provider_limits[key] = trio.CapacityLimiter(limit)
        return limiter

    def observe_batch_limit(self, limit: int) -> trio.CapacityLimiter:
        """The limiter of the observer's batches in flight, made with `limit` on first use."""
        if not self.observe_batches:
            self.observe_batches.append(trio.CapacityLimiter(limit))
        return self.observe_batches[0]

    async def give_way(self) -> None:
        """The observer's step gives way to a dispatch stretch in progress, for at most
        MG_NODE_OBSERVE_GIVE_WAY_MS from its start (qtg/services/right_of_way.py)."""
        await self.right_of_way.give_way(self.settings.node_observe_give_way_ms / 1000)

    def node_left_state(self, state: str, seconds: float) -> None:
        """Record that a node this pass moved on spent `seconds` in `state`
        (after the commit that moved it; a no-op without metrics)."""
        if self.metrics is not None:
            self.metrics.node_left_state(state, seconds)
