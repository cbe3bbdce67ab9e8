"""Gateway.Ask through the SSE bridge, with all four services on loopback and the demo corpus
(the asking tests on each search backend: `ask_url`).
Every /api/* call carries the stack's admin key (tenant DEMO, where the demo corpus is)."""
from __future__ import annotations

import re

import httpx
import pytest

from tests.auth import headers
from tests.conftest import answer_of, one, sse
from tests.stack import DEMO, Stack

KESTREL = "Kestrel Emerging Markets"
NORTHWIND = "Northwind Global Macro Fund"


def test_events_arrive_in_the_documented_order_with_citations_that_resolve(stack: Stack, ask_url: str) -> None:
    events = sse(ask_url + "/api/chat/ask/stream",
                 {"question": "What did Kestrel do with its Brazil exposure in March 2024?"}, stack.headers)
    keys = [next(iter(e)) for e in events]
    assert keys[:4] == ["searching", "searching", "strategy", "generating"]
    assert events[0] == {"searching": True} and events[1] == {"searching": False}
    assert set(keys[4:-2]) == {"content"}
    assert keys[-2:] == ["citations", "done"]
    assert events[-1]["done"] is True and events[-1]["stopped"] is False

    answer = answer_of(events)
    assert "12% to 4%" in answer
    markers = {int(n) for n in re.findall(r"\[(\d+)\]", answer)}
    citations = one(events, "citations")
    assert markers and markers == {c["index"] for c in citations}
    for c in citations:
        assert c["metadata"]["fund_name"] and re.fullmatch(r"\d{4}-\d{2}-\d{2}", c["date"])
        assert c["ref"].startswith("#chk_") and len(c["ref"]) == 13
    assert any(c["doc_id"] == "mn-kestrel-2024-03-14" for c in citations)


def test_one_selected_fund_gives_only_that_funds_chunks(stack: Stack, ask_url: str) -> None:
    events = sse(ask_url + "/api/chat/ask/stream",
                 {"question": "How did net exposure change?", "selected_funds": [NORTHWIND]}, stack.headers)
    strategy = one(events, "strategy")
    assert strategy["filter"]["in"] == {"fund_name": [NORTHWIND]}
    assert strategy["chunks"] > 0
    citations = one(events, "citations")
    assert citations and {c["metadata"]["fund_name"] for c in citations} == {NORTHWIND}


def test_a_date_range_with_no_documents_returns_no_chunks_and_says_so(stack: Stack, ask_url: str) -> None:
    events = sse(ask_url + "/api/chat/ask/stream",
                 {"question": "What was Kestrel's performance?", "start_date": "2019-01-01", "end_date": "2019-12-31"},
                 stack.headers)
    strategy = one(events, "strategy")
    assert strategy["chunks"] == 0 and strategy["candidate_count"] == 0
    assert answer_of(events).startswith("I don't have any notes that match this question and these filters")
    # then Kestrel's most recent notes, said to be just that (tests/integration/test_fallback_recent_notes.py)
    assert {c["metadata"]["fund_name"] for c in one(events, "citations")} <= {KESTREL}


def test_the_whole_answer_as_json(stack: Stack, ask_url: str) -> None:
    reply = httpx.post(ask_url + "/api/chat/ask",
                       json={"question": "Who left Northwind in early 2025?", "selected_funds": [NORTHWIND]},
                       headers=stack.headers, timeout=60)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert "Osei" in body["answer"]
    assert body["meta"]["model"] == "extractive"
    assert body["meta"]["strategy"]["retrieval"] == "RAG_NEW_QUERY"
    assert body["meta"]["strategy"]["route"] == "SPECIFIC"
    assert body["meta"]["retrieval"]["k"] == 5 and body["meta"]["retrieval"]["candidateCount"] > 0
    assert body["citations"] and body["conversation_id"] and body["web_queries"] == []


def test_healthz_reports_every_service(stack: Stack) -> None:
    reply = httpx.get(stack.http_url + "/healthz")
    assert reply.status_code == 200
    assert reply.json()["services"] == {s: "SERVING" for s in ("gateway", "embedder", "retriever", "generator")}


def test_meta_lists_models_sources_and_the_demo_funds(stack: Stack) -> None:
    meta = httpx.get(stack.http_url + "/api/meta", headers=stack.headers).json()
    assert "extractive" in meta["models"] and "Meeting Notes" in meta["data_sources"]
    assert {KESTREL, NORTHWIND} <= set(meta["funds"]) and len(meta["funds"]) >= 6


@pytest.fixture(scope="module")
def asker(stack: Stack) -> dict[str, str]:
    """HTTP headers of a member of DEMO who asks only the bad questions below."""
    return headers(stack.key(DEMO, "bad-input-asker"))


@pytest.mark.parametrize("body, field", [
    ({"question": ""}, "question"),
    ({"question": "x" * 2001}, "question"),
    ({"question": "q", "start_date": "2024-02-30"}, "start_date"),
    ({"question": "q", "start_date": "2024-05-01", "end_date": "2024-01-01"}, "end_date"),
    ({"question": "q", "model": "gpt-17"}, "model"),
    ({"question": "q", "data_sources": ["Tarot"]}, "data_sources"),
    ({"question": "q", "top_k": 0}, "top_k"),
    ({"question": "q", "top_k": 500}, "top_k"),
    ({"question": 5}, "question"),
])
@pytest.mark.parametrize("path", ["/api/chat/ask/stream", "/api/chat/ask"])
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(stack: Stack, asker: dict, body: dict, field: str,
                                                                path: str) -> None:
    reply = httpx.post(stack.http_url + path, json=body, headers=asker)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT" and error["message"].startswith(field)
    listed = httpx.get(f"{stack.http_url}/api/conversations", headers=asker)
    assert listed.status_code == 200 and listed.json()["conversations"] == [], "no conversation was started"
