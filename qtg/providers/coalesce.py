"""Calls that arrive together answered by one batch call (issue 29 item 3: provider-side
batching where the provider allows it).

The observer has dozens of observations in flight at once; a provider whose remote
system answers many keys in one request should get one request, not one each. A
`Coalescer` gathers every key asked before its flusher runs — the flusher is a task
started by the first ask, so the window is one trio scheduling round: no timer, no
added latency for a lone call — and answers them with one call of `answer(items)`,
which answers each by its key (`key(item)`; the item itself by default). An item
whose key is already in the batch goes in the next one, so a batch never names a key
twice (an `INSERT … ON CONFLICT DO UPDATE` cannot touch one row twice in one
statement): two asks of one key are two calls, as if each had been made alone.

Up to `in_flight` batch calls run side by side, so one slow call (a connection being
made again after a database restart, a remote system that stalls) holds up only its
own callers, not every call after it. Under load, what is asked while every slot is
busy waits for the next free one and goes in one batch: the busier the provider, the
larger the batches.

The flusher and each batch call are system tasks, not the first caller's: a caller
cancelled by its own deadline must not take the other callers' batch down with it
(they are bounded by the trio run, as the evm provider's batches are). An ask cancelled
before its batch is sent is taken out of it (never sent); one cancelled after is
sent and its answer dropped, as a single call cut off mid-flight would be. A batch
call that raises raises in each of its callers an exception of the same type and
message — a copy, caused by the original — so a caller tells a lost connection from
anything else exactly as for a call of its own (the dispatcher leaves a submit whose
database connection died SUBMITTING, and makes any other error UNKNOWN);
`BatchFailed` when the batch was cancelled or the error cannot be copied.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import trio

Item = TypeVar("Item")
V = TypeVar("V")

#: The batch call: an answer per key it knows; an item whose key is left out is answered None.
Answer = Callable[[Sequence[Item]], Awaitable[Mapping[Any, V]]]


def _itself(item: Any) -> Hashable:
    return item  # type: ignore[no-any-return]


class BatchFailed(Exception):
    """The batch that carried this ask was cancelled, or raised what cannot be copied."""


def _fresh(exc: Exception) -> Exception:
    """A new exception like `exc` for one caller (one instance raised in several tasks
    would pile their tracebacks together)."""
    try:
        twin = copy.copy(exc)
    except Exception:
        return BatchFailed(f"{type(exc).__name__}: {exc}")
    return twin if type(twin) is type(exc) else BatchFailed(f"{type(exc).__name__}: {exc}")


@dataclass(eq=False)
class _Ask(Generic[Item, V]):
    item: Item
    key: Hashable
    done: trio.Event = field(default_factory=trio.Event)
    value: V | None = None
    error: Exception | None = None


async def slot_then_round(slots: trio.CapacityLimiter) -> object:
    """A free slot of `slots`, then one trio scheduling round, so that every ask made
    meanwhile joins the batch the slot will carry; the token that holds the slot (give
    it back with `slots.release_on_behalf_of`). Cancelled in between, the slot is
    given back. The batch flushers' shared first step (here and qtg.providers.evm.rpc)."""
    slot = object()
    await slots.acquire_on_behalf_of(slot)
    try:
        await trio.lowlevel.checkpoint()
    except BaseException:
        slots.release_on_behalf_of(slot)
        raise
    return slot


class Coalescer(Generic[Item, V]):
    """`ask(item)` answered by `answer([items])` together with the items other tasks
    ask in the same scheduling round, at most `batch_max` a call."""

    def __init__(
        self,
        answer: Answer[Item, V],
        *,
        name: str,
        key: Callable[[Item], Hashable] = _itself,
        batch_max: int = 100,
        in_flight: int = 4,
    ) -> None:
        if batch_max < 1:
            raise ValueError(f"batch_max must be at least 1, not {batch_max}")
        if in_flight < 1:
            raise ValueError(f"in_flight must be at least 1, not {in_flight}")
        self._answer = answer
        self._slots = trio.CapacityLimiter(in_flight)
        self._key = key
        self._name = name
        self.batch_max = batch_max
        self._pending: list[_Ask[Item, V]] = []
        self._flushing = False

    async def ask(self, item: Item) -> V | None:
        """`item`'s answer (None: the batch call did not answer its key)."""
        ask: _Ask[Item, V] = _Ask(item, self._key(item))
        self._pending.append(ask)
        if not self._flushing:
            self._flushing = True
            trio.lowlevel.spawn_system_task(self._flush, name=self._name)
        try:
            await ask.done.wait()
        finally:
            if not ask.done.is_set() and ask in self._pending:
                self._pending.remove(ask)  # cancelled before it was sent: never sent
        if ask.error is not None:
            raise _fresh(ask.error) from ask.error
        return ask.value

    async def _flush(self) -> None:
        """Start a batch call per free slot for what waits, until nothing does. Never
        raises (a system task): every ask it takes is settled, whatever happens."""
        try:
            while True:
                slot = await slot_then_round(self._slots)
                batch = self._take()
                if not batch:  # no await from here on: a later ask starts a new flusher
                    self._slots.release_on_behalf_of(slot)
                    return
                trio.lowlevel.spawn_system_task(self._call, batch, slot, name=self._name)
        finally:
            self._flushing = False
            if self._pending:  # cancelled (the run ends) with asks waiting
                for ask in self._pending:
                    ask.error = BatchFailed("the batch was cancelled")
                    ask.done.set()
                self._pending.clear()

    def _take(self) -> list[_Ask[Item, V]]:
        """The next batch: waiting asks in order, each key once, at most batch_max."""
        batch: list[_Ask[Item, V]] = []
        keys: set[Hashable] = set()
        later: list[_Ask[Item, V]] = []
        for ask in self._pending:
            if ask.key in keys or len(batch) >= self.batch_max:
                later.append(ask)
            else:
                keys.add(ask.key)
                batch.append(ask)
        self._pending = later
        return batch

    async def _call(self, batch: list[_Ask[Item, V]], slot: object) -> None:
        """One batch call, holding `slot`; settles every ask of it. Never raises but
        for cancellation (a system task)."""
        try:
            answers = await self._answer([ask.item for ask in batch])
        except BaseException as exc:
            error = exc if isinstance(exc, Exception) else BatchFailed("the batch was cancelled")
            for ask in batch:
                ask.error = error
                ask.done.set()
            if not isinstance(exc, Exception):
                raise  # cancellation: the run ends
            return
        finally:
            self._slots.release_on_behalf_of(slot)
        for ask in batch:
            ask.value = answers.get(ask.key)
            ask.done.set()
