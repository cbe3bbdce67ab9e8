"""What a question leaves in the metrics, read from the gateway's /metrics the way Prometheus
reads it: the route, the scope cache (a miss, then a hit for the follow-up), the retriever's
stages, the generator's first token and tokens, the HTTP bridge's request; and /metrics itself:
open without a credential and to any Host (Prometheus scrapes by address), read-only."""
from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import sse
from tests.stack import Stack

QUESTION = "What did Kestrel do with its Brazil exposure?"


def scrape(stack: Stack) -> dict[tuple[str, tuple], float]:
    page = httpx.get(stack.http_url + "/metrics", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(page.text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_a_question_and_its_follow_up_in_the_metrics(stack: Stack) -> None:
    before = scrape(stack)
    first = sse(stack.http_url + "/api/chat/ask/stream", {"question": QUESTION}, stack.headers)
    conversation = first[-1]["conversation_id"]
    # A follow-up that refers to nothing before it, on the same filters and words: it reuses the scope.
    sse(stack.http_url + "/api/chat/ask/stream", {"question": "What did Kestrel do with Brazil?",
                                                  "conversation_id": conversation}, stack.headers)
    after = scrape(stack)

    def grown(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grown("ragmesh_routes_total", route="SPECIFIC") == 2
    assert grown("ragmesh_scope_cache_misses_total") == 1 and grown("ragmesh_scope_cache_hits_total") == 1
    assert grown("ragmesh_http_requests_total", route="/api/chat/ask/stream", code="200") == 2
    assert grown("ragmesh_rpc_requests_total", service="retriever", method="Search", code="OK") >= 2, \
        "the first question searches each collection"
    for stage in ("dense", "sparse", "fusion"):
        assert grown("ragmesh_retrieval_stage_seconds_count", stage=stage) >= 2
    assert grown("ragmesh_generator_first_token_seconds_count", model="extractive") == 2
    assert grown("ragmesh_tokens_total", model="extractive", direction="out") > 0
    assert grown("ragmesh_tokens_total", model="extractive", direction="in") > 0
    assert value(after, "ragmesh_index_chunks", collection="meeting_notes") > 0
    assert ("ragmesh_in_flight_requests", (("service", "gateway"),)) in after


def test_metrics_are_open_to_any_host_and_only_read(stack: Stack) -> None:
    assert httpx.get(stack.http_url + "/api/meta", headers={"host": "10.1.2.3:8080"}, timeout=10).status_code == 400
    scraped = httpx.get(stack.http_url + "/metrics", headers={"host": "10.1.2.3:8080"}, timeout=10)
    assert scraped.status_code == 200 and "ragmesh_rpc_requests_total" in scraped.text
    assert "x-request-id" in scraped.headers
    assert httpx.post(stack.http_url + "/metrics", content=b"x", timeout=10).status_code == 405
