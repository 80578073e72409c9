"""Every HTTP endpoint of the API, gathered into one table (order = document order)."""

from __future__ import annotations

from qtg.api.routing import Endpoint

from . import drift, health, movements, operations, proposals, registry, templates


def all_endpoints() -> list[Endpoint]:
    return [
        *health.ENDPOINTS,
        *templates.ENDPOINTS,
        *proposals.ENDPOINTS,
        *movements.ENDPOINTS,
        *registry.ENDPOINTS,
        *operations.ENDPOINTS,
        *drift.ENDPOINTS,
    ]
