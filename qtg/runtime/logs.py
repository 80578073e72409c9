"""Structured logs that never carry a secret.

The runtime logs one JSON object per line (`MG_LOG_FORMAT=json`, the default)
or a readable line (`text`). Both go through one redacting filter, because a
secret reaches a log by accident — a DSN inside a psycopg error, a setting
echoed in an exception — not on purpose: scrubbing at the last step catches
what no call site thought about.

What is scrubbed: the password of any URL-style DSN (`scheme://user:pw@host`),
`password=…` in a key/value DSN, and the literal value of every secret the
launcher registers (`MG_CALLBACK_SIGNING_SECRET`, DSN passwords).

Extra fields passed with `log.info("msg", extra={...})` become top-level keys
of the JSON object, so a log pipeline can filter on `worker` or `error`.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TextIO

from qtg.domain.redaction import dsn_secrets, redact

__all__ = ["RedactingFilter", "configure_logging", "dsn_secrets", "redact"]

# LogRecord attributes that are not "extra" fields.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)


class RedactingFilter(logging.Filter):
    """Renders each record's message once, scrubbed, and scrubs its extras and traceback."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage(), self.secrets)
        record.args = None
        for key, value in list(vars(record).items()):
            if key not in _STANDARD and isinstance(value, str):
                setattr(record, key, redact(value, self.secrets))
        if record.exc_info and record.exc_info[0] is not None:
            # Format the traceback now, scrubbed; formatters reuse exc_text.
            record.exc_text = redact(
                logging.Formatter().formatException(record.exc_info), self.secrets
            )
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = redact(record.exc_text, self.secrets)
        return True


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(_extras(record))
        if record.exc_text:
            out["exc"] = record.exc_text
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).strftime("%H:%M:%S.%f")[:-3]
        message = record.getMessage()
        line = f"{ts} {record.levelname:<7} {record.name}: {message}"
        # For a human, extras the message already says are noise.
        extras = {k: v for k, v in _extras(record).items() if str(v) not in message}
        if extras:
            line += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        if record.exc_text:
            line += "\n" + record.exc_text
        return line


def configure_logging(
    level: str = "INFO",
    fmt: str = "json",
    *,
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> logging.Handler:
    """Send every `qtg` (and library) log record through one redacting handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(RedactingFilter(secrets))
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
