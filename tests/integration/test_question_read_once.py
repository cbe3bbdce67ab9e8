"""The question is read once per ask (services/gateway/reading.py): every rule that reads a question's words
(its period, window, funds, numbers, breadth, what it refers back to, the kind of fact asked) runs on the
asked question exactly once, whichever route it takes, and routing, the scope key and the planner share that
reading. Counted on a real gateway, asked over HTTP, with each reader wrapped wherever the gateway's modules
hold it."""
from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.stack import Stack

# Where each reader of a question's words is defined (one that is not there is skipped).
READERS = [("services.gateway.query_analysis", name) for name in (
    "time_hint", "time_window", "reported_period", "recency_phrase", "mentioned_funds", "question_numbers",
    "is_general", "reasoning_keyword", "summary_keyword")] + [
    ("services.gateway.question_lookup", "asks_all_questions"), ("services.gateway.followup", "referent"),
    ("services.gateway.referents", "referent"), ("ragmesh.question_kinds", "asked")]
OPENING = "How much did Northwind lose in August 2024?"


@pytest.fixture(scope="module")
def gateway_url(stack: Stack) -> Iterator[str]:
    gateway = stack.start_variant("gateway", retrieval_timeout_s=30.0)
    try:
        yield f"http://{stack.settings.host}:{gateway.app.http_port}"
    finally:
        stack.extra.remove(gateway)
        stack.call(gateway.stop())


def _counting(question: str, counts: Counter, name: str, reader: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        if args and args[0] == question:
            counts[name] += 1
        return reader(*args, **kwargs)
    return counted


@pytest.mark.parametrize("question", [
    "How much did Kestrel gain in September 2024?",  # searched
    "How about July 2024?",  # elliptical: searched in the words of the question it asks again
    "Why did that happen?",  # refers back: answered from the conversation
    "ok, thanks, what else?",  # not a question: answered directly
])
def test_each_reader_reads_the_asked_question_once(gateway_url: str, stack: Stack, question: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with httpx.Client(base_url=gateway_url, headers=stack.headers, timeout=120) as client:
        first = client.post("/api/chat/ask", json={"question": OPENING})
        assert first.status_code == 200, first.text
        counts: Counter = Counter()
        wrapped = 0
        for module_name, name in READERS:
            if (reader := getattr(sys.modules.get(module_name), name, None)) is None:
                continue
            counted = _counting(question, counts, name, reader)
            for module in [m for n, m in list(sys.modules.items()) if n.startswith(("services.gateway", "ragmesh"))]:
                if getattr(module, name, None) is reader:
                    monkeypatch.setattr(module, name, counted)
                    wrapped += 1
        assert wrapped >= 10
        reply = client.post("/api/chat/ask", json={"question": question,
                                                   "conversation_id": first.json()["conversation_id"]})
        monkeypatch.undo()
    assert reply.status_code == 200 and reply.json()["answer"], reply.text
    assert counts and all(n == 1 for n in counts.values()), f"read more than once: {dict(counts)}"
