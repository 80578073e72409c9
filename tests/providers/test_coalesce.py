"""Provider-side batching (qtg/providers/coalesce.py): asks of one scheduling round are
one batch call, each answered as if it had been made alone; and the sandbox's status
endpoints on it, against the real database."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
import pytest
import trio

from qtg.db import Database
from qtg.db.queries import Query
from qtg.providers.base import ObserveStatus
from qtg.providers.coalesce import BatchFailed, Coalescer
from qtg.providers.sandbox import SandboxExecutor, SandboxSigner, submissions

from .helpers import dispatch, make_context

#: Per sandbox table, the transactions that last wrote the rows named, and their counters.
_XMINS = Query(
    "t/sandbox_xmins",
    """
    SELECT 'observations' AS tbl, count(DISTINCT xmin::text)::int AS writers,
           count(*)::int AS rows, array_agg(DISTINCT observe_count) AS counts
    FROM sandbox_observations WHERE request_node_id = ANY(%(node_ids)s::text[])
    UNION ALL
    SELECT 'submissions', count(DISTINCT xmin::text)::int, count(*)::int,
           array_agg(DISTINCT observe_count)
    FROM sandbox_submissions WHERE idempotency_key = ANY(%(keys)s::text[])
    ORDER BY 1
    """,
)


class Squares:
    """An answer function that records each batch it is called with."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.hold: trio.Event | None = None  # set: the call waits for it

    async def __call__(self, keys: Sequence[int]) -> dict[int, int]:
        self.batches.append(list(keys))
        if self.hold is not None:
            await self.hold.wait()
        return {k: k * k for k in keys if k >= 0}  # a negative key: not known


async def ask_all(coalescer: Coalescer[int, int], keys: list[int]) -> list[int | None]:
    answers: list[int | None] = [None] * len(keys)

    async def one(i: int) -> None:
        answers[i] = await coalescer.ask(keys[i])

    async with trio.open_nursery() as nursery:
        for i in range(len(keys)):
            nursery.start_soon(one, i)
    return answers


async def test_asks_of_one_round_are_one_call_each_answered_its_own() -> None:
    squares = Squares()
    coalescer = Coalescer(squares, name="test")
    assert await ask_all(coalescer, [3, 1, 2, -1]) == [9, 1, 4, None]
    assert [sorted(b) for b in squares.batches] == [[-1, 1, 2, 3]]  # trio starts tasks in any order
    assert await coalescer.ask(5) == 25  # a lone ask: a batch of one, at once
    assert squares.batches[1:] == [[5]]


async def test_a_key_asked_twice_in_a_round_goes_in_the_next_batch() -> None:
    squares = Squares()
    coalescer = Coalescer(squares, name="test")
    assert await ask_all(coalescer, [7, 8, 7]) == [49, 64, 49]
    assert [sorted(b) for b in squares.batches] == [[7, 8], [7]]


async def test_batches_are_at_most_batch_max_keys() -> None:
    squares = Squares()
    coalescer = Coalescer(squares, name="test", batch_max=2)
    assert await ask_all(coalescer, [1, 2, 3, 4, 5]) == [1, 4, 9, 16, 25]
    assert [len(b) for b in squares.batches] == [2, 2, 1]
    assert sorted(k for b in squares.batches for k in b) == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="batch_max"):
        Coalescer(squares, name="test", batch_max=0)


async def test_asks_made_while_every_slot_is_busy_wait_and_go_in_one_batch() -> None:
    squares = Squares()
    squares.hold = trio.Event()
    coalescer = Coalescer(squares, name="test", in_flight=1)
    answers: dict[int, int | None] = {}

    async def one(k: int) -> None:
        answers[k] = await coalescer.ask(k)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, 1)
        await trio.testing.wait_all_tasks_blocked()
        assert squares.batches == [[1]]  # in flight, held: the one slot is busy
        nursery.start_soon(one, 2)
        nursery.start_soon(one, 3)
        await trio.testing.wait_all_tasks_blocked()
        assert squares.batches == [[1]]
        squares.hold.set()
    assert answers == {1: 1, 2: 4, 3: 9}
    assert [sorted(b) for b in squares.batches] == [[1], [2, 3]]
    with pytest.raises(ValueError, match="in_flight"):
        Coalescer(squares, name="test", in_flight=0)


async def test_a_batch_that_stalls_holds_up_only_its_own_asks() -> None:
    squares = Squares()
    stall = squares.hold = trio.Event()  # the first batch stalls (a connection made again …)
    coalescer = Coalescer(squares, name="test")
    first: list[int | None] = []

    async def stalled() -> None:
        first.append(await coalescer.ask(1))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stalled)
        await trio.testing.wait_all_tasks_blocked()
        squares.hold = None  # later batches answer at once
        assert await coalescer.ask(2) == 4  # while the first is still in flight
        assert first == []
        stall.set()
    assert first == [1]
    assert squares.batches == [[1], [2]]


async def test_an_ask_cancelled_before_its_batch_is_sent_is_never_sent() -> None:
    squares = Squares()
    coalescer = Coalescer(squares, name="test")
    with trio.CancelScope() as scope:
        scope.cancel()
        await coalescer.ask(4)
    assert scope.cancelled_caught
    assert await coalescer.ask(6) == 36
    assert squares.batches == [[6]]


async def test_a_batch_call_that_raises_raises_its_like_in_each_ask_and_the_next_works() -> None:
    calls: list[list[int]] = []
    lost = psycopg.OperationalError("server closed the connection unexpectedly")

    async def broken(keys: Sequence[int]) -> dict[int, int]:
        calls.append(list(keys))
        if len(calls) == 1:
            raise lost
        return {k: -k for k in keys}

    coalescer: Coalescer[int, int] = Coalescer(broken, name="test")
    raised: list[BaseException] = []

    async def one(k: int) -> None:
        try:
            await coalescer.ask(k)
        except psycopg.OperationalError as exc:  # as a call of its own would raise
            raised.append(exc)

    async with trio.open_nursery() as nursery:
        for k in (1, 2):
            nursery.start_soon(one, k)
    assert [str(e) for e in raised] == [str(lost)] * 2
    assert raised[0] is not raised[1] and all(e.__cause__ is lost for e in raised)
    assert await coalescer.ask(3) == -3


class Picky(Exception):
    """An exception that cannot be made again from its args (copy.copy fails)."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"{code}: {detail}")


async def test_an_error_that_cannot_be_copied_is_batch_failed_naming_it() -> None:
    async def picky(keys: Sequence[int]) -> dict[int, int]:
        raise Picky(7, "no")

    coalescer: Coalescer[int, int] = Coalescer(picky, name="test")
    with pytest.raises(BatchFailed, match="Picky: 7: no"):
        await coalescer.ask(1)


async def test_asks_cancelled_while_their_batch_waits_are_never_sent() -> None:
    squares = Squares()
    squares.hold = trio.Event()
    coalescer = Coalescer(squares, name="test", in_flight=1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(coalescer.ask, 1)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(coalescer.ask, 2)  # waits for the batch in flight
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    squares.hold.set()  # the batch in flight ends; nothing is left to send
    assert await coalescer.ask(3) == 9
    assert [sorted(b) for b in squares.batches] == [[1], [3]]


async def test_sandbox_observations_in_flight_together_are_one_statement(
    db: Database, sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    watched = [
        make_context(
            "destination_chain_receive_observe",
            node_kind="observe",
            sandbox={"observations_to_complete": 2},
        )
        for _ in range(12)
    ]
    sent = [
        make_context("cex_withdrawal", sandbox={"observations_to_complete": 3}) for _ in range(4)
    ]
    for ctx in sent:
        await dispatch(sandbox, signer, ctx)
    never_sent = make_context("cctp_burn")

    async def observe_all() -> list[ObserveStatus]:
        contexts = [*watched, *sent, never_sent]
        found: list[ObserveStatus] = [ObserveStatus.UNKNOWN] * len(contexts)

        async def one(i: int) -> None:
            found[i] = (await sandbox.observe(contexts[i])).status

        async with trio.open_nursery() as nursery:
            for i in range(len(contexts)):
                nursery.start_soon(one, i)
        return found

    first = await observe_all()
    assert first == [ObserveStatus.PENDING] * 16 + [ObserveStatus.UNKNOWN]
    # The database's own record: each table's rows were written by one transaction.
    writers = await db.fetch(
        _XMINS,
        {
            "node_ids": [c.request_node_id for c in watched],
            "keys": [c.idempotency_key for c in sent],
        },
    )
    assert [(w["tbl"], w["writers"], w["rows"], w["counts"]) for w in writers] == [
        ("observations", 1, 12, [1]),
        ("submissions", 1, 4, [1]),
    ]
    second = await observe_all()
    assert second == [ObserveStatus.COMPLETED] * 12 + [ObserveStatus.PENDING] * 4 + [
        ObserveStatus.UNKNOWN
    ]


async def test_sandbox_submits_in_flight_together_are_one_statement_each_once(
    db: Database, sandbox: SandboxExecutor, signer: SandboxSigner
) -> None:
    contexts = [make_context("cex_withdrawal") for _ in range(6)]
    again = contexts[0]  # submitted twice at once: one side effect, one duplicate
    refs: list[dict[str, object]] = []

    async def one(i: int) -> None:
        refs.append((await dispatch(sandbox, signer, [*contexts, again][i])).provider_refs)

    async with trio.open_nursery() as nursery:
        for i in range(len(contexts) + 1):
            nursery.start_soon(one, i)
    writers = await db.fetch(
        _XMINS, {"node_ids": [], "keys": [c.idempotency_key for c in contexts[1:]]}
    )
    assert [(w["tbl"], w["writers"], w["rows"]) for w in writers] == [
        ("observations", 0, 0),
        ("submissions", 1, 5),
    ]
    rows = {r["idempotency_key"]: r for r in await submissions(db)}
    assert len(rows) == 6
    assert [r["duplicate_submits"] for r in rows.values()].count(1) == 1
    assert rows[again.idempotency_key]["duplicate_submits"] == 1
    assert len({str(r) for r in refs}) == 6  # the repeat got the original's refs


async def test_a_sandbox_submit_whose_database_is_unreachable_raises_a_lost_connection(
    signer: SandboxSigner,
) -> None:
    """The dispatcher leaves a submit whose connection died SUBMITTING for recovery
    (psycopg.OperationalError) and makes any other error UNKNOWN: through the batch,
    the error keeps its kind."""
    gone = Database("postgresql://postgres@127.0.0.1:1/nowhere", connect_timeout=1)
    sandbox = SandboxExecutor(gone, signer)
    ctx = make_context("cex_withdrawal")
    with pytest.raises(psycopg.OperationalError):
        await dispatch(sandbox, signer, ctx)
    await gone.close()
