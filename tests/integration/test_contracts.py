"""The seeds' contracts, reached from a question (issue 13 item 4): 002's JSON response (`"format":
"notes"` on POST /api/chat/ask); 000's context headers in the prompt the model reads; 000's stop flow
(stopped before any content, the question is not kept); 001's numbered-question lookup, all the
questions when none is named; 004's chunk map and the strategy kept when a conversation is read back,
over HTTP and gRPC. Each as its owner, as another tenant, without a credential and with garbage."""
from __future__ import annotations

import json
import re
import time
from urllib.parse import quote

import grpc
import httpx
import pytest

from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc, retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel, headers
from tests.conftest import one, sse
from tests.fakes.gemini import FakeGemini, text, thought
from tests.integration.test_gateway_gemini import sent_prompt
from tests.stack import DEMO, Stack

QUESTION = "What did Kestrel do with its Brazil exposure in March 2024?"
NUMBERED = "contracts-numbered"


@pytest.fixture(scope="module")
def analyst(stack: Stack) -> str:
    return stack.key(DEMO, "contracts-analyst")


@pytest.fixture(scope="module")
def outsider(stack: Stack) -> str:
    return stack.key("contracts-other", "eve", "admin")


def _post(stack: Stack, key: str, body: dict) -> httpx.Response:
    return httpx.post(stack.http_url + "/api/chat/ask", json=body, headers=headers(key), timeout=60)


def _gateway(address: str, key: str) -> gateway_pb2_grpc.GatewayStub:
    return gateway_pb2_grpc.GatewayStub(channel(address, bearer(key)))


# -- 002's response contract --------------------------------------------------------------------------

def test_the_notes_format_answers_in_002s_contract(stack: Stack, analyst: str) -> None:
    ours = _post(stack, analyst, {"question": QUESTION}).json()
    reply = _post(stack, analyst, {"question": QUESTION, "format": "notes"})
    assert reply.status_code == 200, reply.text
    notes = reply.json()
    assert set(notes) == {"answer", "citations", "conversation_id", "meta"}
    assert notes["citations"], notes
    for c in notes["citations"]:
        assert re.fullmatch(r"N\d+", c["cid"]) and f"[{c['cid']}]" in notes["answer"]
        assert {"cid", "noteId", "chunkId", "createdAt", "snippet", "score"} <= set(c)
        assert c["noteId"].startswith(("mn-kestrel", "fs-kestrel")) and c["chunkId"] and c["snippet"]  # any source
        assert re.fullmatch(r"2024-03-\d\dT00:00:00\.000Z", c["createdAt"]) and c["score"] > 0
    assert not re.search(r"\[\d+\]", notes["answer"]), "every [n] became [Nn]"
    # The same answer and sources as ragmesh's own format, only shaped as 002's.
    assert [c["noteId"] for c in notes["citations"]] == [c["doc_id"] for c in ours["citations"]]
    assert re.sub(r"\[N(\d+)\]", r"[\1]", notes["answer"]) == ours["answer"]
    retrieval = notes["meta"]["retrieval"]
    assert set(retrieval) == {"k", "strategy", "candidateCount", "rerankCount", "timeMs"}
    assert (retrieval["k"], retrieval["strategy"], retrieval["rerankCount"]) == (5, "hybrid", 0)
    assert retrieval["candidateCount"] == ours["meta"]["strategy"]["candidate_count"] > 0
    assert isinstance(retrieval["timeMs"], int) and notes["meta"]["model"] == "extractive"


def test_the_notes_format_reuses_the_conversation_and_says_so(stack: Stack, analyst: str) -> None:
    first = _post(stack, analyst, {"question": "What did Kestrel do with its Brazil exposure?", "format": "notes"}).json()
    again = _post(stack, analyst, {"question": "What did Kestrel say about the Brazil exposure cut?",
                                   "conversation_id": first["conversation_id"], "format": "notes"}).json()
    assert again["meta"]["retrieval"]["strategy"] == "hybrid_cached"


@pytest.mark.parametrize("path", ["/api/chat/ask", "/api/chat/ask/stream"])
@pytest.mark.parametrize("value,why", [("xml", "got 'xml'"), ("NOTES", "got 'NOTES'"), (5, "got 5"),
                                       (["notes"], "got ['notes']"), ("x" * 5000, "must be one of")])
def test_garbage_formats_are_400_naming_the_field(stack: Stack, analyst: str, path: str, value, why: str) -> None:
    before = len(httpx.get(stack.http_url + "/api/conversations", headers=headers(analyst)).json()["conversations"])
    reply = httpx.post(stack.http_url + path, json={"question": QUESTION, "format": value}, headers=headers(analyst),
                       timeout=30)
    assert reply.status_code == 400, reply.text[:300]
    message = reply.json()["error"]["message"]
    assert message.startswith("format") and why in message and len(message) < 300
    after = len(httpx.get(stack.http_url + "/api/conversations", headers=headers(analyst)).json()["conversations"])
    assert after == before, "nothing stored"


def test_the_notes_format_refuses_another_tenants_conversation_and_no_credential(stack: Stack, analyst: str,
                                                                                 outsider: str) -> None:
    mine = _post(stack, analyst, {"question": QUESTION, "format": "notes"}).json()["conversation_id"]
    theirs = _post(stack, outsider, {"question": QUESTION, "format": "notes", "conversation_id": mine})
    assert theirs.status_code == 404 and theirs.json()["error"]["code"] == "NOT_FOUND"
    unknown = _post(stack, outsider, {"question": QUESTION, "format": "notes", "conversation_id": "no-such-id"})
    assert theirs.json()["error"]["message"].replace(mine, "no-such-id") == unknown.json()["error"]["message"]
    anonymous = httpx.post(stack.http_url + "/api/chat/ask", json={"question": QUESTION, "format": "notes"})
    assert anonymous.status_code == 401


# -- 000's context headers ----------------------------------------------------------------------------

def test_the_prompt_groups_the_context_under_000s_headers(gemini_gateway, stack: Stack) -> None:
    url, fake, address = gemini_gateway
    fake.stream(text("Kestrel cut Brazil [1]."))
    # A Gemini model's context budget (its window) has room for both kinds of block.
    sse(url + "/api/chat/ask/stream", {"question": "Kestrel Brazil exposure, performance and holdings in March "
                                                   "2024"}, stack.headers)
    _, prompt = sent_prompt(fake)
    notes, sheets = prompt.find("=== MEETING NOTES (RAG Retrieved) ==="), prompt.find(
        "=== RELEVANT FACTSHEET DATA (RAG Retrieved) ===")
    assert 0 < notes < sheets, "meeting notes first, then factsheets, each under its header"
    found = re.search(r"Found (\d+) unique factsheet\(s\) with (\d+) relevant section\(s\)", prompt)
    assert found and int(found[1]) == prompt.count("Matching Sections (") >= 1
    assert int(found[2]) == sum(int(n) for n in re.findall(r"Matching Sections \((\d+)\)", prompt))
    meeting_blocks = prompt[notes:sheets].count("\nManager: ")
    assert meeting_blocks >= 1 and prompt[notes:sheets].count("\nChunk Type: ") == meeting_blocks


# -- 000's stop flow ----------------------------------------------------------------------------------

def _stopped_after_thinking(address: str, key: str, conversation_id: str = "") -> list[gateway_pb2.ChatEvent]:
    """Asks; once the model has only thought (no content yet), stops the answer over gRPC."""
    stub = _gateway(address, key)
    events = []
    for event in stub.Ask(gateway_pb2.AskRequest(question=QUESTION, conversation_id=conversation_id), timeout=60):
        events.append(event)
        if event.WhichOneof("event") == "thinking":
            conv = next(e.strategy.conversation_id for e in events if e.HasField("strategy"))
            assert stub.Stop(gateway_pb2.StopRequest(conversation_id=conv), timeout=10).stopped
    return events


def test_a_question_stopped_before_any_content_is_not_kept(gemini_gateway, stack: Stack) -> None:
    _, fake, address = gemini_gateway
    key = stack.key(DEMO, "contracts-stopper")
    fake.stream(thought("Looking at March."), text("never sent"), hold_after=1)
    events = _stopped_after_thinking(address, key)
    done = events[-1].done
    assert done.stopped and done.message_id == "" and not any(e.HasField("content") for e in events)
    stub = _gateway(address, key)
    with pytest.raises(grpc.RpcError) as gone:  # its only question removed: nothing is left of it
        stub.GetConversation(gateway_pb2.GetConversationRequest(conversation_id=done.conversation_id), timeout=10)
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND
    assert done.conversation_id not in [c.conversation_id for c in stub.ListConversations(
        gateway_pb2.ListConversationsRequest(), timeout=10).conversations]


def test_a_stopped_question_leaves_the_earlier_turns_as_they_were(gemini_gateway, stack: Stack) -> None:
    url, fake, address = gemini_gateway
    key = stack.key(DEMO, "contracts-stopper-2")
    fake.stream(text("Kestrel cut Brazil to 4% [1]."))
    first = sse(url + "/api/chat/ask/stream", {"question": QUESTION}, headers(key))
    conv = first[-1]["conversation_id"]
    fake.stream(thought("Again."), text("never sent"), hold_after=1)
    assert _stopped_after_thinking(address, key, conv)[-1].done.stopped
    messages = httpx.get(f"{url}/api/conversations/{conv}", headers=headers(key)).json()["messages"]
    assert [(m["role"], m["content"]) for m in messages] == [("user", QUESTION),
                                                             ("assistant", "Kestrel cut Brazil to 4% [1].")]


def test_a_client_leaving_before_any_content_leaves_no_question(gemini_gateway, stack: Stack) -> None:
    url, fake, _ = gemini_gateway
    key = stack.key(DEMO, "contracts-leaver")
    fake.stream(thought("Hmm."), text("never sent"), hold_after=1)
    conv = ""
    with httpx.stream("POST", url + "/api/chat/ask/stream", json={"question": QUESTION}, headers=headers(key),
                      timeout=30) as resp:
        for line in resp.iter_lines():
            event = json.loads(line[len("data: "):]) if line else {}
            conv = event.get("strategy", {}).get("conversation_id", conv)
            if "thinking" in event:
                break  # leave: the connection closes
    assert conv and fake.hung_up.wait(10)
    deadline = time.monotonic() + 10
    while httpx.get(f"{url}/api/conversations/{conv}", headers=headers(key)).status_code != 404:
        assert time.monotonic() < deadline, "the question stayed"
        time.sleep(0.05)


# -- 001's numbered questions -------------------------------------------------------------------------

def _ingest(stack: Stack, tenant: str, docs: list[retriever_pb2.Document]) -> None:
    """The documents as the whole tenant's (in `documents` an upload is its uploader's by default)."""
    stub = retriever_pb2_grpc.RetrieverStub(channel(stack.address("retriever"), stack.service_metadata(tenant, "admin")))
    for doc in docs:
        doc.access.tenant = True
    assert all(p.error == "" for p in stub.Ingest(iter(docs), timeout=60))


@pytest.fixture(scope="module")
def numbered(stack: Stack) -> str:
    """A tenant with questions 1-3 as numbered items (and another tenant with a question 4)."""
    items = {1: "Question 1: What is the fee? Answer: 1.5% management fee.",
             2: "Question 2: What is the lock-up? Answer: a one-year soft lock-up.",
             3: "Question 3: Who is the auditor? Answer: Pryor & Lane."}
    _ingest(stack, NUMBERED, [retriever_pb2.Document(doc_id=f"exam-q{n}", collection="documents", text=t,
                                                     metadata={"question_number": str(n)}) for n, t in items.items()])
    _ingest(stack, NUMBERED + "-b", [retriever_pb2.Document(
        doc_id="exam-q4", collection="documents", text="Question 4: What is the secret hurdle? Answer: 9%.",
        metadata={"question_number": "4"})])
    return stack.key(NUMBERED, "student")


@pytest.mark.parametrize("question", ["Go through all the questions", "Explain each of the questions",
                                      "Answer every question"])
def test_all_the_questions_when_no_number_is_named(gemini_gateway, numbered: str, question: str) -> None:
    url, fake, _ = gemini_gateway
    fake.stream(text("Three questions: the fee [1], the lock-up [2], the auditor [3]."))
    events = sse(url + "/api/chat/ask/stream", {"question": question, "data_sources": ["Documents"]},
                 headers(numbered))
    strategy = one(events, "strategy")
    assert (strategy["route"], strategy["chunks"]) == ("LOOKUP", 3), strategy
    _, prompt = sent_prompt(fake)
    assert all(f"Question {n}:" in prompt for n in (1, 2, 3)) and "secret hurdle" not in prompt
    assert {c["doc_id"] for c in one(events, "citations")} == {"exam-q1", "exam-q2", "exam-q3"}


def test_a_named_number_still_fetches_only_that_question(gemini_gateway, numbered: str) -> None:
    url, fake, _ = gemini_gateway
    fake.stream(text("A one-year soft lock-up [1]."))
    events = sse(url + "/api/chat/ask/stream", {"question": "Explain question 2", "data_sources": ["Documents"]},
                 headers(numbered))
    assert one(events, "strategy")["route"] == "LOOKUP"
    assert {c["doc_id"] for c in one(events, "citations")} == {"exam-q2"}


# -- 004's chunk map, and the strategy, when a conversation is read back ------------------------------

@pytest.fixture(scope="module")
def answered(stack: Stack, analyst: str) -> dict:
    return _post(stack, analyst, {"question": QUESTION}).json()


def test_read_back_over_http_keeps_citations_chunk_map_and_strategy(stack: Stack, analyst: str,
                                                                      answered: dict) -> None:
    conv = answered["conversation_id"]
    read = httpx.get(f"{stack.http_url}/api/conversations/{conv}", headers=headers(analyst)).json()
    question, answer = read["messages"]
    assert question["strategy"] is None and answer["content"] == answered["answer"]
    assert answer["citations"] == answered["citations"]
    assert answer["chunk_map"] == {c["ref"]: c["chunk_id"] for c in answered["citations"]} != {}
    asked = answered["meta"]["strategy"]
    kept = answer["strategy"]
    assert (kept["reason"], kept["collections"], kept["filter"]) == (asked["reason"], asked["collections"],
                                                                     asked["filter"])
    assert kept["collections"] == ["meeting_notes", "factsheets"] and "March 2024" in kept["time_hint"]
    for ref, chunk_id in answer["chunk_map"].items():  # every #chk_ ref resolves after a reload
        chunk = httpx.get(f"{stack.http_url}/api/chunks/{quote(chunk_id, safe='')}", headers=headers(analyst))
        assert ref.startswith("#chk_") and chunk.status_code == 200 and chunk.json()["chunk_id"] == chunk_id


def test_read_back_over_grpc_keeps_citations_chunk_map_and_strategy(stack: Stack, analyst: str,
                                                                      answered: dict) -> None:
    stub = _gateway(stack.address("gateway"), analyst)
    read = stub.GetConversation(gateway_pb2.GetConversationRequest(conversation_id=answered["conversation_id"]),
                                timeout=10)
    question, answer = read.messages
    assert not question.HasField("strategy") and not question.citations
    assert [(c.index, c.ref, c.chunk_id, c.doc_id) for c in answer.citations] == [
        (c["index"], c["ref"], c["chunk_id"], c["doc_id"]) for c in answered["citations"]]
    assert dict(answer.chunk_map) == {c["ref"]: c["chunk_id"] for c in answered["citations"]}
    asked = answered["meta"]["strategy"]
    assert (answer.strategy.reason, list(answer.strategy.collections), answer.strategy.route) == (
        asked["reason"], asked["collections"], asked["route"])
    assert answer.strategy.filter.start_date == asked["filter"]["start_date"] == "2024-03-01"
    assert list(getattr(answer.strategy.filter, "in")["fund_name"].values) == asked["filter"]["in"]["fund_name"]
    assert dict(answer.meta) == {"model": "extractive", "route": asked["route"], "retrieval": "RAG_NEW_QUERY"}


def test_another_tenant_or_no_credential_reads_nothing_back(stack: Stack, outsider: str, answered: dict) -> None:
    conv = answered["conversation_id"]
    http = httpx.get(f"{stack.http_url}/api/conversations/{conv}", headers=headers(outsider))
    unknown = httpx.get(f"{stack.http_url}/api/conversations/nope", headers=headers(outsider))
    assert http.status_code == unknown.status_code == 404
    assert http.json()["error"]["message"].replace(conv, "nope") == unknown.json()["error"]["message"]
    assert httpx.get(f"{stack.http_url}/api/conversations/{conv}").status_code == 401
    for stub, code in ((_gateway(stack.address("gateway"), outsider), grpc.StatusCode.NOT_FOUND),
                       (gateway_pb2_grpc.GatewayStub(channel(stack.address("gateway"), ())),
                        grpc.StatusCode.UNAUTHENTICATED)):
        with pytest.raises(grpc.RpcError) as refused:
            stub.GetConversation(gateway_pb2.GetConversationRequest(conversation_id=conv), timeout=10)
        assert refused.value.code() == code


def test_a_stored_answer_from_an_older_gateway_reads_back_without_a_strategy(stack: Stack, analyst: str) -> None:
    """Answers stored before the strategy was kept (or by a gateway that knew other strategy fields)."""
    store = stack.app("gateway").store
    conv = _post(stack, analyst, {"question": QUESTION}).json()["conversation_id"]
    answer = store.messages(conv)[-1]
    meta = dict(answer.meta)
    old = {k: v for k, v in meta.items() if k != "strategy"}
    store.update_message(answer.message_id, answer.content, old)
    read = _gateway(stack.address("gateway"), analyst).GetConversation(
        gateway_pb2.GetConversationRequest(conversation_id=conv), timeout=10)
    assert not read.messages[1].HasField("strategy") and read.messages[1].citations
    store.update_message(answer.message_id, answer.content, {**meta, "strategy": {**meta["strategy"],
                                                                                 "from_the_future": 1}})
    read = _gateway(stack.address("gateway"), analyst).GetConversation(
        gateway_pb2.GetConversationRequest(conversation_id=conv), timeout=10)
    assert read.messages[1].strategy.reason == meta["strategy"]["reason"]
