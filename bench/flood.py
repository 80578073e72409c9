"""A drain beside a flood of bad tokens: `python -m bench.flood` (issue 44).

The attack measured: 2,000 requests with a token that is none, in 10 s, at most
1,000 connections at once, while 10 approved three-node movements drain on one
real `bin/qtg-runtime` (API and workers in one process, as started by default).
Each round drains 10 movements idle, then 10 under the flood; the figure is the
flood drain over the idle one (target: at most 1.5x), beside how the flood was
answered (401s, and connections that got no reply at all).

    .venv/bin/python -m bench.flood                  # 3 rounds on 127.0.0.1:5432
    .venv/bin/python -m bench.flood --rounds 5 --admin-dsn postgresql://...

It makes (and drops) its own database on the server `--admin-dsn` names. The
drain is timed from the approvals' start to the last movement's COMPLETED,
polled every 10 ms; speed figures come from runs like this one, never from tests.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import trio

from bench.procs import AUDIT_HMAC_KEY
from bench.workload import (
    THREE_ACTIONS,
    approve,
    create_movements,
    install_templates,
    settings_for,
)
from qtg.db import Database
from qtg.services.tokens import create_token

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / "bin" / "qtg-runtime"
FLOOD_REQUESTS = 2_000
FLOOD_SECONDS = 10.0
CONCURRENCY = 1_000
MOVEMENTS = 10
FLOOD_PATH = os.environ.get("QTG_FLOOD_PATH", "/v3/movements")
BOGUS = b"qtg_" + b"x" * 43


class Runtime:
    """bin/qtg-runtime with its JSON log read by a thread."""

    def __init__(self, dsn: str, *roles: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MG_")}
        env.update(
            MG_DATABASE_URL=dsn,
            MG_API_PORT="0",
            MG_LOG_FORMAT="json",
            MG_AUDIT_HMAC_KEY=AUDIT_HMAC_KEY,
            MG_CALLBACK_SIGNING_SECRET="bench-only-callback-secret-0123456789",
            MG_DB_POOL_MAX_SIZE="20",
        )
        self.proc = subprocess.Popen(
            [str(BIN), "--migrate", *roles], env=env, stderr=subprocess.PIPE, text=True, cwd=REPO
        )
        self.url: str | None = None
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("msg") == "API listening":
                self.url = record["url"]
            if record.get("msg") == "qtg runtime ready":
                self.ready.set()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def _one(host: str, port: int, request: bytes, statuses: dict[int, int]) -> None:
    try:
        with trio.fail_after(30):
            stream = await trio.open_tcp_stream(host, port)
            async with stream:
                await stream.send_all(request)
                head = await stream.receive_some(64)
                while await stream.receive_some(65536):
                    pass
        status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else -1
    except (OSError, trio.TooSlowError, trio.BrokenResourceError, ValueError, IndexError):
        status = -1
    statuses[status] = statuses.get(status, 0) + 1


async def flood(host: str, port: int, statuses: dict[int, int]) -> None:
    """FLOOD_REQUESTS bad-token requests paced over FLOOD_SECONDS, CONCURRENCY at most at once."""
    request = (
        f"GET {FLOOD_PATH} HTTP/1.1\r\nHost: {host}\r\n".encode()
        + b"Authorization: Bearer "
        + BOGUS
        + b"\r\nConnection: close\r\n\r\n"
    )
    limiter = trio.Semaphore(CONCURRENCY)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for i in range(FLOOD_REQUESTS):
            await trio.sleep_until(start + i * FLOOD_SECONDS / FLOOD_REQUESTS)
            await limiter.acquire()

            async def go() -> None:
                try:
                    await _one(host, port, request, statuses)
                finally:
                    limiter.release()

            nursery.start_soon(go)


class Flooder:
    """The flood in a process of its own (`python -m bench.flood --flood HOST PORT`).

    In the benchmark's own process its thousand connections would share one event
    loop with the approvals and the completion polling being timed, and the figure
    would measure the client's slowdown as much as the runtime's; a separate
    process competes with the runtime only for the machine, as an attacker does.
    """

    def __init__(self, host: str, port: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.flood", "--flood", host, str(port)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )

    def statuses(self) -> dict[int, int]:
        """Waits for the flood to end; HTTP status → count (-1: no reply)."""
        out, _ = self.proc.communicate(timeout=FLOOD_SECONDS + 120)
        return {int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()}


async def flood_only(host: str, port: int) -> None:
    statuses: dict[int, int] = {}
    await flood(host, port, statuses)
    print(json.dumps(statuses), flush=True)


async def drain(db: Database, dsn: str, tag: str) -> float:
    """Seconds from approving MOVEMENTS three-node movements to the last COMPLETED."""
    settings = settings_for(dsn)
    ids = await create_movements(db, settings, THREE_ACTIONS, MOVEMENTS, tag=tag, approve=False)
    started = time.monotonic()
    async with trio.open_nursery() as nursery:
        for rid in ids:
            nursery.start_soon(approve, db, rid)
    with trio.fail_after(300):
        while True:
            done = await trio.to_thread.run_sync(_completed, dsn, [str(i) for i in ids])
            if done == len(ids):
                return time.monotonic() - started
            await trio.sleep(0.01)


def _completed(dsn: str, ids: list[str]) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM movement_requests"
            " WHERE id = ANY(%s::uuid[]) AND request_state = 'COMPLETED'",
            (ids,),
        ).fetchone()
    return int(row[0]) if row else 0


async def run(admin_dsn: str, rounds: int, split: bool) -> list[dict[str, Any]]:
    name = f"qtg_bench_flood_{secrets.token_hex(4)}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = psycopg.conninfo.make_conninfo(admin_dsn, dbname=name)
    # --split: the API in one process (`--api-only`, which takes the flood) and the
    # workers in another (`--workers-only`, which drain): the deployment docs/security.md
    # recommends where floods are expected. Otherwise one process does both (the default).
    runtime = Runtime(dsn, "--api-only") if split else Runtime(dsn)
    workers = Runtime(dsn, "--workers-only") if split else None
    results: list[dict[str, Any]] = []
    try:
        if not await trio.to_thread.run_sync(runtime.ready.wait, 120):
            raise SystemExit("the runtime did not get ready in 120 s")
        if workers is not None and not await trio.to_thread.run_sync(workers.ready.wait, 120):
            raise SystemExit("the workers' runtime did not get ready in 120 s")
        assert runtime.url is not None
        host, port = runtime.url.removeprefix("http://").rsplit(":", 1)
        async with Database(dsn, min_size=1, max_size=4) as db:
            await install_templates(db)
            await create_token(db, name="bench-flood", role="operator", actor="bench")
            await drain(db, dsn, "warm")
            for r in range(rounds):
                idle = await drain(db, dsn, f"idle-{r}")
                flooder = Flooder(host, int(port))
                try:
                    await trio.sleep(1.0)  # the flood at strength first
                    loaded = await drain(db, dsn, f"flood-{r}")
                finally:
                    statuses = await trio.to_thread.run_sync(flooder.statuses)
                results.append({"idle": idle, "flood": loaded, "statuses": statuses})
                print(
                    f"round {r + 1}: idle {idle:.2f} s, under flood {loaded:.2f} s "
                    f"({loaded / idle:.2f}x); flood answered {statuses.get(401, 0)} x 401, "
                    f"{statuses.get(-1, 0)} without a reply",
                    flush=True,
                )
    finally:
        runtime.stop()
        if workers is not None:
            workers.stop()
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--admin-dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--split",
        action="store_true",
        help="the API and the workers in two processes (--api-only, --workers-only)",
    )
    parser.add_argument(
        "--flood", nargs=2, metavar=("HOST", "PORT"), help="only flood HOST:PORT (the child)"
    )
    args = parser.parse_args()
    if args.flood:
        trio.run(flood_only, args.flood[0], int(args.flood[1]))
        return
    results = trio.run(run, args.admin_dsn, args.rounds, args.split)
    ratios = [r["flood"] / r["idle"] for r in results]
    unanswered = sum(r["statuses"].get(-1, 0) for r in results)
    print(
        f"drain of {MOVEMENTS} three-node movements: idle median "
        f"{statistics.median(r['idle'] for r in results):.2f} s, under a flood of "
        f"{FLOOD_REQUESTS} bad tokens in {FLOOD_SECONDS:g} s median "
        f"{statistics.median(r['flood'] for r in results):.2f} s; ratio "
        f"{min(ratios):.2f}-{max(ratios):.2f}x (target <= 1.5x); "
        f"flood connections without a reply: {unanswered}"
    )


if __name__ == "__main__":
    main()
