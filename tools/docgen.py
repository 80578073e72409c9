"""The documentation's generated pages: the configuration reference and the API reference.

- `configuration_page()`: every field of `qtg.config.Settings` with its MG_* variable, its
  default and its description — the comment block directly above the field in
  qtg/config.py (a `# ---- title` line starts a section). The page is committed as
  docs/reference/configuration.md; the mkdocs hook rewrites it when it is out of date and
  tests/test_docs.py fails on a setting without a description or a stale page.
- `api_page(document)` / `openapi_document()`: the OpenAPI document the runtime serves at
  /openapi.json (qtg.api.openapi.build_openapi over the same route table), rendered as
  Markdown; built by the hook at build time, never committed.

`python tools/docgen.py` rewrites docs/reference/configuration.md.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import re
import tokenize
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONFIG_SOURCE = REPO / "qtg" / "config.py"
CONFIGURATION_PAGE = REPO / "docs" / "reference" / "configuration.md"

SECTION = "# ----"


@dataclasses.dataclass(frozen=True)
class SettingDoc:
    section: str
    field: str
    env: str
    default: Any
    description: str
    secret: bool
    choices: tuple[str, ...] | None
    minimum: float | None
    maximum: float | None
    exclusive_minimum: float | None


def _comments_by_line(source: str) -> dict[int, str]:
    """Line number → text of a comment that is alone on its line."""
    out: dict[int, str] = {}
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            if not lines[row - 1][:col].strip():
                out[row] = tok.string
    return out


def settings_docs(source: str | None = None) -> list[SettingDoc]:
    """Every Settings field in declaration order, with the comment block above it."""
    from qtg.config import Settings

    source = CONFIG_SOURCE.read_text() if source is None else source
    comments = _comments_by_line(source)
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Settings")
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    defaults = Settings()
    section = "General"
    section_at: dict[int, str] = {
        row: text[len(SECTION) :].strip()
        for row, text in comments.items()
        if text.startswith(SECTION)
    }
    docs: list[SettingDoc] = []
    for statement in cls.body:
        if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
            continue
        # the latest section line above this field
        above = [row for row in section_at if row < statement.lineno]
        if above:
            section = section_at[max(above)]
        block: list[str] = []
        row = statement.lineno - 1
        while row in comments and not comments[row].startswith(SECTION):
            block.insert(0, comments[row].lstrip("#").strip())
            row -= 1
        name = statement.target.id
        meta = fields[name].metadata
        docs.append(
            SettingDoc(
                section=section,
                field=name,
                env=meta["env"],
                default=getattr(defaults, name),
                description=" ".join(part for part in block if part),
                secret=meta["secret"],
                choices=meta["choices"],
                minimum=meta["minimum"],
                maximum=meta["maximum"],
                exclusive_minimum=meta["exclusive_minimum"],
            )
        )
    return docs


def _default_text(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if value == "":
        return "empty"
    return f"`{value}`"


def _cell(text: str) -> str:
    """Text for a table cell: pipes escaped; outside `code`, < > and * are literal."""
    parts = text.replace("\n", " ").split("`")
    out = []
    for i, part in enumerate(parts):
        outside = i % 2 == 0
        if outside or "|" in part:
            # a pipe inside `code` in a table renders as \| on one Markdown and breaks the
            # row on another: such code is written as plain text with the pipe escaped
            part = part.replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
            out.append(part.replace("|", "\\|"))
        else:
            out.append(f"`{part}`")
    return "".join(out)


def _accepts(doc: SettingDoc) -> str:
    parts = []
    if doc.choices:
        parts.append("one of " + ", ".join(f"`{c}`" for c in doc.choices))
    if doc.exclusive_minimum is not None:
        parts.append(f"> {doc.exclusive_minimum:g}")
    if doc.minimum is not None:
        parts.append(f"≥ {doc.minimum:g}")
    if doc.maximum is not None:
        parts.append(f"≤ {doc.maximum:g}")
    if doc.secret:
        parts.append("secret: masked in logs")
    return "; ".join(parts)


CONFIGURATION_HEADER = """\
# Configuration reference

<!-- Generated from qtg/config.py by tools/docgen.py: do not edit. Change the comment above the
setting in qtg/config.py, then run `python tools/docgen.py` (mkdocs build does it too). -->

Settings come from the environment, one `MG_*` variable each, read once at start-up. A bad
value (`MG_NODE_DISPATCH_INTERVAL_SECONDS=2s`, a negative interval, `maybe` for a flag, a port
outside 1-65535; `MG_API_PORT` and `MG_METRICS_PORT` also take 0, any free port) stops start-up
with one line naming the variable. Flags take `true`/`false` (also `1`/`0`, `yes`/`no`,
`on`/`off`); an empty optional value means unset.

Secrets (`MG_DATABASE_URL`, `MG_LISTEN_DATABASE_URL`, `MG_CALLBACK_SIGNING_SECRET`, …, marked
*secret* below) are masked in logs (`Settings.redacted()`); the `qtg` command never prints a
DSN's password.

This page is generated from `qtg/config.py`: each setting's description is the comment above
its field there.
"""


def configuration_page(docs: list[SettingDoc] | None = None) -> str:
    docs = settings_docs() if docs is None else docs
    out = [CONFIGURATION_HEADER]
    section = None
    for doc in docs:
        if doc.section != section:
            section = doc.section
            out += ["", f"## {section[:1].upper()}{section[1:]}", ""]
            out += ["| variable | default | accepts | description |", "|---|---|---|---|"]
        out.append(
            f"| `{doc.env}` | {_cell(_default_text(doc.default))} | {_cell(_accepts(doc))} "
            f"| {_cell(doc.description)} |"
        )
    return "\n".join(out).rstrip() + "\n"


# ---------------------------------------------------------------- the API reference


def openapi_document() -> dict[str, Any]:
    """The document GET /openapi.json serves (same builder, same route table)."""
    from qtg.api.app import _version
    from qtg.api.openapi import build_openapi
    from qtg.api.routes import all_endpoints

    return build_openapi(all_endpoints(), title="qtg", version=_version())


def _schema_name(schema: dict[str, Any] | None) -> str:
    if not schema:
        return ""
    ref = schema.get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[1]
        return f"[`{name}`](#{_anchor(name)})"
    if schema.get("type") == "array":
        return f"list of {_schema_name(schema.get('items'))}"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_schema_name(s) for s in schema[key])
    kind = schema.get("type", "object")
    return f"`{kind}`"


def _anchor(name: str) -> str:
    return "schema-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def api_page(document: dict[str, Any]) -> str:
    out = [
        "# API reference",
        "",
        "The OpenAPI document the runtime serves at `GET /openapi.json`, rendered at build time",
        "from the same route table and models "
        "([download it](openapi.json)). The conventions — errors, amounts, idempotency,",
        "pagination, roles — are in [API](../api.md).",
        "",
    ]
    tags: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, methods in document["paths"].items():
        for method, op in methods.items():
            tag = (op.get("tags") or ["other"])[0]
            tags.setdefault(tag, []).append((method.upper(), path, op))
    for tag, ops in tags.items():
        out += [f"## {tag}", ""]
        for method, path, op in ops:
            out += [f"### `{method} {path}`", ""]
            if op.get("summary"):
                out += [f"**{op['summary']}**", ""]
            if op.get("description"):
                out += [op["description"], ""]
            role = op.get("x-qtg-role")
            out += [f"Role: `{role}`." if role else "No token needed.", ""]
            params = op.get("parameters") or []
            if params:
                out += ["| parameter | in | required | schema | description |"]
                out += ["|---|---|---|---|---|"]
                for p in params:
                    out.append(
                        f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} "
                        f"| {_cell(_schema_name(p.get('schema')))} "
                        f"| {_cell(p.get('description', ''))} |"
                    )
                out.append("")
            body = op.get("requestBody")
            if body:
                schema = body.get("content", {}).get("application/json", {}).get("schema")
                out += [f"Request body: {_schema_name(schema)}", ""]
            out += ["| status | meaning | body |", "|---|---|---|"]
            for status, response in op.get("responses", {}).items():
                schema = response.get("content", {}).get("application/json", {}).get("schema")
                out.append(
                    f"| {status} | {_cell(response.get('description', ''))} "
                    f"| {_cell(_schema_name(schema))} |"
                )
            out.append("")
    out += ["## Schemas", ""]
    for name, schema in sorted(document.get("components", {}).get("schemas", {}).items()):
        out += [f"### {name} {{ #{_anchor(name)} }}", ""]
        if schema.get("description"):
            out += [schema["description"], ""]
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        if props:
            out += ["| field | type | required | description |", "|---|---|---|---|"]
            for field, prop in props.items():
                out.append(
                    f"| `{field}` | {_cell(_schema_name(prop))} "
                    f"| {'yes' if field in required else 'no'} "
                    f"| {_cell(prop.get('description', ''))} |"
                )
            out.append("")
        elif "enum" in schema:
            out += ["One of " + ", ".join(f"`{v}`" for v in schema["enum"]) + ".", ""]
    return "\n".join(out).rstrip() + "\n"


def write_configuration_page() -> bool:
    """Rewrite docs/reference/configuration.md if it is out of date; True when it changed."""
    page = configuration_page()
    if CONFIGURATION_PAGE.exists() and CONFIGURATION_PAGE.read_text() == page:
        return False
    CONFIGURATION_PAGE.parent.mkdir(parents=True, exist_ok=True)
    CONFIGURATION_PAGE.write_text(page)
    return True


def openapi_json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    changed = write_configuration_page()
    print(f"{CONFIGURATION_PAGE.relative_to(REPO)}: {'rewritten' if changed else 'up to date'}")
