"""The published OpenAPI document against the code (issue 26), with schemathesis.

schemathesis (PyPI) reads /openapi.json from a real server on a real
database and generates requests from it: valid ones, and ones that break the
document on purpose. It then checks what matters for a client that trusts the
document: no 5xx, every status and body the document declares
(status_code_conformance, content_type_conformance,
response_schema_conformance), and that a request the document calls invalid
is refused (negative_data_rejection: a `callback_url` that is not a URI was
answered 201). `positive_data_acceptance` is not run: a well-formed cursor
this list never returned, a venue no fetcher serves, a plan whose edge names
an unknown node are schema-valid *and* rightly 422; the document says so in
the fields' descriptions, which no generator reads.

Bounded and deterministic: a fixed seed, deterministic generation, no example
database, at most N examples per operation; it runs in about 25 s on a quiet machine. Its
run time is not asserted (speed is measured in bench/, never in a test): a hang
is bounded by HANG_SECONDS and fails with schemathesis's own output.

The targeted tests below pin each mismatch the issue names, so a regression
fails with a clear message even if the generator's luck changes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest
import trio

from qtg.api import schemas as s

from .conftest import ACTION_GRAPH, INTENT, Api, make_movement, make_template

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
)
MAX_EXAMPLES = 10
SEED = 26
HANG_SECONDS = 600


def schemathesis_bin() -> str:
    path = Path(sys.executable).parent / "schemathesis"
    if not path.exists():
        pytest.fail("schemathesis is not installed: pip install -e '.[test]'")
    return str(path)


async def test_schemathesis_finds_no_mismatch_between_the_document_and_the_server(
    api: Api, tmp_path: Path
) -> None:
    # something to find: templates of both shapes and a movement (stateful links)
    await make_template(api)
    await make_template(api, "t.action", ACTION_GRAPH)
    await make_movement(api, "t.action")
    cmd = [
        schemathesis_bin(),
        "run",
        f"{api.url}/openapi.json",
        "--checks",
        ",".join(CHECKS),
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--generation-deterministic",
        "--workers",
        "1",
        "--request-timeout",
        "10",
        "--header",
        f"Authorization: Bearer {api.tokens['admin']}",
        "--no-color",
        "--output-truncate",
        "false",
    ]
    done = await trio.to_thread.run_sync(
        lambda: subprocess.run(
            cmd,
            cwd=tmp_path,  # its report folder, if any, lands here
            capture_output=True,
            text=True,
            timeout=HANG_SECONDS,
            check=False,
        )
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    generated = re.search(r"(\d+) generated", out)
    assert generated and int(generated.group(1)) >= 500, out  # it really exercised the API
    assert re.search(r"Tested: +(\d+)", out), out


# ------------------------------------------------------------ each mismatch pinned


def document(api_app_endpoints: None = None) -> dict:
    from qtg.api.openapi import build_openapi
    from qtg.api.routes import all_endpoints

    return build_openapi(all_endpoints(), title="qtg", version="test")


AMOUNTS = [
    "125.50",
    "1",
    "0.000000000000000001",
    "0",
    "0.00",
    "000",
    "1.",
    ".5",
    "-1",
    "1e3",
    "1" * 31,
    "1." + "1" * 19,
    " 1",
    "1,5",
]


@pytest.mark.parametrize("amount", AMOUNTS)
def test_the_published_amount_pattern_is_what_the_code_accepts(amount: str) -> None:
    published = document()["components"]["schemas"]["Intent"]["properties"]["amount"]["pattern"]
    try:
        s.Intent.model_validate({"asset": "USDC", "amount": amount, "destination": "0xabc"})
        accepted = True
    except pydantic.ValidationError:
        accepted = False
    assert bool(re.search(published, amount)) == accepted, (amount, published)


@pytest.mark.parametrize(
    ("raw_url", "status"),
    [
        (r'"https://\ud9c3\udd2b"', 422),  # the value (a surrogate pair: U+80D2B)
        (r'"https://\ud800"', 400),  # a lone surrogate: not even valid JSON text
        ('"https://<e"', 422),
        ('"https://h\\u00e9.example/x"', 422),  # not ASCII: not a URI
        ('"https://a.example/%zz"', 422),
        ('"https://a.example/{x}"', 422),
    ],
)
async def test_a_callback_url_that_is_not_a_uri_is_refused_not_201(
    api: Api, raw_url: str, status: int
) -> None:
    await make_template(api)
    body = (
        '{"template_key": "t.manual", "intent": '
        + json.dumps(INTENT)
        + ', "callback_url": '
        + raw_url
        + "}"
    )
    r = await api["alice"].post(
        "/v3/movements",
        content=body.encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": "cb-uri-1"},
    )
    assert r.status_code == status, r.text
    assert r.json()["error"]["detail"]["field"] == ("callback_url" if status == 422 else "body")
    if status != 422:
        return
    pattern = document()["components"]["schemas"]["MovementCreate"]["properties"]["callback_url"][
        "anyOf"
    ][0]["pattern"]
    assert not re.search(pattern, json.loads(raw_url))  # the document refuses it too


async def test_a_unix_number_for_a_date_time_query_parameter_is_422(api: Api) -> None:
    for value in ("0", "1733300000", "true"):
        r = await api["vic"].get("/v3/balances/history", params={"until": value})
        assert r.status_code == 422, (value, r.text)
        assert r.json()["error"]["detail"]["field"] == "until"
    ok = await api["vic"].get("/v3/balances/history", params={"until": "2026-12-01T00:00:00Z"})
    assert ok.status_code == 200, ok.text


def test_the_document_states_the_semantic_422s() -> None:
    doc = document()
    params = {
        (path, p["name"]): p
        for path, ops in doc["paths"].items()
        for op in ops.values()
        for p in op.get("parameters", [])
    }
    cursor = params[("/v3/movements", "cursor")]["schema"]["anyOf"][0]["description"]
    assert "this same list" in cursor and "422" in cursor
    venue = params[("/v3/balances", "venue_key")]["schema"]["anyOf"][0]["description"]
    assert "422" in venue and "detail.venues" in venue
    graph = doc["components"]["schemas"]["TemplateCreate"]["properties"]["graph"]["description"]
    assert "an edge naming a node that is not in `nodes`" in graph
    zero = doc["components"]["schemas"]["ExpectedIdentity"]["properties"]["expected_signer_address"]
    assert re.search(zero["not"]["pattern"], "0x" + "0" * 40)
    assert "NUL" in doc["info"]["description"]
