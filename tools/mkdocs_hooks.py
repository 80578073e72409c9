"""mkdocs hooks (mkdocs.yml `hooks:`): the generated pages, built from the code itself.

- before a build, docs/reference/configuration.md is rewritten from qtg/config.py when it is
  out of date, with a warning — so `mkdocs build --strict` (CI) fails on a stale committed
  page, and `mkdocs serve` keeps it fresh while settings are edited;
- reference/api.md and reference/openapi.json are generated from qtg.api's OpenAPI builder
  into the site only (never written to docs/).
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
    return files
