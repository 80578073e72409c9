"""The layering of qtg's packages, held by a test (issue 30 item 2).

    domain → (nothing of qtg); db → domain; config → domain;
    providers → domain, db, config; services → providers, domain, db, config;
    runtime → services and below (and api: the launcher serves it);
    api → services and below; cli → services and below.

An import of a higher floor from a lower one fails this test, unless it is one
of `KNOWN_UPWARD` (empty now: the 17 that predated the rule have been moved to
their floors). That list may only shrink: an entry that no longer exists fails
the test too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "qtg"

#: floor -> the floors it may import from (its own included)
ALLOWED: dict[str, frozenset[str]] = {
    "domain": frozenset({"domain"}),
    "db": frozenset({"db", "domain"}),
    "config": frozenset({"config", "domain"}),
    "providers": frozenset({"providers", "domain", "db", "config"}),
    "services": frozenset({"services", "providers", "domain", "db", "config"}),
    "runtime": frozenset({"runtime", "api", "services", "providers", "domain", "db", "config"}),
    "api": frozenset({"api", "services", "domain", "db", "config"}),
    "cli": frozenset({"cli", "services", "domain", "db", "config"}),
}

#: (importing module, imported module): upward imports from before the rule.
KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset()  # none left


def _floor(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> Iterator[tuple[str, str]]:
    """Every (module, imported qtg module) pair, type-only imports included."""
    for path in sorted(ROOT.rglob("*.py")):
        module = _module(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.startswith("qtg."):
                    yield module, name


def upward(pairs: Iterable[tuple[str, str]] | None = None) -> set[tuple[str, str]]:
    out = set()
    for module, imported in imports() if pairs is None else pairs:
        floor = _floor(module)
        if floor in ALLOWED and _floor(imported) not in ALLOWED[floor]:
            out.add((module, imported))
    return out


def test_no_new_upward_import() -> None:
    new = sorted(upward() - KNOWN_UPWARD)
    assert not new, "imports from a higher floor (see this file's docstring): " + ", ".join(
        f"{m} -> {i}" for m, i in new
    )


def test_the_known_upward_imports_only_shrink() -> None:
    gone = sorted(KNOWN_UPWARD - upward())
    assert not gone, "fixed, so remove from KNOWN_UPWARD: " + ", ".join(
        f"{m} -> {i}" for m, i in gone
    )


def test_every_package_has_a_floor() -> None:
    """A new top-level package must be given its place in ALLOWED."""
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages - {"console"} <= set(ALLOWED), packages - set(ALLOWED)


def test_the_check_sees_an_upward_import() -> None:
    """The walk really finds imports (a check that saw nothing would pass)."""
    found = set(imports())
    assert ("qtg.services.dispatch", "qtg.domain.states") in found or any(
        m == "qtg.services.dispatch" and i.startswith("qtg.domain") for m, i in found
    )
    assert upward([("qtg.domain.evm", "qtg.config"), ("qtg.api.app", "qtg.runtime.x")]) == {
        ("qtg.domain.evm", "qtg.config"),
        ("qtg.api.app", "qtg.runtime.x"),
    }
    assert upward([("qtg.services.dispatch", "qtg.providers.base")]) == set()
