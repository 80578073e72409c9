"""Named SQL: a wrong name fails when a module is imported, never mid-movement."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from qtg.db.queries import SQL_ROOT, Query, UnknownQueryError, load_query, sql_family


def test_declared_queries_load_their_files() -> None:
    family = sql_family("migrate", "lock", "unlock")
    assert family.names() == ["lock", "unlock"]
    assert isinstance(family.lock, Query)
    assert family.lock.name == "migrate/lock"
    assert family.lock.text == (SQL_ROOT / "migrate" / "lock.sql").read_text().strip()


def test_unknown_name_fails_at_declaration_naming_the_file() -> None:
    with pytest.raises(UnknownQueryError) as caught:
        sql_family("migrate", "lock", "nope")
    message = str(caught.value)
    assert "migrate/nope" in message
    assert str(SQL_ROOT / "migrate" / "nope.sql") in message
    assert "lock" in message  # lists what the service does have


def test_unknown_service_fails_at_declaration() -> None:
    with pytest.raises(UnknownQueryError, match=r"x/nope.*has: nothing"):
        sql_family("x", "nope")


def test_undeclared_name_on_a_family_raises() -> None:
    family = sql_family("migrate", "lock")
    with pytest.raises(UnknownQueryError, match=r"migrate/unlock was not declared"):
        _ = family.unlock  # exists on disk, but this module did not declare it


def test_empty_query_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "svc").mkdir()
    (tmp_path / "svc" / "blank.sql").write_text("  \n")
    with pytest.raises(UnknownQueryError, match=r"svc/blank is empty"):
        load_query("svc", "blank", root=tmp_path)


def test_a_module_with_a_misspelled_query_fails_on_import(tmp_path: Path) -> None:
    module = tmp_path / "broken_service.py"
    module.write_text('from qtg.db import sql_family\nSQL = sql_family("migrate", "lokc")\n')
    result = subprocess.run(
        [sys.executable, "-c", "import broken_service"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert result.returncode != 0
    assert "UnknownQueryError" in result.stderr and "migrate/lokc" in result.stderr


SQL_FILES = sorted(SQL_ROOT.rglob("*.sql"))


def test_there_are_sql_files() -> None:
    assert len(SQL_FILES) >= 5


@pytest.mark.parametrize("path", SQL_FILES, ids=lambda p: str(p.relative_to(SQL_ROOT)))
def test_every_sql_file_is_a_non_empty_query(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines()]
    body = [line for line in lines if line and not line.startswith("--")]
    assert body, f"{path} has no statement"
    assert path.parent.parent == SQL_ROOT, f"{path}: sql/<service>/<query>.sql, one level deep"
