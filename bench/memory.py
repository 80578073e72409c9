"""Resident memory of an idle runtime running every worker that exists.

"Every worker": each conditional worker's flag is switched on (and the CEX
ingest given a venue); the registry then runs every worker this build
implements and skips, with a reason, those it does not. The resident set is
read after SETTLE_SECONDS, once every worker has made its first pass.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import trio

from bench import procs
from bench.server import PrivateServer
from qtg.config import Settings

SETTLE_SECONDS = 3.0


def all_worker_flags() -> dict[str, str]:
    """MG_*_ENABLED=true for every flag setting, a CEX ingest venue and a mail route."""
    env = {}
    for f in dataclasses.fields(Settings):
        name = f.metadata.get("env", "")
        if name.endswith("_ENABLED") and f.type in (bool, "bool"):
            env[name] = "true"
    env["MG_CEX_TRANSFER_INGEST_VENUES_CSV"] = "sandbox"
    env["MG_NOTIFY_EMAIL_TO"] = "bench@localhost"  # the dispatcher refuses to start routeless
    return env


@dataclass
class IdleMemory:
    reactive: bool
    rss_mb: float
    workers: list[str]
    note: str = ""


async def idle_rss(server: PrivateServer, base_db: str, *, reactive: bool) -> IdleMemory:
    mode = "reactive" if reactive else "polling"
    name = f"qtg_bench_idle_{mode}"
    dsn = await trio.to_thread.run_sync(server.create_database, name, base_db)
    try:
        try:
            return await _measure(
                name, procs.runtime_env(dsn, reactive=reactive, **all_worker_flags()), reactive
            )
        except RuntimeError as exc:  # a future worker that needs configuration to start
            idle = await _measure(name, procs.runtime_env(dsn, reactive=reactive), reactive)
            idle.note = f"default flags (all flags on did not start: {str(exc)[:120]})"
            return idle
    finally:
        await trio.to_thread.run_sync(server.drop_database, name)


async def _measure(name: str, env: dict[str, str], reactive: bool) -> IdleMemory:
    async with procs.runtime(name, env, procs.launcher_args()) as rt:
        await trio.sleep(SETTLE_SECONDS)  # a duration to let first passes run, not a condition
        return IdleMemory(reactive, rt.rss_mb(), rt.workers())
