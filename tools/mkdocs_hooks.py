"""mkdocs hooks (mkdocs.yml `hooks:`): the generated pages, built from the code itself.

- before a build, docs/reference/configuration.md is rewritten from qtg/config.py when it is
  out of date, with a warning — so `mkdocs build --strict` (CI) fails on a stale committed
  page, and `mkdocs serve` keeps it fresh while settings are edited;
- reference/api.md and reference/openapi.json are generated from qtg.api's OpenAPI builder
  into the site only (never written to docs/);
- mermaid.min.js, which .ci/run fetches from the npm registry into .tools/mermaid/, is copied
  into the site and loaded by every page, so Material draws the diagrams with it instead of
  fetching mermaid from unpkg: the site needs nothing from the network. Without the file the
  build warns (and `--strict` fails) rather than ship a site whose diagrams need the network.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import docgen as generated
from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.plugins.qtg")

REPO = Path(__file__).resolve().parents[1]
MERMAID_DIR = REPO / ".tools" / "mermaid"
#: Where the site serves it (relative to the site root).
MERMAID_URI = "assets/javascripts/mermaid.min.js"


def mermaid_file() -> Path | None:
    """The newest mermaid-<version>.min.js .ci/run fetched, if any."""

    def version(path: Path) -> tuple[int, ...]:
        raw = path.name.removeprefix("mermaid-").removesuffix(".min.js")
        return tuple(int(part) for part in raw.split(".") if part.isdigit())

    found = sorted(MERMAID_DIR.glob("mermaid-*.min.js"), key=version)
    return found[-1] if found else None


def on_config(config: Any) -> Any:
    if mermaid_file() is None:
        log.warning(
            "no .tools/mermaid/mermaid-*.min.js: the diagrams would load mermaid from the "
            "network; fetch it as .ci/run does (npm pack mermaid@11)"
        )
    elif MERMAID_URI not in [str(js) for js in config.extra_javascript]:
        config.extra_javascript.append(MERMAID_URI)
    return config


def on_pre_build(config: Any) -> None:
    if generated.write_configuration_page():
        log.warning(
            "docs/reference/configuration.md was out of date with qtg/config.py; "
            "it has been rewritten: commit it"
        )


def on_files(files: Files, config: Any) -> Files:
    document = generated.openapi_document()
    files.append(File.generated(config, "reference/api.md", content=generated.api_page(document)))
    files.append(
        File.generated(config, "reference/openapi.json", content=generated.openapi_json(document))
    )
    mermaid = mermaid_file()
    if mermaid is not None:
        files.append(File.generated(config, MERMAID_URI, abs_src_path=str(mermaid)))
    return files
