"""The console's browser tests: Debian's Chromium driven by Playwright, a real runtime.

Chromium comes from the system (`apt-get install chromium`; `.ci/run` installs
it when missing), never from `playwright install`. Without /usr/bin/chromium
the browser tests skip — except under CI=true, where they fail: CI installs
it, so its absence there is a broken pipeline, not a reason to pass.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trio
from playwright.sync_api import expect
from runtime.rt_procs import REPO, RuntimeProcess, base_env
from runtime.test_runtime_end_to_end import POOL

from qtg.db import Database
from qtg.services.tokens import create_token

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Screenshots for people to look at (git-ignored).
SCREENSHOTS = REPO / "screenshots"
#: Playwright expectations wait up to this long (ms) for their condition.
EXPECT_MS = 20_000
# so Playwright's expect() waits that long everywhere (its default is 5 s, short for a busy CI box)
expect.set_options(timeout=EXPECT_MS)
PEOPLE = (("alice", "operator"), ("bob", "operator"), ("admin", "admin"), ("vic", "viewer"))


def require_chromium() -> None:
    if CHROMIUM.exists():
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{CHROMIUM} is missing under CI=true (.ci/run installs it with apt-get)")
    pytest.skip(
        f"{CHROMIUM} is missing: the console's browser tests drive Debian's chromium "
        "package (apt-get install chromium; .ci/run does it)"
    )


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """One headless Chromium per test module (closed after it: the rest of a full run
    does not carry a browser around)."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Runtime:
    url: str
    dsn: str
    tokens: dict[str, str]
    proc: RuntimeProcess

    def client(self, who: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.tokens[who]}"}, timeout=10
        )


def mint_tokens(dsn: str) -> dict[str, str]:
    async def mint() -> dict[str, str]:
        async with Database(dsn, min_size=1, max_size=1) as db:
            return {
                name: str((await create_token(db, name=name, role=role, actor="test"))["token"])
                for name, role in PEOPLE
            }

    return trio.run(mint)


@pytest.fixture
def runtime(dsn: str, procs: list) -> Runtime:
    """A real `bin/qtg-runtime --seed-demo` on the test database, and tokens for four people."""
    require_chromium()  # no runtime for a test that will not run
    proc = RuntimeProcess.launcher(base_env(MG_DATABASE_URL=dsn, **POOL), "--seed-demo")
    procs.append(proc)
    proc.wait_ready()
    listening = proc.wait_for(lambda r: r.get("msg") == "API listening")
    url = listening["url"]
    assert listening["console"] == f"{url}/console/"  # the start-up log says where it is
    return Runtime(url=url, dsn=dsn, tokens=mint_tokens(dsn), proc=proc)


def expect_count_with_progress(
    page, selector: str, target: int, *, stall_ms: int = EXPECT_MS
) -> None:
    """Wait until `selector` matches `target` elements, for as long as the count
    keeps rising: it fails only after `stall_ms` with no new match, naming how
    far it got. A loaded machine drives a 50-node movement more slowly, not
    differently; a fixed wall-time budget (5 s once: 38-41 of 49 nodes) failed
    a run that was still progressing (issue 26). The browser evaluates the
    condition on every animation frame; nothing here sleeps."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    best = -1
    while True:
        try:
            best = page.wait_for_function(
                """([sel, best, target]) => {
                  const n = document.querySelectorAll(sel).length;
                  return (n > best || n >= target) ? n : false;
                }""",
                arg=[selector, best, target],
                timeout=stall_ms,
            ).json_value()
        except PlaywrightTimeout:
            raise AssertionError(
                f"{selector}: {best} of {target} and no progress for {stall_ms} ms"
            ) from None
        if best == target:
            return
        if best > target:
            raise AssertionError(f"{selector}: {best} matches, more than {target}")


def screenshot(page, name: str, *, full_page: bool = True) -> Path:
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


# The in-process API server of tests/api (a real Hypercorn on loopback), for the
# console's file-serving tests that need no browser.
from api.conftest import api, stream_overrides  # noqa: E402, F401
