"""Logs: one JSON object per line, extras as keys, and no secret in any field."""

from __future__ import annotations

import io
import json
import logging

import pytest

from qtg.runtime.logs import configure_logging, dsn_secrets, redact


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://qtg:hunter2@db:5432/qtg", "postgresql://qtg:***@db:5432/qtg"),
        ("postgres://u:p%40ss@h/d?sslmode=require", "postgres://u:***@h/d?sslmode=require"),
        ("host=db password=hunter2 dbname=qtg", "host=db password=*** dbname=qtg"),
        ("password='two words' host=x", "password=*** host=x"),
        ("postgresql://qtg@db/qtg (no password)", "postgresql://qtg@db/qtg (no password)"),
        ("https://example.com:8443/path", "https://example.com:8443/path"),
    ],
)
def test_redact_dsn_passwords(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_dsn_secrets_finds_passwords_in_both_forms() -> None:
    assert dsn_secrets("postgresql://a:pw1@h/d", "host=h password=pw2", None, "not a dsn ===") == [
        "pw1",
        "pw2",
    ]


@pytest.fixture
def restore_root_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_json_lines_carry_extras_and_no_secrets(restore_root_logging) -> None:
    stream = io.StringIO()
    configure_logging("INFO", "json", secrets=["cb-secret-1"], stream=stream)
    log = logging.getLogger("qtg.test")
    log.info("hello %s", "world", extra={"worker": "node_dispatcher", "items": 3})
    log.debug("not shown")
    try:
        raise RuntimeError("connect postgresql://u:hunter2@h/d failed; key cb-secret-1")
    except RuntimeError as exc:
        log.warning("pass failed", extra={"error": str(exc)}, exc_info=exc)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 2
    assert lines[0]["msg"] == "hello world"
    assert (lines[0]["worker"], lines[0]["items"], lines[0]["level"]) == (
        "node_dispatcher",
        3,
        "info",
    )
    assert lines[0]["logger"] == "qtg.test" and lines[0]["ts"].endswith("+00:00")
    text = stream.getvalue()
    assert "hunter2" not in text and "cb-secret-1" not in text
    assert "postgresql://u:***@h/d" in lines[1]["error"]
    assert "RuntimeError" in lines[1]["exc"] and "***" in lines[1]["exc"]


def test_text_format_is_one_readable_line(restore_root_logging) -> None:
    stream = io.StringIO()
    configure_logging("INFO", "text", stream=stream)
    logging.getLogger("qtg.runtime").info(
        "worker node_dispatcher skipped", extra={"worker": "node_dispatcher", "reason": "x=false"}
    )
    [line] = stream.getvalue().splitlines()
    assert line.endswith("INFO    qtg.runtime: worker node_dispatcher skipped reason=x=false")
