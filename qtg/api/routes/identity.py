"""`GET /v3/whoami`: the caller's own name and role.

A client holding only a token (the operator console's sign-in) learns from
this which actions to offer; the server still checks every action's role
itself, so this is a courtesy, never an authority.
"""

from __future__ import annotations

from typing import Any

from qtg.api import schemas as s
from qtg.api.routing import Call, Endpoint


async def whoami(call: Call) -> Any:
    assert call.principal is not None
    return {"name": call.principal.name, "role": call.principal.role.name}


ENDPOINTS = [
    Endpoint(
        "GET",
        "/v3/whoami",
        whoami,
        "The calling token's principal name and role",
        "identity",
        s.WhoAmI,
    ),
]
