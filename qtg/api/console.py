"""`GET /console/…`: the operator console's static files, from the installed package.

The console (issue 16) is plain ES modules, CSS and one HTML page under
`qtg/console/`, shipped as package data: no CDN, no build step, nothing fetched
at run time. Files are read once, when the app is built, into a table keyed by
their path relative to that folder; a request is answered from the table or
gets the API's 404 body. The URL is never joined to a filesystem path, so
`..`, `%2e%2e`, absolute paths and symlinks cannot reach anything outside the
table: a name that is not a key does not exist.

Every console response carries a strict Content-Security-Policy: scripts
only from this origin (no inline script, no eval), styles only from files,
connections only back to this origin (the API and its WebSocket), nothing
may frame the page. The token lives in the tab's sessionStorage (see
`api.js`), never in a URL, so it cannot leak through history, logs or a
Referer header — and the referrer is switched off besides.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from .errors import ApiError, error_response

PREFIX = "/console"
PACKAGE = "qtg"
FOLDER = "console"

#: What a console page may do. `connect-src 'self'` covers same-origin ws:
#: in CSP Level 3, which every browser the console targets implements.
CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)

SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    # Files change with the package; revalidate rather than serve a stale module graph.
    "Cache-Control": "no-cache",
}

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str
    #: a strong validator, so a reload revalidates each module with a 304, not a download
    etag: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "etag", f'"{hashlib.sha256(self.body).hexdigest()[:32]}"')


def load_assets(root: Traversable | None = None) -> dict[str, Asset]:
    """Every servable file under the console folder, keyed by its relative path.

    Only known file types are taken (a stray editor backup is not served),
    and names starting with a dot are skipped.
    """
    base = root if root is not None else resources.files(PACKAGE).joinpath(FOLDER)
    assets: dict[str, Asset] = {}

    def walk(folder: Traversable, prefix: str) -> None:
        for entry in folder.iterdir():
            if entry.name.startswith(".") or entry.name == "__pycache__":
                continue
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
                continue
            suffix = entry.name[entry.name.rfind(".") :] if "." in entry.name else ""
            content_type = CONTENT_TYPES.get(suffix)
            if content_type is not None:
                assets[prefix + entry.name] = Asset(entry.read_bytes(), content_type)

    if base.is_dir():
        walk(base, "")
    return assets


def console_routes(assets: dict[str, Asset] | None = None) -> list[Route]:
    """`/console` (redirect), `/console/` (index.html) and `/console/{path}`."""
    table = load_assets() if assets is None else assets

    async def redirect(request: Request) -> Response:
        return RedirectResponse(f"{PREFIX}/", status_code=308, headers=SECURITY_HEADERS)

    async def serve(request: Request) -> Response:
        path = request.path_params.get("path") or "index.html"
        asset = table.get(path)
        if asset is None:
            response = error_response(
                ApiError(404, "NOT_FOUND", "no such console file", {"path": request.url.path})
            )
            response.headers.update(SECURITY_HEADERS)
            return response
        headers = {**SECURITY_HEADERS, "ETag": asset.etag}
        if asset.etag in _etags(request.headers.get("if-none-match", "")):
            return Response(status_code=304, headers=headers)
        return Response(asset.body, media_type=asset.content_type, headers=headers)

    return [
        Route(PREFIX, redirect, methods=["GET", "HEAD"]),
        Route(f"{PREFIX}/", serve, methods=["GET", "HEAD"]),
        Route(PREFIX + "/{path:path}", serve, methods=["GET", "HEAD"]),
    ]


def _etags(header: str) -> set[str]:
    """The entity tags of an If-None-Match header (weak ones compared by their value)."""
    return {t.strip().removeprefix("W/") for t in header.split(",") if t.strip()}
