"""Secrets out of text: what a log line or an error stored in a row may carry.

Pure functions (the runtime's log filter, heartbeat rows and services' stored
errors all use them), so they live below every floor that writes text out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from psycopg.conninfo import conninfo_to_dict

MASK = "***"

# scheme://user:password@host  → scheme://user:***@host
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/?#@\s]*:)[^@/\s]+(?=@)")
# password=secret or password='se cret'  (libpq key/value DSNs, error messages)
_KV_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^\s]+)", re.I)

#: last_error is a hint for an operator, not a log: keep it short.
MAX_ERROR_CHARS = 500


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with DSN passwords and the given secret values replaced by ***."""
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
    text = _KV_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text


def describe_error(exc: BaseException) -> str:
    """`Type: first line`, scrubbed of DSN passwords, short enough for a row."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    described = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return redact(described)[:MAX_ERROR_CHARS]


def dsn_secrets(*dsns: str | None) -> list[str]:
    """The passwords inside these DSNs, to register as secrets (unparseable: ignored)."""
    found: list[str] = []
    for dsn in dsns:
        if not dsn:
            continue
        try:
            password = conninfo_to_dict(dsn).get("password")
        except Exception:  # a DSN we cannot parse has no password we can find either
            continue
        if password:
            found.append(str(password))
    return found
