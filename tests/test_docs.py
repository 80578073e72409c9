"""The documentation cannot drift from the code it describes.

- every setting of qtg/config.py has a description (the comment above its field), and the
  committed configuration reference is the one tools/docgen.py generates from it;
- the state diagrams are the allowed transitions of qtg/domain/states.py;
- every worker of the registry is in the concepts' workers table;
- the API reference renders every path of the OpenAPI document;
- README.md stays short and keeps the markers .ci/run and the session tests read;
- user-facing text carries no issue numbers, and no pointer into a document the repository
  does not hold (a section sign, DESIGN, the spec's file).
"""

from __future__ import annotations

import re
import sys

import pytest
from doc_blocks import DOCS, README, REPO, doc_files, marked_file

sys.path.insert(0, str(REPO / "tools"))
import docgen as generated


def test_every_setting_has_a_description() -> None:
    docs = generated.settings_docs()
    assert len(docs) > 150
    missing = [doc.env for doc in docs if len(doc.description) < 10]
    assert not missing, (
        f"settings without a description: {missing}. Write one as the comment directly above "
        "the field in qtg/config.py, then run `python tools/docgen.py`."
    )


def test_a_setting_without_a_comment_is_found() -> None:
    """The check above can fail: a field with no comment directly above it has none."""
    source = generated.CONFIG_SOURCE.read_text()
    stripped = source.replace("    # Log level.\n    log_level:", "    log_level:")
    assert stripped != source
    docs = {doc.env: doc for doc in generated.settings_docs(stripped)}
    assert docs["MG_LOG_LEVEL"].description == ""
    assert docs["MG_LOG_FORMAT"].description  # its neighbour keeps its own


def test_the_configuration_reference_is_up_to_date() -> None:
    page = DOCS / "reference" / "configuration.md"
    assert page.read_text() == generated.configuration_page(), (
        "docs/reference/configuration.md is out of date: run `python tools/docgen.py` "
        "(mkdocs build does it too) and commit it"
    )
    for doc in generated.settings_docs():
        assert f"| `{doc.env}` |" in page.read_text(), doc.env


def _diagram_edges(page: str, first_state: str) -> set[tuple[str, str]]:
    text = (DOCS / page).read_text()
    for block in re.findall(r"```mermaid\n(.*?)```", text, re.S):
        if f"[*] --> {first_state}" in block:
            return set(re.findall(r"^\s*([A-Z_]+) --> ([A-Z_]+)", block, re.M))
    raise AssertionError(f"no diagram starting at {first_state} in {page}")


def test_state_diagrams_are_the_allowed_transitions() -> None:
    from qtg.domain.states import NODE_TRANSITIONS, REQUEST_TRANSITIONS

    nodes = {(a.value, b.value) for a, b in NODE_TRANSITIONS}
    requests = {(a.value, b.value) for a, b in REQUEST_TRANSITIONS}
    assert _diagram_edges("concepts.md", "BLOCKED") == nodes
    assert _diagram_edges("concepts.md", "PENDING_APPROVAL") == requests


def test_every_worker_is_in_the_workers_table() -> None:
    from qtg.runtime.registry import WORKERS

    text = (DOCS / "concepts.md").read_text()
    rows = set(re.findall(r"^\| `([a-z_]+)` \| (?:core|sidecar) \|", text, re.M))
    assert rows == {spec.name for spec in WORKERS}


def test_the_api_reference_renders_every_operation() -> None:
    document = generated.openapi_document()
    page = generated.api_page(document)
    for path, methods in document["paths"].items():
        for method in methods:
            assert f"### `{method.upper()} {path}`" in page
    for name in document["components"]["schemas"]:
        assert f"### {name} {{ #{generated._anchor(name)} }}" in page


def test_readme_is_short_and_keeps_its_markers() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < 200
    for marker in ("ci:run-command", "restart-command", "ci:test-command", "session"):
        assert marked_file(marker) == README, marker


@pytest.mark.parametrize("marker", ["session:ccxt", "cctp-session", "debridge-session"])
def test_provider_sessions_live_in_one_docs_page(marker: str) -> None:
    assert marked_file(marker).is_relative_to(DOCS)


def test_no_issue_numbers_in_user_facing_text() -> None:
    pattern = re.compile(r"\bissues? \d+", re.I)
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in doc_files()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, found


#: Pointers into documents a reader of the repository does not have: a section of
#: "the reference" or of DESIGN ("reference §1-3", "DESIGN §5"), the design notes or
#: the spec by file. The docs say the thing itself instead.
OUTSIDE_DOCUMENTS = re.compile(r"§|\bDESIGN\b|seeds/|/work/|[Rr]eference §")


def test_no_pointer_to_a_document_outside_the_repository() -> None:
    """The configuration reference's sections once read "reference §1-3" and "DESIGN §5"."""
    sources = [*doc_files(), REPO / "mkdocs.yml", generated.CONFIG_SOURCE]
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in sources
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if OUTSIDE_DOCUMENTS.search(line)
    ]
    assert not found, found


def test_the_outside_document_check_can_fail() -> None:
    for line in ("## Core workers (reference §1-3)", "## Providers (DESIGN §5)", "see DESIGN.md"):
        assert OUTSIDE_DOCUMENTS.search(line), line
    assert not OUTSIDE_DOCUMENTS.search("the design of the dispatcher (docs/engine.md)")


def test_readme_links_reach_docs_pages() -> None:
    """README.md is outside the site (mkdocs does not check it): its links must exist."""
    links = re.findall(r"\]\(([^)#\s]+)", README.read_text())
    assert len(links) > 20
    missing = [link for link in links if "://" not in link and not (REPO / link).exists()]
    assert not missing, missing


def _table_rows(text: str, heading: str) -> list[list[str]]:
    """The body rows (cells stripped) of the first table after `heading`."""
    after = text.split(heading, 1)[1]
    rows = []
    lines = after.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


def test_readme_performance_rows_are_rows_of_the_benchmarks_headline_table() -> None:
    """One source for each figure: the README's table repeats rows of docs/benchmarks.md's
    headline table (which once dated from 2026-12-03 while the README quoted newer
    figures), each row one short line (once: cells of 600 characters)."""
    readme = README.read_text()
    headline = _table_rows((DOCS / "benchmarks.md").read_text(), "## Headline figures")
    quoted = _table_rows(readme, "## Performance")
    assert len(quoted) >= 4 and len(headline) >= len(quoted)
    assert [row[:3] for row in quoted] == [row[:3] for row in headline], "README ≠ headline"
    section = readme.split("## Performance", 1)[1].split("\n## ", 1)[0]
    assert "docs/benchmarks.md#headline-figures" in section
    long_rows = [line for line in section.splitlines() if len(line) > 160]
    assert not long_rows, long_rows
