"""Every retriever booster is reachable from a question: the tests ask through POST /api/chat/ask
(or Gateway.Ask) and read the Search requests the stack's retriever received (its engine is wrapped
for the test, so each query is recorded as the servicer turned it into a SearchQuery, with what it
found): the route's thresholds, 003's time window from the question or the context_window field,
001's boosts on the conversation memory, 003's tag boost and authoritative tie-break on documents,
002's linear fusion under the notes contract."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import grpc
import httpx
import pytest

from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc, retriever_pb2, retriever_pb2_grpc
from services.retriever.search import SearchOutcome, SearchQuery
from tests.auth import bearer, channel, headers
from tests.stack import DEMO, Stack


@dataclass
class Searches:
    """What the retriever was asked, and what it answered, in order."""

    seen: list[tuple[SearchQuery, SearchOutcome]] = field(default_factory=list)

    def of(self, collection: str) -> list[tuple[SearchQuery, SearchOutcome]]:
        return [(q, o) for q, o in self.seen if q.collections == [collection]]

    def query(self, collection: str) -> SearchQuery:
        found = self.of(collection)
        assert len(found) == 1, [q.collections for q, _ in self.seen]
        return found[0][0]


@pytest.fixture
def searches(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Searches:
    engine = stack.app("retriever").engine
    search = engine.search
    recorded = Searches()

    async def recording(query: SearchQuery) -> SearchOutcome:
        outcome = await search(query)
        recorded.seen.append((query, outcome))
        return outcome

    monkeypatch.setattr(engine, "search", recording)
    return recorded


def ask(url: str, key_headers: dict[str, str], question: str, **extra) -> dict:
    reply = httpx.post(url + "/api/chat/ask", json={"question": question, **extra}, headers=key_headers, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


@pytest.mark.parametrize(("question", "route", "threshold"), [
    ("What did Kestrel do with its Brazil exposure?", "SPECIFIC", 0.7),
    ("What are the main themes across the funds?", "SPECIFIC", 0.5),
    ("Compare how Harborview and Kestrel managed risk", "DEEP", 0.6),
])
def test_each_route_sends_its_similarity_thresholds(stack: Stack, searches: Searches, question: str, route: str,
                                                    threshold: float) -> None:
    strategy = ask(stack.http_url, stack.headers, question)["meta"]["strategy"]
    assert strategy["route"] == route
    for collection in ("meeting_notes", "factsheets"):
        b = searches.query(collection).boosters
        assert (b.min_similarity, b.fallback_similarity) == (pytest.approx(threshold), pytest.approx(0.3))
        assert b.expand_parents and b.time_window == ""
        assert (b.recent_boost, b.same_conversation_boost, b.tag_boost, b.prefer_authoritative) == (0, 0, 0, False), \
            "001's and 003's boosters belong to the memory and the documents"
        assert searches.query(collection).fusion == "RRF"


@pytest.mark.parametrize(("question", "today", "window"), [
    ("What was discussed in the meetings this week?", dt.date(2025, 12, 5), "1w"),
    ("Which meetings happened in the last 24 hours?", dt.date(2025, 12, 4), "24h"),
    ("Any meetings in the past two days?", dt.date(2025, 12, 4), "48h"),
])
def test_a_window_in_the_question_is_the_retrievers_window_filter(stack: Stack, searches: Searches,
                                                                  monkeypatch: pytest.MonkeyPatch, question: str,
                                                                  today: dt.date, window: str) -> None:
    monkeypatch.setattr(stack.app("gateway").pipeline.planner, "today", lambda: today)
    body = ask(stack.http_url, stack.headers, question, data_sources=["Meeting Notes"])
    strategy = body["meta"]["strategy"]
    assert strategy["time_window"] == window and strategy["time_hint"] in question
    assert (strategy["filter"]["start_date"], strategy["filter"]["end_date"]) == ("", ""), "a window, not a date range"
    query = searches.query("meeting_notes")
    assert (query.boosters.time_window, query.boosters.now) == (window, today.isoformat())
    _, outcome = searches.of("meeting_notes")[0]
    oldest = today - dt.timedelta(days={"24h": 1, "48h": 2, "1w": 7}[window])
    assert outcome.hits and all(oldest.isoformat() <= h.chunk.date <= today.isoformat() for h in outcome.hits)
    assert {c["doc_id"] for c in body["citations"]} <= {"mn-kestrel-2025-12-03"}


def test_context_window_field_is_sent_and_overrides_the_question(stack: Stack, searches: Searches) -> None:
    strategy = ask(stack.http_url, stack.headers, "What did Kestrel do this week?", context_window="48h",
                   data_sources=["Meeting Notes"])["meta"]["strategy"]
    assert strategy["time_window"] == "48h"
    # The window holds no note: the search within it comes first, then the recent notes said as such.
    windowed, recent = [q for q, _ in searches.of("meeting_notes")]
    assert windowed.boosters.time_window == "48h" and not recent.boosters.time_window
    assert any("most recent" in r for r in strategy["relaxed"]), strategy

    searches.seen.clear()
    strategy = ask(stack.http_url, stack.headers, "What did Kestrel do this week?", context_window="all",
                   data_sources=["Meeting Notes"])["meta"]["strategy"]
    assert strategy["time_window"] == "all" and searches.query("meeting_notes").boosters.time_window == ""

    with channel(stack.address("gateway"), stack.metadata) as ch:
        events = list(gateway_pb2_grpc.GatewayStub(ch).Ask(gateway_pb2.AskRequest(
            question="Kestrel Brazil exposure", context_window="1w", data_sources=["Meeting Notes"]), timeout=60))
    assert [e.strategy.time_window for e in events if e.HasField("strategy")] == ["1w"]


@pytest.mark.parametrize(("body", "field_name"), [
    ({"context_window": "2d"}, "context_window"),
    ({"context_window": 24}, "context_window"),
    ({"persona": "x" * 501}, "persona"),
    ({"persona": ["terse"]}, "persona"),
])
def test_bad_persona_or_context_window_is_400_naming_the_field(stack: Stack, body: dict, field_name: str) -> None:
    reply = httpx.post(stack.http_url + "/api/chat/ask", json={"question": "Kestrel?", **body}, headers=stack.headers)
    assert reply.status_code == 400 and reply.json()["error"]["message"].startswith(field_name), reply.text


@pytest.mark.parametrize(("fields", "field_name"), [
    ({"context_window": "yesterday"}, "context_window"), ({"persona": "x" * 501}, "persona"),
])
def test_bad_persona_or_context_window_over_grpc_is_invalid_argument(stack: Stack, fields: dict,
                                                                     field_name: str) -> None:
    with channel(stack.address("gateway"), stack.metadata) as ch:
        with pytest.raises(grpc.RpcError) as err:
            list(gateway_pb2_grpc.GatewayStub(ch).Ask(gateway_pb2.AskRequest(question="Kestrel?", **fields),
                                                      timeout=30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith(field_name)


def test_new_fields_need_a_credential(stack: Stack) -> None:
    reply = httpx.post(stack.http_url + "/api/chat/ask", json={"question": "Kestrel?", "persona": "terse",
                                                               "context_window": "1w"})
    assert reply.status_code == 401


def test_conversation_memory_gets_the_recent_and_same_conversation_boosts(stack: Stack, searches: Searches) -> None:
    gateway = stack.app("gateway")
    other = ask(stack.http_url, stack.headers, "What did Kestrel do with its Brazil exposure?")["conversation_id"]
    this = ask(stack.http_url, stack.headers, "What did Kestrel do with its Brazil exposure?")["conversation_id"]
    stack.call(gateway.memory.idle())  # both conversations' messages are in the memory
    searches.seen.clear()
    ask(stack.http_url, stack.headers, "Kestrel Brazil exposure", conversation_id=this,
        data_sources=["Conversation memory", "Meeting Notes"])
    memory = searches.query("conversations").boosters
    assert (memory.recent_boost, memory.recent_days) == (pytest.approx(0.1), 7)
    assert (memory.conversation_id, memory.same_conversation_boost) == (this, pytest.approx(0.2))
    notes = searches.query("meeting_notes").boosters
    assert (notes.recent_boost, notes.same_conversation_boost, notes.conversation_id) == (0, 0, "")

    [(_, outcome)] = searches.of("conversations")
    by_conversation = {c: [h for h in outcome.hits if h.chunk.metadata["conversation_id"] == c] for c in (this, other)}
    assert by_conversation[this] and by_conversation[other]
    assert all("+0.2 same conversation" in h.boosts for h in by_conversation[this])
    assert not any("+0.2 same conversation" in h.boosts for h in by_conversation[other])
    assert all(any(b.startswith("+0.1 recent") for b in h.boosts) for h in outcome.hits), "today's messages"


@pytest.fixture(scope="module")
def ranking_tenant(stack: Stack) -> dict[str, str]:
    """A tenant of its own holding an uploaded document and a transcript that say the same thing."""
    key = stack.key("q2-ranking", "analyst", "admin")
    text = "The vendor review moved the platform migration to the third quarter after the budget cut."
    docs = [
        retriever_pb2.Document(doc_id="review.pdf", collection="documents", text=text, date="2025-06-01",
                               metadata={"filetype": "pdf"}),
        retriever_pb2.Document(doc_id="call-1", collection="documents", text=text, date="2025-06-01",
                               metadata={"type": "transcript", "tags": "migration, budget"}),
    ]
    with channel(stack.address("retriever"), bearer(key)) as ch:
        progress = list(retriever_pb2_grpc.RetrieverStub(ch).Ingest(iter(docs), timeout=120))
    assert [p.error for p in progress if p.error] == []
    return headers(key)


def test_documents_get_the_tag_boost_and_the_authoritative_tie_break(stack: Stack, searches: Searches,
                                                                    ranking_tenant: dict[str, str]) -> None:
    body = ask(stack.http_url, ranking_tenant, "When is the platform migration?",
               data_sources=["Documents", "Meeting Notes"])
    documents = searches.query("documents").boosters
    assert (documents.tag_boost, documents.prefer_authoritative) == (pytest.approx(0.1), True)
    notes = searches.query("meeting_notes").boosters
    assert (notes.tag_boost, notes.prefer_authoritative) == (0, False)

    [(_, outcome)] = searches.of("documents")
    transcript, upload = (next(h for h in outcome.hits if h.chunk.doc_id == d) for d in ("call-1", "review.pdf"))
    assert "tags x1.10 (1 matching)" in transcript.boosts, "the question shares 'migration' with one tag"
    assert "authoritative" in upload.boosts
    assert body["citations"][0]["doc_id"] == "call-1", "the tag boost lifts the matching transcript"


def test_the_notes_contract_searches_with_linear_fusion(stack: Stack, searches: Searches) -> None:
    """002's notes use case: asked for in 002's contract (`format: notes`), every search fuses linearly."""
    body = ask(stack.http_url, stack.headers, "What did Kestrel do with its Brazil exposure?", format="notes")
    assert body["meta"]["retrieval"]["strategy"].startswith("hybrid")
    stored = httpx.get(f"{stack.http_url}/api/conversations/{body['conversation_id']}", headers=stack.headers)
    assert "linear fusion" in stored.json()["messages"][-1]["strategy"]["reason"]
    for collection in ("meeting_notes", "factsheets"):
        query = searches.query(collection)
        assert query.fusion == "LINEAR"
        assert query.weights() == (pytest.approx(0.6), pytest.approx(0.25), pytest.approx(0.15))
        assert query.boosters.min_similarity == pytest.approx(0.7)
