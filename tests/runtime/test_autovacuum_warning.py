"""Start-up warns, in one line, when the database's autovacuum is off (issue
29 item 2): statistics from before a burst are what made the claims collapse."""

from __future__ import annotations

import logging

import pytest

from qtg.db import Database, Query
from qtg.runtime.database import warn_if_autovacuum_off

AUTOVACUUM = Query("tests/autovacuum", "SELECT current_setting('autovacuum')::boolean")


async def test_start_up_warns_once_when_autovacuum_is_off(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    off = not await db.fetchval(AUTOVACUUM)
    with caplog.at_level(logging.WARNING, logger="qtg.runtime.launcher"):
        warned = await warn_if_autovacuum_off(db)
    lines = [r for r in caplog.records if "autovacuum" in r.getMessage()]
    if off:  # this test server runs with autovacuum off
        assert warned and len(lines) == 1
        assert lines[0].levelno == logging.WARNING
    else:
        assert not warned and not lines
