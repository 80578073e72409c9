"""Every HTTP endpoint of the API, gathered into one table (order = document order)."""

from __future__ import annotations

from qtg.api.routing import Endpoint

from . import (
    balances,
    capital_transfers,
    drift,
    health,
    identity,
    movements,
    notifications,
    operations,
    policies,
    proposals,
    registry,
    signer_holds,
    templates,
)


def all_endpoints() -> list[Endpoint]:
    return [
        *health.ENDPOINTS,
        *identity.ENDPOINTS,
        *templates.ENDPOINTS,
        *proposals.ENDPOINTS,
        *movements.ENDPOINTS,
        *policies.ENDPOINTS,
        *capital_transfers.ENDPOINTS,
        *notifications.ENDPOINTS,
        *registry.ENDPOINTS,
        *operations.ENDPOINTS,
        *balances.ENDPOINTS,
        *drift.ENDPOINTS,
        *signer_holds.ENDPOINTS,
    ]
