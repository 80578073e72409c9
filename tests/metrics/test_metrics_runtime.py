"""GET /metrics on real `bin/qtg-runtime` processes, scraped over HTTP.

Every scrape is parsed by prometheus_client's own parser (a line it cannot
parse fails the test). Two processes on one database: an `--api-only` one
whose backlog gauges are watched, and a full one whose workers drain the
backlog — so READY > 0 is seen before any worker could run, then 0.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families
from runtime.rt_procs import RuntimeProcess, base_env, wait_until
from runtime.test_runtime_end_to_end import CHAIN, POOL, create_and_approve

from qtg.db import Database
from qtg.services.tokens import create_token

pytestmark = pytest.mark.slow

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def launch(
    procs: list, dsn: str, *args: str, listening: str = "API listening", **env: str
) -> tuple[RuntimeProcess, str]:
    proc = RuntimeProcess.launcher(base_env(MG_DATABASE_URL=dsn, **POOL, **env), *args)
    procs.append(proc)
    proc.wait_ready()
    url = proc.wait_for(lambda r: r.get("msg") == listening)["url"]
    return proc, url


def scrape(url: str, **headers: str) -> Samples:
    response = httpx.get(f"{url}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):  # raises on any bad line
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def ready_nodes(url: str) -> float:
    return value(scrape(url), "qtg_backlog", kind="node", state="READY")


def test_backlog_gauges_move_during_a_drain_and_worker_counters_rise(dsn, procs) -> None:
    _, watch_url = launch(procs, dsn, "--seed-demo", "--api-only")
    first = scrape(watch_url)
    assert value(first, "qtg_backlog", kind="node", state="READY") == 0
    # the observer's lag is read with the backlogs, in the same round trip
    for gauge in ("qtg_observe_lag_seconds", "qtg_observe_overdue_nodes"):
        assert first[(gauge, frozenset())] == 0
    assert value(first, "qtg_metrics_backlog_queries_total") >= 1
    assert value(first, "qtg_metrics_backlog_errors_total") == 0
    info = [k for k in first if k[0] == "qtg_process_info"]
    assert len(info) == 1 and ("workers", "none") in info[0][1]

    ids = create_and_approve(dsn, CHAIN, n=5, batch="metrics")
    wait_until(lambda: ready_nodes(watch_url) > 0, timeout=10, what="READY backlog > 0")

    _, work_url = launch(procs, dsn)
    wait_until(lambda: ready_nodes(watch_url) == 0, timeout=30, what="READY backlog drained")
    assert ids

    worked = scrape(work_url)
    dispatched = value(worked, "qtg_worker_items_total", worker="node_dispatcher")
    passes = value(worked, "qtg_worker_passes_total", worker="node_dispatcher", outcome="ok")
    assert dispatched >= 5 and passes >= 1
    [(_, labels)] = [k for k in worked if k[0] == "qtg_process_info"]
    assert "node_dispatcher" in dict(labels)["workers"].split("+")
    wait_until(
        lambda: (
            value(
                scrape(work_url), "qtg_worker_passes_total", worker="node_dispatcher", outcome="ok"
            )
            > passes
        ),
        timeout=10,
        what="worker passes keep counting",
    )


def test_routes_are_labelled_by_template_not_by_url(dsn, procs) -> None:
    _, url = launch(procs, dsn, "--api-only")
    for i in range(3):
        httpx.get(f"{url}/v3/movements/00000000-0000-0000-0000-00000000000{i}", timeout=10)
    httpx.get(f"{url}/no/such/route/{'x' * 20}", timeout=10)
    samples = scrape(url)
    routes = {dict(k[1])["route"] for k in samples if k[0] == "qtg_http_requests_total"}
    assert "/v3/movements/{request_id}" in routes, routes
    assert not any("0000" in r or "xxxx" in r for r in routes), routes
    assert (
        value(
            samples,
            "qtg_http_requests_total",
            method="GET",
            route="/v3/movements/{request_id}",
            status="401",
        )
        == 3
    )
    assert (
        value(samples, "qtg_http_requests_total", method="GET", route="<unmatched>", status="404")
        == 1
    )


def test_require_token_refuses_anonymous_scrapes(dsn, procs) -> None:
    _, url = launch(procs, dsn, "--api-only", MG_METRICS_REQUIRE_TOKEN="true")
    anonymous = httpx.get(f"{url}/metrics", timeout=10)
    assert anonymous.status_code == 401
    body = anonymous.json()
    assert body["error"]["code"] == "UNAUTHENTICATED", body

    async def mint() -> str:
        async with Database(dsn, min_size=1, max_size=1) as db:
            token = await create_token(db, name="scraper", role="viewer", actor="ops")
        return str(token["token"])

    token = trio.run(mint)
    samples = scrape(url, authorization=f"Bearer {token}")
    assert ("qtg_backlog", frozenset({("kind", "node"), ("state", "READY")})) in samples


def test_concurrent_scrapes_share_one_backlog_query_per_second(dsn, procs) -> None:
    _, url = launch(procs, dsn, "--api-only")

    async def burst(n: int) -> list[str]:
        async with httpx.AsyncClient(timeout=10) as client:
            results: list[Any] = [None] * n

            async def one(i: int) -> None:
                results[i] = (await client.get(f"{url}/metrics")).text

            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(one, i)
        return results

    texts = trio.run(burst, 20)
    counts = {value(parse(t), "qtg_metrics_backlog_queries_total") for t in texts}
    # 20 concurrent scrapes: one query (two if the burst straddled a cache expiry).
    assert max(counts) <= 2, counts
    wait_until(
        lambda: value(scrape(url), "qtg_metrics_backlog_queries_total") > max(counts),
        timeout=5,
        what="the cache expires after a second",
    )


def test_workers_only_process_serves_its_metrics_on_metrics_port(dsn, procs) -> None:
    _, url = launch(
        procs, dsn, "--workers-only", listening="metrics listening", MG_METRICS_PORT="0"
    )
    samples = scrape(url)
    [(_, labels)] = [k for k in samples if k[0] == "qtg_process_info"]
    assert "node_dispatcher" in dict(labels)["workers"].split("+")
    wait_until(
        lambda: (
            value(scrape(url), "qtg_worker_passes_total", worker="node_dispatcher", outcome="ok")
            >= 1
        ),
        timeout=10,
        what="a workers-only process counts its passes",
    )
    # Only /metrics there: the API is not served by a workers-only process.
    assert httpx.get(f"{url}/healthz", timeout=10).status_code == 404


def test_node_pickup_and_time_in_state_histograms_fill_as_movements_run(dsn, procs) -> None:
    """Issue 16's two node histograms, on a real runtime: every node of the 5-node
    chains is picked up once (READY left once per node) and leaves SUBMITTING and
    its observation states once; the pickup's seconds come from the database's
    clock and are small, but never negative."""
    _, url = launch(procs, dsn, "--seed-demo")
    ids = create_and_approve(dsn, CHAIN, n=3, batch="histograms")
    nodes = 5 * len(ids)

    def pickups() -> float:
        return value(scrape(url), "qtg_node_pickup_seconds_count")

    wait_until(lambda: pickups() >= nodes, timeout=30, what="every node picked up")
    samples = scrape(url)
    assert value(samples, "qtg_node_pickup_seconds_count") == nodes
    total = value(samples, "qtg_node_pickup_seconds_sum")
    assert 0 <= total < nodes * 5.0
    # READY is left exactly as often as there were pickups
    assert value(samples, "qtg_node_state_seconds_count", state="READY") == nodes
    # each bucket count is cumulative and ends at the total
    assert value(samples, "qtg_node_pickup_seconds_bucket", le="+Inf") == nodes

    def left_observing() -> float:
        s = scrape(url)
        return value(s, "qtg_node_state_seconds_count", state="SUBMITTED") + value(
            s, "qtg_node_state_seconds_count", state="OBSERVING"
        )

    wait_until(lambda: left_observing() >= nodes, timeout=30, what="every node observed on")
    samples = scrape(url)
    actions = value(samples, "qtg_node_state_seconds_count", state="SUBMITTING")
    assert 0 < actions <= nodes  # observe-only nodes never are SUBMITTING
