"""GET /metrics: this process's Prometheus exposition (issue 16).

Not in the JSON route table (qtg/api/routing.py): the body is Prometheus
text, not an API document. Unauthenticated by default, as scrapers expect on
an internal address; `MG_METRICS_REQUIRE_TOKEN=true` demands a viewer token
through the same auth and the same structured 401/403 bodies as every route.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from qtg.api.auth import Role, authenticate
from qtg.api.errors import error_response
from qtg.services.context import ServiceContext
from qtg.services.metrics import CONTENT_TYPE_LATEST, RuntimeMetrics

PATH = "/metrics"


def metrics_only_app(ctx: ServiceContext, metrics: RuntimeMetrics) -> Starlette:
    """The listener of a `--workers-only` process (MG_METRICS_PORT): /metrics alone."""
    app = Starlette(routes=[Route(PATH, metrics_endpoint, methods=["GET"])])
    app.state.ctx = ctx
    app.state.metrics = metrics
    return app


async def metrics_endpoint(request: Request) -> Response:
    state = request.app.state
    ctx = state.ctx
    if ctx.settings.metrics_require_token:
        try:
            await authenticate(ctx.db, request.headers, Role.viewer)
        except Exception as exc:
            return error_response(exc, where=f"GET {PATH}")
    metrics: RuntimeMetrics = state.metrics
    await metrics.refresh_backlog(ctx.db, ctx.settings.network_class)
    return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
