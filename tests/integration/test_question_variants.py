"""The question-number search variants: "explain question 6" is searched as itself and as "question 6",
"problem 6" and "6." (fused by the retriever), the ways a worksheet with no question_number metadata to look
up may number its items. Observed at the index: the queries each of the collection's searches was given."""
from __future__ import annotations

import pytest

from ragmesh.v1 import retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel, headers
from tests.conftest import answer_of, one, sse
from tests.stack import Stack

WORKSHEET = ("Problem 5. Define the modified duration of a bond.\n\n"
             "Problem 6. Compute the convexity of a ten-year zero-coupon bond.\n\n"
             "7. Explain why carry trades unwind in a volatility spike.")


@pytest.fixture(scope="module")
def tenant_key(stack: Stack) -> str:
    """A tenant of its own holding only the worksheet."""
    key = stack.key("variants", "teacher", "admin")
    stub = retriever_pb2_grpc.RetrieverStub(channel(stack.address("retriever"), bearer(key)))
    doc = retriever_pb2.Document(doc_id="worksheet", collection="documents", text=WORKSHEET, filename="sheet.md")
    assert [p.error for p in stub.Ingest(iter([doc]), timeout=120) if p.error] == []
    return key


def test_a_numbered_question_is_searched_with_its_variants(stack: Stack, tenant_key: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    registry = stack.app("retriever").engine.registry
    searched: list[tuple[str, list[str]]] = []
    search = registry.search

    def recording(name, queries, *args, **kwargs):
        searched.append((name, list(queries)))
        return search(name, queries, *args, **kwargs)

    monkeypatch.setattr(registry, "search", recording)
    events = sse(stack.http_url + "/api/chat/ask/stream",
                 {"question": "Explain question 6", "data_sources": ["Documents"]}, headers(tenant_key))
    assert one(events, "strategy")["route"] == "LOOKUP"
    asked = [queries for name, queries in searched if name == "documents"]
    assert asked and all({"question 6", "problem 6", "6."} <= set(q) for q in asked), asked
    assert asked[-1][0] == "Explain question 6", "the question itself first"
    assert "[1]" in answer_of(events), "answered from the worksheet"
