"""A question that reuses its scope's hits reuses the context built from them (issue 15: it is on the
path to the strategy event after the embedding); a question with other hits gets its own."""
from __future__ import annotations

import httpx
import pytest

from services.gateway import context
from tests.stack import Stack

QUESTION = "What did the Alpha fund say about emerging markets?"


def ask(stack: Stack, question: str, conversation_id: str = "") -> dict:
    reply = httpx.post(stack.http_url + "/api/chat/ask", headers=stack.headers, timeout=120,
                       json={"question": question, "conversation_id": conversation_id})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_a_reused_scope_reuses_its_context_and_new_hits_build_a_new_one(stack: Stack,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[list[str]] = []
    real_build = context.build

    def build(hits, budget):
        built.append([h.chunk.chunk_id for h in hits])
        return real_build(hits, budget)

    monkeypatch.setattr(context, "build", build)
    first = ask(stack, QUESTION)
    assert first["meta"]["strategy"]["retrieval"] == "RAG_NEW_QUERY" and len(built) == 1
    again = ask(stack, f"Remind me: {QUESTION}", first["conversation_id"])
    assert again["meta"]["strategy"]["retrieval"] == "RAG_REUSE" and len(built) == 1, "the context was reused"
    assert [c["chunk_id"] for c in again["citations"]] and {c["chunk_id"] for c in again["citations"]} <= set(built[0])
    # Other filters: a new search, other hits, a new context (and the scope's context is its own).
    other = ask(stack, f"{QUESTION} Only the Beta fund in 2024.", first["conversation_id"])
    assert other["meta"]["strategy"]["retrieval"] == "RAG_NEW_QUERY" and len(built) == 2
