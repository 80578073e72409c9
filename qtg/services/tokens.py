"""API bearer tokens: created once, stored hashed, revoked by name.

The plaintext token exists in exactly two places: the output of
`create_token` (shown once to the person who runs `qtg token create`) and the
`Authorization` header of the requests that use it. The database keeps only
its sha256, so a copy of the database does not let anyone in. A token is
256 bits from `secrets`, so a plain (unsalted, fast) hash is enough: there is
nothing to guess.

A token's *name* is the principal: what `actor` columns, `created_by` and the
four-eyes rule see. At most one live token per name (a unique partial index),
so a name always means one role.
"""

from __future__ import annotations

import hashlib
import math
import re
import secrets
import weakref
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import psycopg
import trio

from qtg.db import Database, sql_family
from qtg.services.auditing import record_audit
from qtg.services.errors import Conflict, InvalidInput, NotFound

SQL = sql_family(
    "tokens",
    "insert_token",
    "revoke_by_name",
    "list_tokens",
    "authenticate",
    "touch",
    "live_hashes",
)

TOKEN_PREFIX = "qtg_"
NAME_PATTERN = r"^[a-z0-9][a-z0-9_.@-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)
#: Longest Authorization token looked at; anything longer is not ours.
MAX_TOKEN_LENGTH = 256


class Role(IntEnum):
    """Roles in increasing power: each role may do everything the ones below may."""

    viewer = 1
    operator = 2
    admin = 3

    @classmethod
    def parse(cls, value: str) -> Role:
        try:
            return cls[value]
        except KeyError:
            raise InvalidInput(
                f"role must be one of {', '.join(r.name for r in cls)}, got {value!r}",
                detail={"field": "role"},
            ) from None


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: Role

    def may(self, role: Role) -> bool:
        return self.role >= role


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(
            "a token name is 1-64 characters of a-z, 0-9, '_', '.', '@', '-', starting with a "
            "letter or digit",
            detail={"field": "name"},
        )
    return name


async def create_token(db: Database, *, name: str, role: str, actor: str) -> dict[str, Any]:
    """Create a live token; the result's `token` is the only copy of the plaintext."""
    check_name(name)
    parsed = Role.parse(role)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    try:
        async with db.transaction() as tx:
            row = await tx.fetchrow(
                SQL.insert_token,
                {"name": name, "token_hash": hash_token(token), "role": parsed.name},
            )
            assert row is not None
            await record_audit(
                tx,
                actor=actor,
                action="api_token.created",
                object_type="api_token",
                object_id=name,
                detail={"role": parsed.name, "token_id": str(row["id"])},
            )
    except psycopg.errors.UniqueViolation:
        raise Conflict(
            f"a live token named {name!r} exists; revoke it first to rotate",
            code="TOKEN_NAME_TAKEN",
            detail={"field": "name"},
        ) from None
    token_gate(db).forget()  # usable at once in this process too
    return {**row, "token": token}


async def revoke_token(db: Database, *, name: str, actor: str) -> dict[str, Any]:
    """Revoke the live token of `name`; requests using it get 401 from now on."""
    check_name(name)
    async with db.transaction() as tx:
        rows = await tx.fetch(SQL.revoke_by_name, {"name": name})
        if not rows:
            raise NotFound(f"no live token named {name!r}", detail={"field": "name"})
        await record_audit(
            tx,
            actor=actor,
            action="api_token.revoked",
            object_type="api_token",
            object_id=name,
            detail={"token_ids": [str(r["id"]) for r in rows]},
        )
    return rows[0]


async def list_tokens(db: Database, *, include_revoked: bool = False) -> list[dict[str, Any]]:
    return await db.fetch(SQL.list_tokens, {"include_revoked": include_revoked})


class TokenGate:
    """Turns an unknown token away without a database query per request.

    A flood of requests with bad tokens (2,000 in 10 s) cost one lookup each on
    the pool the workers need, and slowed a drain beside it up to 5x (issue 44).
    The gate keeps the set of live token hashes in memory: a hash in it goes on
    to the full lookup (which also sees a revocation at once: the gate only ever
    refuses, it never lets anyone in). A hash not in it waits for a re-read of
    the set that *started after the request arrived* — so a token created a
    moment ago, by another process, is found — and such re-reads are shared by
    every request waiting and start at most every MIN_REFRESH_SECONDS: however
    many bad tokens arrive, the database sees a few small reads a second.
    """

    MIN_REFRESH_SECONDS = 0.2

    def __init__(self, db: Database) -> None:
        self._db = db
        self._hashes: frozenset[str] = frozenset()
        self._read_started = -math.inf  # when the read that produced _hashes began
        self._reading: trio.Event | None = None

    async def may_be_live(self, token_hash: str) -> bool:
        """False when `token_hash` is no live token's (as of a read begun after the call)."""
        if token_hash in self._hashes:
            return True
        arrived = trio.current_time()
        while self._read_started < arrived:
            if self._reading is not None:
                await self._reading.wait()
                continue
            wait = self._read_started + self.MIN_REFRESH_SECONDS - trio.current_time()
            if wait > 0:
                await trio.sleep(wait)
                continue
            await self._read()
        return token_hash in self._hashes

    def forget(self) -> None:
        """The next miss re-reads at once (this process created a token)."""
        self._read_started = -math.inf

    async def _read(self) -> None:
        self._reading = done = trio.Event()
        started = trio.current_time()
        try:
            rows = await self._db.fetch(SQL.live_hashes)
            self._hashes = frozenset(str(row["token_hash"]) for row in rows)
            self._read_started = started
        finally:
            self._reading = None
            done.set()


_GATES: weakref.WeakKeyDictionary[Database, TokenGate] = weakref.WeakKeyDictionary()


def token_gate(db: Database) -> TokenGate:
    """The gate of `db` (one per pool, so every route and the stream share it)."""
    gate = _GATES.get(db)
    if gate is None:
        gate = _GATES[db] = TokenGate(db)
    return gate


async def authenticate(db: Database, token: str) -> Principal | None:
    """The principal a live token belongs to, or None (unknown, malformed or revoked).

    An unknown token is refused by the pool's TokenGate before any per-request
    query; a token the gate knows is looked up in full, every time."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_LENGTH:
        return None
    token_hash = hash_token(token)
    if not await token_gate(db).may_be_live(token_hash):
        return None
    row = await db.fetchrow(SQL.authenticate, {"token_hash": token_hash})
    if row is None:
        return None
    if row["stale"]:  # at most once a minute per token; never waits on the row
        await db.execute(SQL.touch, {"id": row["id"]})
    return Principal(name=row["name"], role=Role[row["role"]])
