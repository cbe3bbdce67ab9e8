"""Issue 6 through the SSE endpoint with all four services on loopback and the offline
extractive generator: routes, scope cache, question analysis, context budget, memory,
corrections, usage limits and fallbacks. Each decision is read from the strategy event. Calls carry the
stack's admin key (tenant DEMO), or a member key of DEMO where a test needs a user of its own; documents the
tests add go into DEMO through the retriever with the admin key."""
from __future__ import annotations

import asyncio

import httpx
import pytest

from ragmesh.v1 import common_pb2, retriever_pb2, retriever_pb2_grpc
from services.gateway.pipeline import NO_MATCH
from tests.auth import channel, headers
from tests.conftest import answer_of, one, sse
from tests.stack import DEMO, Stack

KESTREL = "Kestrel Emerging Markets"


def ask(stack: Stack, question: str, key: str = "", **extra) -> list[dict]:
    """Asks with `key`, or the stack's admin key."""
    return sse(stack.http_url + "/api/chat/ask/stream", {"question": question, **extra},
               headers(key) if key else stack.headers)


def retriever(stack: Stack) -> retriever_pb2_grpc.RetrieverStub:
    return retriever_pb2_grpc.RetrieverStub(channel(stack.address("retriever"), stack.metadata))


def gateway(stack: Stack):
    return stack.app("gateway")


@pytest.mark.parametrize("question, expected", [
    ("Hello!", "Hello! I'm ragmesh"),
    ("thanks a lot", "You're welcome"),
    ("What is your name?", "I'm ragmesh"),
])
def test_direct_route_answers_without_retrieval(stack: Stack, question: str, expected: str) -> None:
    before = stack.app("retriever").engine.searches
    events = ask(stack, question)
    strategy = one(events, "strategy")
    assert (strategy["route"], strategy["retrieval"], strategy["chunks"]) == ("DIRECT", "NO_RAG", 0)
    assert answer_of(events).startswith(expected)
    assert one(events, "citations") == []
    assert stack.app("retriever").engine.searches == before


def test_deep_route_takes_fifteen_chunks_at_threshold_0_6(stack: Stack) -> None:
    events = ask(stack, "Compare the net exposure changes at Harborview and Kestrel")
    strategy = one(events, "strategy")
    assert strategy["route"] == "DEEP" and strategy["k"] == 15
    assert strategy["threshold_layer"] in (1, 2, 3)
    assert 5 < strategy["chunks"] <= 15


def test_specific_and_general_questions_take_5_and_10_chunks(stack: Stack) -> None:
    specific = one(ask(stack, "What was Meridian's return in July 2024?"), "strategy")
    general = one(ask(stack, "Give me an overview of the main themes across funds"), "strategy")
    assert (specific["route"], specific["k"]) == ("SPECIFIC", 5)
    assert (general["route"], general["k"]) == ("SPECIFIC", 10)
    assert general["chunks"] == 10


def test_lookup_route_fetches_the_numbered_item(stack: Stack) -> None:
    stub = retriever(stack)
    docs = [retriever_pb2.Document(doc_id=f"faq-{n}", collection="documents", text=text,
                                   metadata={"question_number": str(n)})
            for n, text in ((5, "Question 5: What is the fee? Answer: 1.5% management fee."),
                            (6, "Question 6: What is the lock-up? Answer: a one-year soft lock-up."),
                            (7, "Question 7: Who is the auditor? Answer: Pryor & Lane."))]
    assert all(p.error == "" for p in stub.Ingest(iter(docs), timeout=60))
    events = ask(stack, "Explain question 6", data_sources=["Documents"])
    strategy = one(events, "strategy")
    assert strategy["route"] == "LOOKUP"
    citations = one(events, "citations")
    assert citations and {c["doc_id"] for c in citations} == {"faq-6"}
    assert "lock-up" in answer_of(events)


def test_scope_cache_hit_miss_ttl_and_filter_change(stack: Stack) -> None:
    first = one(ask(stack, "What did Kestrel do with its Brazil exposure?"), "strategy")
    assert first["reason"].endswith("no cached scope for this conversation")
    conv = first["conversation_id"]
    follow_up = "What did Kestrel say about the Brazil exposure cut?"  # no transform pattern: never NO_RAG
    hit = one(ask(stack, follow_up, conversation_id=conv), "strategy")
    assert hit["retrieval"] == "RAG_REUSE" and hit["cache_hit"]
    cache = gateway(stack).pipeline.cache
    real_clock = cache.clock
    try:
        cache.clock = lambda: real_clock() + 16 * 60  # 15-minute TTL passed
        expired = one(ask(stack, follow_up, conversation_id=conv), "strategy")
        assert expired["retrieval"] == "RAG_NEW_QUERY" and not expired["cache_hit"]
        assert "no cached scope" in expired["reason"]
    finally:
        cache.clock = real_clock
    changed = one(ask(stack, follow_up, conversation_id=conv,
                      start_date="2024-01-01", end_date="2024-06-30"), "strategy")
    assert changed["retrieval"] == "RAG_NEW_QUERY" and "filters changed" in changed["reason"]


def test_time_hints_and_fund_names_become_filters(stack: Stack) -> None:
    events = ask(stack, "What did Kestrel do in March 2024?")
    strategy = one(events, "strategy")
    assert strategy["time_hint"] == "in March 2024"
    assert (strategy["filter"]["start_date"], strategy["filter"]["end_date"]) == ("2024-03-01", "2024-03-31")
    assert strategy["detected_funds"] == [KESTREL] and strategy["filter"]["in"] == {"fund_name": [KESTREL]}
    citations = one(events, "citations")
    assert citations and all(c["metadata"]["fund_name"] == KESTREL and c["date"].startswith("2024-03")
                             for c in citations)
    chosen = one(ask(stack, "What did Kestrel do in March 2024?", selected_funds=["Northwind Global Macro Fund"]),
                 "strategy")
    assert chosen["detected_funds"] == [], "a fund the user selected wins over one read from the question"


def test_context_budget_bounds_the_context(stack: Stack) -> None:
    budgets = gateway(stack).pipeline.planner.budgets
    saved = budgets.settings
    try:
        budgets.settings, budgets._known = saved.replace(context_char_budget=900), {}
        small = one(ask(stack, "Give me an overview of the main themes across funds"), "strategy")
    finally:
        budgets.settings, budgets._known = saved, {}
    large = one(ask(stack, "Give me an overview of the main themes across funds"), "strategy")
    assert 0 < small["context_chars"] <= 900 < large["context_chars"] <= 12_000


def test_factsheets_are_grouped_one_block_per_factsheet(stack: Stack) -> None:
    events = ask(stack, "Kestrel factsheet performance, holdings and commentary for 2024-06-30",
                 data_sources=["Factsheet"], selected_funds=[KESTREL])
    citations = one(events, "citations")
    factsheet_ids = [c["metadata"]["factsheet_id"] for c in citations]
    assert citations and len(factsheet_ids) == len(set(factsheet_ids)), "one citation per factsheet"
    assert all(c["title"].startswith(f"{KESTREL} Factsheet (") for c in citations)
    assert all("full_document" not in c["metadata"] for c in citations)


def test_background_summary_and_memory_embedding(stack: Stack) -> None:
    gw = gateway(stack)
    saved = gw.memory.history_char_budget
    user = "user-memory"
    key = stack.key(DEMO, user)
    try:
        gw.memory.history_char_budget = 10  # turn 1 stops fitting once turn 2 is in
        conv = one(ask(stack, "What did Kestrel do with its Brazil exposure?", key),
                   "strategy")["conversation_id"]
        ask(stack, "Who joined Harborview as head of short research?", key, conversation_id=conv)
        stack.call(gw.memory.idle())
    finally:
        gw.memory.history_char_budget = saved
    summary = gw.store.conversation_summary(conv)
    assert "Brazil" in summary or "Lindgren" in summary
    # conversation memory is read for its author only: as the gateway reads it, for the user
    as_user = retriever_pb2_grpc.RetrieverStub(channel(stack.address("retriever"), stack.service_metadata(DEMO, user)))
    mine = as_user.Search(retriever_pb2.SearchRequest(query="Brazil exposure", collections=["conversations"],
                                                      filter=common_pb2.Filter(equals={"user_id": user})), timeout=10)
    assert {h.chunk.metadata["role"] for h in mine.hits} == {"turn"}  # a question and its answer
    events = ask(stack, "What did I ask about Brazil?", key, data_sources=["Conversation memory"])
    assert one(events, "strategy")["collections"] == ["conversations"]
    citations = one(events, "citations")
    assert citations and all(c["collection"] == "conversations" and c["metadata"]["user_id"] == user
                             for c in citations)
    other = one(ask(stack, "What did I ask about Brazil?", stack.key(DEMO, "someone"),
                    data_sources=["Conversation memory"]), "strategy")
    assert other["chunks"] == 0, "memory is per user"


def test_corrections_are_recorded_and_used(stack: Stack) -> None:
    user = "user-corrections"
    key = stack.key(DEMO, user)
    events = ask(stack, "Who is Kestrel's lead portfolio manager?", key)
    done = events[-1]
    assert done["done"] is True
    conv, message_id = done["conversation_id"], done["message_id"]
    reply = httpx.post(stack.http_url + "/api/corrections", json={
        "conversation_id": conv, "message_id": message_id,
        "correction": "Kestrel's lead PM is Tomás Herrera."}, headers=headers(key))
    assert reply.status_code == 200 and reply.json()["correction_id"]
    stored = gateway(stack).store.corrections(DEMO, user)
    assert stored[0].question == "Who is Kestrel's lead portfolio manager?" and stored[0].wrong_answer
    later = one(ask(stack, "Who runs Kestrel?", key), "strategy")
    assert later["corrections"] == 1
    assert one(ask(stack, "Who runs Kestrel?", stack.key(DEMO, "another-user")), "strategy")["corrections"] == 0
    bad = httpx.post(stack.http_url + "/api/corrections", json={"correction": " "}, headers=headers(key))
    assert bad.status_code == 400 and bad.json()["error"]["message"].startswith("correction")


def test_monthly_usage_limit_is_a_429(stack: Stack) -> None:
    limits = gateway(stack).pipeline.limits
    saved = limits.max_messages
    heavy = stack.key(DEMO, "heavy-user")
    try:
        limits.max_messages = 2
        for _ in range(2):
            assert one(ask(stack, "hello", heavy), "done")
        reply = httpx.post(stack.http_url + "/api/chat/ask/stream", json={"question": "hello"}, headers=headers(heavy))
        assert reply.status_code == 429
        error = reply.json()["error"]
        assert error["code"] == "RESOURCE_EXHAUSTED" and "2 of 2 messages" in error["message"]
        assert one(ask(stack, "hello", stack.key(DEMO, "light-user")), "done"), "limits are per user"
    finally:
        limits.max_messages = saved


def test_retrieval_deadline_answers_with_what_arrived(stack: Stack) -> None:
    """One collection misses the deadline: the answer uses the other and says so. None answers in time:
    an UNAVAILABLE error, never "no notes match"."""
    planner = gateway(stack).pipeline.planner
    engine = stack.app("retriever").engine
    fast_search, saved = engine.search, planner.settings
    slow = {"factsheets"}

    async def slow_search(query):
        if set(query.collections) & slow:
            await asyncio.sleep(1.5)  # a retriever that misses the gateway's deadline
        return await fast_search(query)

    try:
        planner.settings, engine.search = saved.replace(retrieval_timeout_s=1.0), slow_search
        events = ask(stack, "What did Kestrel do with its Brazil exposure?")
        slow.add("meeting_notes")
        failed = ask(stack, "What did Kestrel do with its Brazil exposure?")
    finally:
        planner.settings, engine.search = saved, fast_search
    strategy = one(events, "strategy")
    assert strategy["unavailable"] == ["factsheets"] and "using what arrived" in strategy["reason"]
    assert answer_of(events) and answer_of(events) != NO_MATCH
    assert failed[-1]["error"]["code"] == "UNAVAILABLE" and not [e for e in failed if "content" in e]


def test_no_results_says_there_are_no_notes(stack: Stack) -> None:
    """Said first; the fund's recent notes follow as context (tests/integration/test_fallback_recent_notes.py)."""
    events = ask(stack, "What did Kestrel do?", start_date="2030-01-01", end_date="2030-12-31")
    assert answer_of(events).startswith(NO_MATCH.split(",")[0] + ", so here are the most recent notes")


@pytest.mark.slow
def test_embedder_down_means_keyword_search_flagged(stack: Stack) -> None:
    """Last in the module: restarts the embedder."""
    port = stack.hosts["embedder"].port
    stack.stop_service("embedder")
    try:
        events = ask(stack, "What did Kestrel do with its Brazil exposure?")  # a new conversation
        strategy = one(events, "strategy")
        assert strategy["dense_skipped"] and "keyword search only" in strategy["reason"]
        assert "12% to 4%" in answer_of(events)
    finally:
        stack.start_service("embedder", port)


def test_summary_route_answers_from_the_pre_computed_summary(stack: Stack) -> None:
    stub = retriever(stack)
    paragraphs = [
        f"# Part {i}\n\n" + " ".join(f"The committee reviewed liquidity terms for sleeve {i} in meeting {j}, "
                                     f"noting redemption gates of {i + j}% and a notice period of {30 + j} days."
                                     for j in range(8))
        for i in range(1, 4)
    ]
    long_doc = retriever_pb2.Document(doc_id="policy-book", collection="documents", text="\n\n".join(paragraphs),
                                      filename="policy.md", summarize=True)
    short_doc = retriever_pb2.Document(doc_id="memo", collection="documents", text="A short memo about fees.",
                                       summarize=False)
    progress = list(stub.Ingest(iter([long_doc, short_doc]), timeout=120))
    assert [p.error for p in progress if p.error] == []
    assert any(p.summarized for p in progress if p.doc_id == "policy-book")

    before = stack.app("retriever").engine.searches
    events = ask(stack, "Summarize this document", data_sources=["Documents"], document_ids=["documents/policy-book"])
    strategy = one(events, "strategy")
    assert (strategy["route"], strategy["retrieval"]) == ("SUMMARY", "NO_RAG")
    assert "summary of documents/policy-book" in strategy["reason"]
    assert stack.app("retriever").engine.searches == before, "a summary needs no search"
    assert "liquidity" in answer_of(events) and one(events, "citations")

    fallback = one(ask(stack, "Summarize this document", data_sources=["Documents"], document_ids=["memo"]), "strategy")
    assert fallback["route"] == "SPECIFIC" and "no summary" in fallback["reason"]
    missing = httpx.post(stack.http_url + "/api/chat/ask/stream",
                         json={"question": "Summarize this document", "document_ids": ["documents/nope"]},
                         headers=stack.headers)
    assert missing.status_code == 200 and "not in" in missing.text
