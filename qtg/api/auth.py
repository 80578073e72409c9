"""Who is calling, and may they: bearer tokens and roles.

`Authorization: Bearer <token>` on every route but /healthz, /readyz and
/openapi.json; the WebSocket stream also takes `?token=` or a
`qtg.token.<token>` subprotocol (qtg/api/stream.py) because browsers cannot
set headers on a WebSocket. The token is looked up by its sha256
(qtg/services/tokens.py) on every request, so a revoked token stops working
at once. Nothing here logs a header or a token, and neither does the server
(Hypercorn's access log is off).
"""

from __future__ import annotations

from starlette.datastructures import Headers

from qtg.db import Database
from qtg.services import tokens
from qtg.services.tokens import Principal, Role

from .errors import ApiError

__all__ = ["Principal", "Role", "authenticate", "bearer_token"]


def bearer_token(headers: Headers, query_token: str | None = None) -> str:
    header = headers.get("authorization")
    if header is not None:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise ApiError(
                401,
                "UNAUTHENTICATED",
                "the Authorization header must be 'Bearer <token>'",
                {"field": "Authorization"},
            )
        return value.strip()
    if query_token:
        return query_token
    raise ApiError(
        401,
        "UNAUTHENTICATED",
        "missing bearer token (Authorization: Bearer <token>)",
        {"field": "Authorization"},
    )


async def authenticate(
    db: Database, headers: Headers, role: Role, *, query_token: str | None = None
) -> Principal:
    """The caller's principal if its token is live and its role suffices; else 401/403."""
    principal = await tokens.authenticate(db, bearer_token(headers, query_token))
    if principal is None:
        raise ApiError(401, "UNAUTHENTICATED", "the token is unknown or revoked")
    if not principal.may(role):
        raise ApiError(
            403,
            "FORBIDDEN",
            f"this needs the {role.name} role; {principal.name} is {principal.role.name}",
            {"required_role": role.name, "role": principal.role.name},
        )
    return principal
