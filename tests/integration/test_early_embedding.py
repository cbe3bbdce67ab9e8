"""A question every route searches for is embedded while its conversation is read (issue 15: a
question that reuses its scope waits for little more than its embedding); a question that may be
answered without a search is not embedded before the gateway knows it needs the vector. A new
conversation has nothing to read: no history read at all.

The gateway's history read is made to wait for the question's embedding request: with the embedding
started after the read, the read gives up after its wait and the test fails."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests.stack import Stack

QUESTION = "What did the Alpha fund say about emerging markets?"
WAIT_S = 20  # far longer than an embedding request takes to leave; only a failing run waits it out


@dataclass
class Watch:
    """What the gateway did for `question`: for each history read, whether the question's embedding
    had been requested by then; reads for QUESTION wait for that request."""

    question: str = ""
    seen: list[bool] = field(default_factory=list)
    asked: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def watch(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Watch]:
    gateway = stack.app("gateway")
    embedder, history = gateway.pipeline.planner.embedder, gateway.pipeline.history
    real_embed, real_recent = embedder.embed, history.recent
    w = Watch()

    async def embed(texts, task="DOCUMENT", timeout=None):
        if task == "QUERY" and texts == [w.question]:
            w.asked.set()
        return await real_embed(texts, task, timeout)

    def recent(conversation_id, keep):
        w.seen.append(w.asked.wait(WAIT_S) if w.question == QUESTION else w.asked.is_set())
        return real_recent(conversation_id, keep)

    monkeypatch.setattr(embedder, "embed", embed)
    monkeypatch.setattr(history, "recent", recent)
    yield w


def ask(stack: Stack, question: str, conversation_id: str = "") -> dict:
    reply = httpx.post(stack.http_url + "/api/chat/ask", headers=stack.headers, timeout=120,
                       json={"question": question, "conversation_id": conversation_id})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_a_question_that_searches_is_embedded_while_its_conversation_is_read(stack: Stack, watch: Watch) -> None:
    watch.question = QUESTION
    answer = ask(stack, QUESTION)
    strategy = answer["meta"]["strategy"]
    assert watch.seen == [] and strategy["retrieval"] == "RAG_NEW_QUERY" and strategy["embed_ms"] > 0
    # The follow-up reuses the scope: its embedding starts before its conversation is read.
    watch.asked.clear()
    answer = ask(stack, QUESTION, answer["conversation_id"])
    assert watch.seen == [True] and answer["meta"]["strategy"]["retrieval"] == "RAG_REUSE"


@pytest.mark.parametrize("question", ["Thanks!", "Summarize that"])
def test_a_question_that_may_not_search_is_not_embedded_early(stack: Stack, watch: Watch, question: str) -> None:
    conversation = ask(stack, "Hello")["conversation_id"]
    watch.question = question
    ask(stack, question, conversation)
    assert watch.seen == [False]  # nothing requested before the read
    assert watch.asked.is_set() == (question != "Thanks!")  # "Summarize that" after one turn: searched, embedded after


def test_a_question_refused_for_load_starts_no_embedding(stack: Stack, watch: Watch,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    conversation = ask(stack, "Hello")["conversation_id"]  # its check reads the store: time to start work
    planning = stack.app("gateway").pipeline.planning
    monkeypatch.setattr(planning, "limit", 1)
    monkeypatch.setattr(planning, "in_flight", 1)  # one question being planned: the next is refused
    watch.question = "What did the Beta fund say about bonds?"
    reply = httpx.post(stack.http_url + "/api/chat/ask", headers=stack.headers, timeout=120,
                       json={"question": watch.question, "conversation_id": conversation})
    assert reply.status_code == 429 and reply.json()["error"]["code"] == "RESOURCE_EXHAUSTED"
    assert not watch.asked.is_set()


def test_a_question_near_the_planning_limit_is_embedded_only_once_it_has_its_slot(
        stack: Stack, watch: Watch, monkeypatch: pytest.MonkeyPatch) -> None:
    """3 of 4 planning slots taken: the question is let in, but its embedding waits for its own slot
    (one started earlier could be wasted on a question refused a moment later)."""
    conversation = ask(stack, "Hello")["conversation_id"]
    planning = stack.app("gateway").pipeline.planning
    monkeypatch.setattr(planning, "limit", 4)
    monkeypatch.setattr(planning, "in_flight", 3)
    watch.question = "What did the Beta fund say about bonds?"
    answer = ask(stack, watch.question, conversation)
    assert watch.seen == [False] and watch.asked.is_set()  # embedded after the read, once planning
    assert answer["meta"]["strategy"]["retrieval"] == "RAG_NEW_QUERY" and answer["meta"]["strategy"]["embed_ms"] > 0
