"""The documentation's text and its marked command blocks, wherever they live.

Tests run commands exactly as the docs write them: a block is the ```sh fence right after an
HTML comment marker (`<!-- session -->`, `<!-- session:ccxt -->` …) in README.md or in a page
under docs/. A marker must occur exactly once, so a block cannot be copied and drift.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"


def doc_files() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def docs_text() -> str:
    """README.md and every docs page, one after another."""
    return "\n\n".join(path.read_text() for path in doc_files())


def _marker_lines(path: Path, tag: str) -> list[int]:
    return [i for i, line in enumerate(path.read_text().splitlines()) if line.strip() == tag]


def marked_file(marker: str) -> Path:
    """The one file that holds the line `<!-- marker -->` (a marker is a line of its own)."""
    tag = f"<!-- {marker} -->"
    holders = [path for path in doc_files() if _marker_lines(path, tag)]
    assert len(holders) == 1, f"{tag} must occur in exactly one doc file, found in {holders}"
    assert len(_marker_lines(holders[0], tag)) == 1, f"{tag} occurs twice in {holders[0]}"
    return holders[0]


def marked_block(marker: str) -> str:
    """The sh block right after the line `<!-- marker -->`, exactly as written."""
    path = marked_file(marker)
    lines = path.read_text().splitlines()
    after = "\n".join(lines[_marker_lines(path, f"<!-- {marker} -->")[0] + 1 :]) + "\n"
    return after.split("```sh\n", 1)[1].split("\n```", 1)[0]


def page_section(title: str) -> str:
    """The text under the heading `title` (any level, any docs page) up to the next heading
    of the same or a higher level."""
    for path in doc_files():
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            hashes = line.split(" ", 1)[0]
            if set(hashes) == {"#"} and line[len(hashes) + 1 :].strip() == title:
                body = []
                fence = False
                for rest in lines[i + 1 :]:
                    if rest.startswith("```"):
                        fence = not fence
                    head = rest.split(" ", 1)[0]
                    if not fence and set(head) == {"#"} and len(head) <= len(hashes):
                        break
                    body.append(rest)
                return "\n".join(body)
    raise AssertionError(f"no docs heading {title!r}")


def run_block(marker: str, env: dict[str, str], deadline: float, tmp_path: Path) -> tuple:
    """Run the marked block by bash (`set -euo pipefail`) from the repository, its
    background processes in one process group ended after it; (returncode, stdout,
    the end of stderr)."""
    import contextlib
    import os
    import signal
    import subprocess

    # files, not pipes: the session's background processes keep a pipe open past its end
    out_file, err_file = tmp_path / "out", tmp_path / "err"
    with out_file.open("w") as out_fd, err_file.open("w") as err_fd:
        session = subprocess.Popen(
            ["bash", "-c", "set -euo pipefail\n" + marked_block(marker)],
            env=env,
            cwd=REPO,
            stdout=out_fd,
            stderr=err_fd,
            start_new_session=True,  # its background chains, services and runtime: one group
        )
        try:
            session.wait(timeout=deadline)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(session.pid, signal.SIGTERM)
    return session.returncode, out_file.read_text(), err_file.read_text()[-4000:]
