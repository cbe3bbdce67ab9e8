"""A book is cited by its place over the real stack: a Markdown book with chapters and sections, made
here and ingested through the retriever, then asked about through Gateway.Ask (gRPC), the SSE stream and
the OpenAI-compatible edge. Each citation event names the chapter, section and paragraph of the passage
it cites; the prompt a model receives labels the block with them, and so does the answer's stored sources
list. Asked what the book is about, with no summary made at ingest, the answer comes from the book's
table of contents."""
from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc, retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel, headers
from tests.books import CHAPTERS, FACTS, FILENAME, HORN, LENS, TITLE, Fact, book_bytes
from tests.conftest import answer_of, one, sse
from tests.fakes.gemini import FakeGemini, text
from tests.stack import Stack

TENANT = "books"
DOCUMENTS = {"data_sources": ["Documents"]}
BOOK_REF = f"documents/{FILENAME}"


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    """An admin of a tenant holding only the book, ingested without summaries."""
    key = stack.key(TENANT, "librarian", "admin")
    doc = retriever_pb2.Document(doc_id=FILENAME, collection="documents", content=book_bytes(), filename=FILENAME,
                                 summarize=False)
    with channel(stack.address("retriever"), bearer(key)) as ch:
        progress = list(retriever_pb2_grpc.RetrieverStub(ch).Ingest(iter([doc]), timeout=120))
    assert [p.error for p in progress if p.error] == [] and progress[-1].stage == retriever_pb2.INDEXED, progress
    assert not progress[-1].summarized
    return key


def holding(citations: list, fact: Fact) -> list:
    """The citations of the passage that states the fact (their snippets hold its words)."""
    return [c for c in citations if fact.answer in " ".join(c["snippet"].split())]


def place(citation: dict) -> tuple[str, str, int]:
    return citation["chapter"], citation["section"], citation["paragraph"]


@pytest.mark.parametrize("fact", [LENS, HORN], ids=["section-paragraph-3", "section-paragraph-2"])
def test_the_sse_citations_name_the_chapter_section_and_paragraph(stack: Stack, key: str, fact: Fact) -> None:
    events = sse(f"{stack.http_url}/api/chat/ask/stream", {"question": fact.question, **DOCUMENTS}, headers(key))
    assert fact.answer.split()[-1] in answer_of(events)
    citations = one(events, "citations")
    cited = holding(citations, fact)
    assert cited, citations
    assert {place(c) for c in cited} == {(fact.chapter, fact.section, fact.paragraph)}
    assert all(c["title"] == f"{FILENAME} › {fact.place}" for c in cited)


def test_grpc_citations_carry_the_place_and_the_stored_answer_keeps_it(stack: Stack, key: str) -> None:
    with channel(stack.address("gateway"), bearer(key)) as ch:
        events = list(gateway_pb2_grpc.GatewayStub(ch).Ask(gateway_pb2.AskRequest(
            question=LENS.question, data_sources=["Documents"]), timeout=60))
    [citations] = [e.citations.items for e in events if e.HasField("citations")]
    cited = [c for c in citations if LENS.answer in " ".join(c.snippet.split())]
    assert cited and {(c.chapter, c.section, c.paragraph) for c in cited} == {(LENS.chapter, LENS.section, 3)}
    conversation = [e.done.conversation_id for e in events if e.HasField("done")][0]
    with channel(stack.address("gateway"), bearer(key)) as ch:
        read = gateway_pb2_grpc.GatewayStub(ch).GetConversation(
            gateway_pb2.GetConversationRequest(conversation_id=conversation), timeout=30)
    again = [c for c in read.messages[-1].citations if LENS.answer in " ".join(c.snippet.split())]
    assert [(c.chapter, c.section, c.paragraph) for c in again] == [(LENS.chapter, LENS.section, 3)]
    stored = httpx.get(f"{stack.http_url}/api/conversations/{conversation}", headers=headers(key), timeout=30).json()
    answer = stored["messages"][-1]
    assert f"{FILENAME} › {LENS.place}" in answer["meta"]["sources"]
    assert [place(c) for c in holding(answer["citations"], LENS)] == [(LENS.chapter, LENS.section, 3)]


def test_a_chapters_opening_text_is_cited_by_chapter_and_paragraph_alone(stack: Stack, key: str) -> None:
    fact = FACTS[1]
    events = sse(f"{stack.http_url}/api/chat/ask/stream", {"question": fact.question, **DOCUMENTS}, headers(key))
    cited = holding(one(events, "citations"), fact)
    assert cited and {place(c) for c in cited} == {(CHAPTERS[1], "", 1)}
    assert cited[0]["title"] == f"{FILENAME} › {CHAPTERS[1]} · ¶1"


def test_the_openai_edge_lists_the_place_of_each_citation(stack: Stack, key: str) -> None:
    reply = httpx.post(f"{stack.http_url}/v1/chat/completions", headers=headers(key), timeout=60, json={
        "model": "ragmesh-documents", "messages": [{"role": "user", "content": HORN.question}]})
    assert reply.status_code == 200, reply.text
    citations = reply.json()["citations"]
    assert (HORN.chapter, HORN.section, HORN.paragraph) in {place(c) for c in citations}, citations


@pytest.fixture(scope="module")
def model(stack: Stack, key: str, gemini_gateway) -> Iterator[tuple[str, FakeGemini]]:
    url, fake, _ = gemini_gateway
    yield url, fake


def test_the_prompt_labels_each_book_block_with_its_place(model: tuple[str, FakeGemini], key: str) -> None:
    url, fake = model
    fake.stream(text("Eleven panels [1]."))
    reply = httpx.post(f"{url}/api/chat/ask", json={"question": LENS.question, **DOCUMENTS}, headers=headers(key),
                       timeout=60)
    assert reply.status_code == 200, reply.text
    body = fake.requests("streamGenerateContent")[-1].body
    prompt = "".join(p.get("text", "") for c in body["contents"] for p in c["parts"])
    labels = [line for line in prompt.splitlines() if line.startswith("[") and FILENAME in line]
    assert f"{FILENAME} › {LENS.place}" in " ".join(labels), prompt
    assert all(" › Chapter " in line and " · ¶" in line for line in labels), labels


def test_what_the_book_covers_is_answered_from_its_table_of_contents(stack: Stack, key: str) -> None:
    """No summary was made at ingest: the summary route answers from the chapter and section titles."""
    events = sse(f"{stack.http_url}/api/chat/ask/stream", {
        "question": "What is this book about?", "document_ids": [BOOK_REF], **DOCUMENTS}, headers(key))
    strategy = one(events, "strategy")
    assert strategy["route"] == "SUMMARY" and "table of contents" in strategy["reason"], strategy
    answer = answer_of(events)
    for title in (*CHAPTERS, "1.1 Fresnel lenses", "2.2 Logbooks"):
        assert title in answer, answer
    [cited] = one(events, "citations")
    assert cited["doc_id"] == FILENAME and cited["chunk_id"].endswith("#summary")
    assert TITLE not in answer.split("Sections:")[-1]  # the book's title is not one of its chapters


def test_notes_and_factsheets_have_no_place_and_keep_their_labels(stack: Stack) -> None:
    events = sse(f"{stack.http_url}/api/chat/ask/stream", {
        "question": "What did Kestrel do with its Brazil exposure in March 2024?"}, stack.headers)
    citations = one(events, "citations")
    assert citations and {place(c) for c in citations} == {("", "", 0)}
    assert all(c["title"].startswith(("Meeting note, ", "Kestrel")) and "›" not in c["title"] for c in citations)
