"""Executors and signers: health, and the signer identity posture."""

from __future__ import annotations

from typing import Any

from qtg.api import schemas as s
from qtg.api.routing import Call, Endpoint
from qtg.services import health
from qtg.services.tokens import Role


async def list_executors(call: Call) -> Any:
    return {"items": await health.executor_roster(call.ctx.db)}


async def list_signers(call: Call) -> Any:
    return {"items": await health.signer_roster(call.ctx.db)}


async def set_expected_identity(call: Call) -> Any:
    return await health.set_expected_signer_identity(
        call.ctx.db, call.path.signer_key, call.body.expected_signer_address, actor=call.actor
    )


ENDPOINTS = [
    Endpoint(
        "GET",
        "/v3/executors",
        list_executors,
        "Registered executors and their health",
        "registry",
        s.ExecutorList,
    ),
    Endpoint(
        "GET",
        "/v3/signers",
        list_signers,
        "Signers: health and identity posture (expected vs observed address)",
        "registry",
        s.SignerList,
    ),
    Endpoint(
        "PUT",
        "/v3/signers/{signer_key}/expected-identity",
        set_expected_identity,
        "Enrol a signer's expected address (the only writer of it)",
        "registry",
        s.Signer,
        role=Role.admin,
        path_model=s.SignerPath,
        body_model=s.ExpectedIdentity,
        errors=(404,),
    ),
]
