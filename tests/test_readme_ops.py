"""README documents what an operator needs to start qtg (issue 17 item 11)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from qtg.config import Settings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_log_format_and_level_values_are_documented() -> None:
    fields = {f.metadata["env"]: f for f in dataclasses.fields(Settings)}
    row = next(line for line in README.splitlines() if "`MG_LOG_FORMAT`" in line)
    for env in ("MG_LOG_FORMAT", "MG_LOG_LEVEL"):
        for choice in fields[env].metadata["choices"]:
            assert f"`{choice}`" in row, (env, choice)


def test_migrate_for_an_external_database_is_documented() -> None:
    assert "bin/qtg-runtime --migrate" in README
    paragraph = README.split("**External database.**", 1)[1].split("\n- ", 1)[0]
    assert "MG_DATABASE_URL" in paragraph and "MG_MIGRATE_ON_START=true" in paragraph


def test_connection_limits_and_root_behaviour_are_documented() -> None:
    for env in (
        "MG_API_READ_TIMEOUT_SECONDS",
        "MG_API_KEEP_ALIVE_TIMEOUT_SECONDS",
        "MG_API_MAX_HEADER_BYTES",
    ):
        assert f"`{env}`" in README, env
    assert "/usr/sbin/nologin" in README and "changes **no** folder's permissions" in README
