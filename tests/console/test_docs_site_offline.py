"""The documentation site draws its diagrams with nothing from the network (issue 44).

mkdocs.yml says the site needs nothing from the network, yet Material fetched mermaid
from unpkg, so offline the diagrams showed as source. The site is built (mkdocs build
--strict, with the hook that copies .tools/mermaid's file in), served from loopback and
opened in Chromium with every non-loopback request refused: each diagram of the concepts
page must be drawn (Material swaps the `pre.mermaid` source for a `div.mermaid` whose closed
shadow root holds the SVG, so the drawing is seen by its size and the source's absence), and
no request may have left the machine.
"""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect
from runtime.rt_procs import REPO

MKDOCS = str(Path(sys.executable).parent / "mkdocs")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """No line per request on stderr."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [MKDOCS, "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    handler = functools.partial(_Quiet, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_diagrams_render_offline(chromium, site: str) -> None:  # type: ignore[no-untyped-def]
    context = chromium.new_context()
    outside: list[str] = []

    def gate(route) -> None:  # type: ignore[no-untyped-def]
        if route.request.url.startswith(site):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", gate)
    page = context.new_page()
    try:
        page.goto(f"{site}/concepts/")
        drawn = page.locator("div.mermaid")
        expect(drawn).to_have_count(2)  # the request and the node state diagrams
        expect(page.locator("pre.mermaid")).to_have_count(0)  # no diagram left as source
        for index in range(2):
            box = drawn.nth(index).bounding_box()
            assert box is not None and box["height"] > 100, box
            assert drawn.nth(index).text_content() == ""
        assert outside == [], outside
    finally:
        context.close()
