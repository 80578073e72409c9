"""Running one pass's items side by side, under the pass's own nursery."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import trio

T = TypeVar("T")


async def run_each(fn: Callable[[T], Awaitable[int]], items: Sequence[T], limit: int) -> int:
    """Await `fn(item)` for every item, at most `limit` at a time; return the sum.

    Each item gets its own transaction inside `fn`, so one slow provider call
    never holds the locks of the others (reference §2). An exception in one
    item cancels the rest and propagates: run_loop logs it and backs off.
    """
    if len(items) == 1:
        return await fn(items[0])
    limiter = trio.CapacityLimiter(max(1, limit))
    total = 0

    async def one(item: T) -> None:
        nonlocal total
        async with limiter:
            done = await fn(item)
        total += done  # not `total += await …`: that reads `total` before awaiting

    async with trio.open_nursery() as nursery:
        for item in items:
            nursery.start_soon(one, item)
    return total


async def run_each_isolated(
    fn: Callable[[T], Awaitable[int]], items: Sequence[T], limit: int
) -> int:
    """Like `run_each`, but one item's exception does not cancel the others.

    For work past a write-ahead commit (submits): a sibling's failure must not
    cancel a side effect in flight. A failed item counts 0; once every item has
    finished, the first exception is raised.
    """
    failures: list[Exception] = []

    async def isolated(item: T) -> int:
        try:
            return await fn(item)
        except Exception as exc:  # the siblings must finish: raised below
            failures.append(exc)
            return 0

    done = await run_each(isolated, items, limit)
    if failures:
        raise failures[0]
    return done
