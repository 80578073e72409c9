"""Serving the console (no browser): routes, CSP, files from the package, 404s, traversal.

Through the real API server (tests/api's `api` fixture: Hypercorn on
loopback), with raw HTTP where a client would normalise the path for us.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest
import trio
from api.conftest import Api

from qtg.api.console import CSP, load_assets

from . import conftest as console_conftest

CONSOLE = Path(__file__).resolve().parents[2] / "qtg" / "console"
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


async def raw_get(api: Api, target: str) -> tuple[int, bytes]:
    """GET `target` exactly as written (no client-side normalisation of `..` or `%2e`)."""
    stream = await trio.open_tcp_stream("127.0.0.1", api.server.port)
    async with stream:
        await stream.send_all(
            f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
        )
        data = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def test_console_root_redirects_and_serves_index_with_a_strict_csp(api: Api) -> None:
    r = await api["anon"].get("/console")
    assert r.status_code == 308 and r.headers["location"] == "/console/"
    index = await api["anon"].get("/console/")
    assert index.status_code == 200
    assert index.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="app.js"></script>' in index.text
    csp = index.headers["content-security-policy"]
    assert csp == CSP
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["script-src"] == "'self'"  # no inline script, no eval
    assert directives["default-src"] == "'none'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in csp
    assert index.headers["x-content-type-options"] == "nosniff"
    assert index.headers["referrer-policy"] == "no-referrer"


async def test_every_file_is_served_with_its_type_and_headers(api: Api) -> None:
    types = {".js": "text/javascript", ".css": "text/css", ".html": "text/html"}
    files = sorted(p.relative_to(CONSOLE).as_posix() for p in CONSOLE.rglob("*") if p.is_file())
    assert "app.js" in files and "pages/registry.js" in files and "graph.js" in files
    for name in files:
        r = await api["anon"].get(f"/console/{name}")
        assert r.status_code == 200, name
        assert r.content == (CONSOLE / name).read_bytes(), name
        assert r.headers["content-type"].startswith(types[Path(name).suffix]), name
        assert r.headers["content-security-policy"] == CSP, name


async def test_a_reload_revalidates_with_an_etag(api: Api) -> None:
    first = await api["anon"].get("/console/graph.js")
    etag = first.headers["etag"]
    again = await api["anon"].get("/console/graph.js", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["content-security-policy"] == CSP
    other = await api["anon"].get("/console/app.js", headers={"If-None-Match": etag})
    assert other.status_code == 200 and other.headers["etag"] != etag


async def test_no_inline_script_or_style_in_the_page(api: Api) -> None:
    """The CSP would block them; the page must not depend on them."""
    html = (CONSOLE / "index.html").read_text()
    assert "<style" not in html and " style=" not in html and "onclick=" not in html
    assert html.count("<script") == 1 and 'src="app.js"' in html
    for js in CONSOLE.rglob("*.js"):
        text = js.read_text()
        assert ".innerHTML" not in text and "eval(" not in text and "new Function" not in text, js


async def test_unknown_console_files_are_404_with_the_api_error_body(api: Api) -> None:
    for path in ("/console/nope.js", "/console/pages/nope.js", "/console/pages/", "/console/x/"):
        r = await api["anon"].get(path)
        assert r.status_code == 404, path
        assert r.json()["error"]["code"] == "NOT_FOUND", path
        assert r.headers["content-security-policy"] == CSP


async def test_path_traversal_reaches_nothing_outside_the_console(api: Api) -> None:
    secret_markers = (b"[build-system]", b"def load_assets", b"import ", b"root:")
    # The raw client does reach files: the same request shape for a real one.
    status, body = await raw_get(api, "/console/pages/registry.js")
    assert status == 200 and b"export const PAGES" in body
    for target in (
        "/console/../pyproject.toml",
        "/console/..%2f..%2fpyproject.toml",
        "/console/%2e%2e/%2e%2e/pyproject.toml",
        "/console/pages/../../api/console.py",
        "/console/pages/%2e%2e/%2e%2e/api/console.py",
        "/console/..%5c..%5cpyproject.toml",
        "/console//etc/passwd",
        "/console/%2fetc%2fpasswd",
        "/console/__init__.py",
        "/console/../api/console.py",
    ):
        status, body = await raw_get(api, target)
        assert status in (400, 404), (target, status)
        assert not any(marker in body for marker in secret_markers), target


def test_assets_are_only_known_types_and_the_package_data_ships_them() -> None:
    assets = load_assets()
    on_disk = {p.relative_to(CONSOLE).as_posix() for p in CONSOLE.rglob("*") if p.is_file()}
    assert set(assets) == on_disk  # nothing left out, nothing extra
    patterns = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["package-data"]["qtg"]
    for name in on_disk:
        assert any(fnmatch.fnmatch(f"console/{name}", p) for p in patterns), (
            f"qtg/console/{name} is not in pyproject's package-data: an installed qtg lacks it"
        )


def test_load_assets_skips_dotfiles_and_unknown_types(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<p>")
    (tmp_path / ".secret.js").write_text("x")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.js").write_text("x")
    assets = load_assets(tmp_path)  # type: ignore[arg-type]
    assert set(assets) == {"index.html", "sub/a.js"}
    assert assets["sub/a.js"].content_type.startswith("text/javascript")


def test_without_chromium_the_browser_tests_skip_but_fail_under_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(console_conftest, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no-chromium is missing"):
        console_conftest.require_chromium()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="missing under CI=true"):
        console_conftest.require_chromium()
    monkeypatch.setattr(console_conftest, "CHROMIUM", tmp_path)  # exists: nothing raised
    console_conftest.require_chromium()
