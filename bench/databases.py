"""The prepared databases every figure starts from, cloned per run (`CREATE DATABASE … TEMPLATE`).

- base: migrated, with the benchmark's templates and the demo ones;
- backlog: base plus N approved THREE_ACTIONS movements, their audit facts
  promoted, vacuumed and analysed — the throughput runs' starting point, made
  once and cloned for every drain so that each drain starts from the same bytes;
- with `bench.ab --tree`, a copy of each per checkout, migrated by its own
  migrations (`migrated_for`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import trio

from bench import workload
from bench.queries import bench_sql
from bench.server import PrivateServer
from qtg.db import Database
from qtg.db.migrate import migrate

SQL = bench_sql("vacuum_analyze")

BASE = "qtg_bench_base"
BACKLOG = "qtg_bench_backlog"


async def prepare_base(server: PrivateServer) -> str:
    dsn = await trio.to_thread.run_sync(server.create_database, BASE)
    await trio.to_thread.run_sync(migrate, dsn)
    async with Database(dsn, min_size=1, max_size=2) as db:
        await workload.install_templates(db)
    return BASE


async def prepare_backlog(server: PrivateServer, movements: int) -> tuple[str, float]:
    """The backlog database; returns its name and how long making it took."""
    started = time.monotonic()
    dsn = await trio.to_thread.run_sync(server.create_database, BACKLOG, BASE)
    async with Database(dsn, min_size=1, max_size=8) as db:
        await workload.create_movements(
            db,
            workload.settings_for(dsn),
            workload.THREE_ACTIONS,
            movements,
            tag="backlog",
            approve=True,
        )
        await workload.settle_audit(db)
    await trio.to_thread.run_sync(_vacuum, dsn)
    return BACKLOG, time.monotonic() - started


def _vacuum(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SQL.vacuum_analyze.text)


async def migrated_for(server: PrivateServer, template: str, tree: str, checkout: Path) -> str:
    """A clone of `template` migrated by `checkout`'s own migrations; returns its name.

    `bench.ab --tree` runs other checkouts' runtimes on databases this checkout
    prepared. A checkout whose migrations go further (a commit that adds one)
    gets its own copy with them applied before its runtime starts — the runtime
    cannot apply them itself behind the drain's start gate, which holds the node
    table. So run the benchmark from the checkout with the fewest migrations:
    a database with a migration a checkout does not have is refused by it.
    """
    name = f"{template}_{tree}"
    dsn = await trio.to_thread.run_sync(server.create_database, name, template)
    python = os.environ.get("QTG_PYTHON") or sys.executable
    # `-c` puts the working directory first on sys.path: the checkout's own qtg
    command = "import sys; from qtg.cli import main; sys.exit(main(sys.argv[1:]))"
    await trio.run_process(
        [python, "-c", command, "migrate", "--database-url", dsn],
        cwd=str(checkout),
        stdout=subprocess.DEVNULL,
    )
    return name
