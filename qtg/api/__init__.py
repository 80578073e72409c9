"""The V3 API: Starlette routes, auth, schemas, OpenAPI and the WebSocket stream."""

from qtg.api.app import create_app
from qtg.api.server import ApiServer, serve_api

__all__ = ["ApiServer", "create_app", "serve_api"]
