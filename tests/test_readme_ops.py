"""The docs say what an operator needs to start qtg (issue 17 item 11), and their hand-written
setting tables agree with qtg/config.py."""

from __future__ import annotations

import dataclasses
import re

from doc_blocks import DOCS, doc_files, docs_text, page_section

from qtg.config import Settings

README = docs_text()  # README.md and every page under docs/
CONFIGURATION = (DOCS / "reference" / "configuration.md").read_text()


def test_log_format_and_level_values_are_documented() -> None:
    fields = {f.metadata["env"]: f for f in dataclasses.fields(Settings)}
    for env in ("MG_LOG_FORMAT", "MG_LOG_LEVEL"):
        row = next(line for line in CONFIGURATION.splitlines() if f"`{env}`" in line)
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


# ---------------------------------------------------------------- issue 25 item 9


def _default_text(value: object) -> str:
    """A Settings default as the README's configuration table writes it."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value) if value != "" else "empty"


def test_setting_tables_in_the_docs_say_the_settings_defaults() -> None:
    """Every row of a hand-written table in the docs that names one variable and one default
    says the default qtg/config.py really has (the generated configuration reference is
    checked by tests/test_docs.py)."""
    defaults = Settings()
    fields = {f.metadata["env"]: f for f in dataclasses.fields(Settings)}
    checked = 0
    for path in doc_files():
        if path.name == "configuration.md":
            continue
        header: list[str] = []
        for line in path.read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not line.startswith("|"):
                header = []
                continue
            if not header:
                header = [c.lower() for c in cells]
                continue
            if len(header) < 2 or header[1] != "default":
                continue  # not a table of defaults (e.g. deployment's "value | why")
            if len(cells) < 3 or not cells[0].startswith("`MG_") or "," in cells[0]:
                continue
            env = cells[0].strip("`")
            if env not in fields:
                continue
            shown = cells[1].strip("`")
            if shown in ("general one", "per the reference"):
                continue
            assert shown == _default_text(getattr(defaults, fields[env].name)), (path, env, shown)
            checked += 1
    assert checked >= 20


def test_readme_says_what_the_default_dispatcher_and_observer_do() -> None:
    from qtg.domain.faults import CLAIM_TRIES_PER_PASS, CLAIM_TRIES_PER_TRANSACTION
    from qtg.services import observe

    defaults = Settings()
    text = " ".join(page_section("The default dispatcher and observer").split())
    batch = defaults.node_dispatch_batch_size
    assert batch > 1  # the default batches: the README must not call it serial
    assert f"`MG_NODE_DISPATCH_BATCH_SIZE={batch}`" in text
    assert f"`MG_NODE_DISPATCH_CONCURRENCY={defaults.node_dispatch_concurrency}`" in text
    assert f"one pass claims up to {batch} READY non-manual nodes" in text
    assert f"one claim and one synchronous commit per {batch} nodes" in text
    assert "keeps the first node per request" in text
    assert "`MG_NODE_DISPATCH_BATCH_SIZE=1` is the reference's serial dispatcher" in text
    assert (
        f"{CLAIM_TRIES_PER_TRANSACTION} claims per transaction, {CLAIM_TRIES_PER_PASS} per pass"
        in text
    )
    claim = "true" if defaults.node_observe_batch_claim else "false"
    assert f"with `MG_NODE_OBSERVE_BATCH_CLAIM={claim}` one pass claims up to" in text
    assert f"`MG_NODE_OBSERVE_BATCH_SIZE` ({defaults.node_observe_batch_size})" in text
    lease = _default_text(defaults.node_observe_lease_seconds)
    assert f"`MG_NODE_OBSERVE_LEASE_SECONDS` ({lease})" in text
    assert "no lock is held while the provider is asked" in text
    assert "side by side (the whole batch's provider calls at once)" in text
    assert f"in its own transaction ({observe.CONCURRENCY} of them at a time)" in text
    # "the reference's serial dispatcher" is said of batch size 1 only, never of the default
    flat = " ".join(README.split())
    said = [m.start() for m in re.finditer("reference's serial", flat)]
    assert said
    for at in said:
        before = flat[max(0, at - 60) : at]
        said_of_one = ("BATCH_SIZE=1`", "`1` is the", "batch size 1 the", "1 and 1: the")
        assert any(phrase in before for phrase in said_of_one), before
