"""The gateway in front of a Gemini-backed generator, where the model's input and output
matter: the real google-genai SDK talks to the fake Gemini server in tests/fakes, and the
tests read the prompts the SDK sent (corrections in the system prompt, factsheets grouped
with their JSON once, the deep-reasoner prompt, the search tool) and script the replies
(grounding sources become web citations, an uncited answer is replaced). The gateways beside the
stack's share its store and secrets, so the stack's admin key (tenant DEMO) is accepted by them too."""
from __future__ import annotations

import httpx

from ragmesh.prompts import NOT_ENOUGH
from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc
from tests.auth import channel, headers
from tests.conftest import QUALITY_OFF, answer_of, one, sse
from tests.fakes.gemini import FakeGemini, chunk, grounding, text, usage
from tests.stack import DEMO, Stack


def sent_prompt(fake: FakeGemini) -> tuple[str, str]:
    """(system instruction, user prompt) of the last generateContent request."""
    body = fake.requests("streamGenerateContent")[-1].body
    system = "".join(p["text"] for p in body.get("systemInstruction", {}).get("parts", []))
    user = "".join(p.get("text", "") for c in body["contents"] for p in c["parts"])
    return system, user


def test_corrections_go_into_the_system_prompt(gemini_gateway, stack: Stack) -> None:
    url, fake, _ = gemini_gateway
    analyst = headers(stack.key(DEMO, "analyst-7"))
    reply = httpx.post(url + "/api/corrections", json={
        "question": "Who manages Kestrel?", "wrong_answer": "Ana Souza",
        "correction": "Kestrel's lead PM is Tomás Herrera."}, headers=analyst)
    assert reply.status_code == 200
    fake.stream(text("Tomás Herrera runs Kestrel [1]."), chunk({"text": ""}, finish_reason="STOP", usage=usage(100, 8)))
    events = sse(url + "/api/chat/ask/stream", {"question": "Who manages the Kestrel fund?"}, analyst)
    assert one(events, "strategy")["corrections"] == 1
    system, _ = sent_prompt(fake)
    assert "Kestrel's lead PM is Tomás Herrera." in system and "Ana Souza" in system
    assert events[-1]["usage"]["total_tokens"] == 108


def test_factsheets_are_fenced_grouped_and_carry_their_json_once(gemini_gateway, stack: Stack) -> None:
    url, fake, _ = gemini_gateway
    fake.stream(text("Kestrel returned 3.67% in Q1 2024 [1]."))
    events = sse(url + "/api/chat/ask/stream", {
        "question": "Kestrel performance holdings and commentary in the March 2024 factsheet",
        "data_sources": ["Factsheet"]}, stack.headers)
    _, prompt = sent_prompt(fake)
    assert "<data>" in prompt and "</data>" in prompt
    assert prompt.count('Complete Factsheet Data: {"factsheet_id"') == prompt.count("Matching Sections (")
    assert "Matching Sections (3):" in prompt, "the three sections of one factsheet in one block"
    assert "[Fund Name Factsheet (Date)]" in prompt
    assert one(events, "citations")[0]["title"] == "Kestrel Emerging Markets Factsheet (2024-03-31)"


def test_deep_questions_use_the_deep_reasoner_prompt(gemini_gateway, stack: Stack) -> None:
    url, fake, _ = gemini_gateway
    fake.stream(text("Comparing [1] and [2]: both cut risk."))
    events = sse(url + "/api/chat/ask/stream",
                 {"question": "Compare how Harborview and Kestrel managed risk in 2024"}, stack.headers)
    assert one(events, "strategy")["route"] == "DEEP"
    _, prompt = sent_prompt(fake)
    assert "DEEP REASONING MODE" in prompt and "Conflicting information" in prompt


def test_web_search_sends_the_tool_and_grounding_becomes_web_citations(gemini_gateway, stack: Stack) -> None:
    url, fake, address = gemini_gateway
    fake.stream(text("Internally [1]. On the web, rates rose."),
                chunk({"text": ""}, grounding=grounding([("Rates news", "https://example.org/rates")], ["kestrel rates"])))
    events = sse(url + "/api/chat/ask/stream", {"question": "What did Kestrel say about rates?",
                                               "data_sources": ["Meeting Notes", "Web Search"]}, stack.headers)
    body = fake.requests("streamGenerateContent")[-1].body
    assert any("googleSearch" in tool or "google_search" in tool for tool in body.get("tools", []))
    web = [c for c in one(events, "citations") if c["url"]]
    assert web == [{**web[0], "url": "https://example.org/rates", "title": "Rates news"}]
    [sources] = [e for e in events if "citations" in e]
    assert sources["web_queries"] == ["kestrel rates"], "the searches the model ran reach the client"

    fake.stream(text("Internally [1]."), chunk({"text": ""}, grounding=grounding([], ["kestrel rates 2024"])))
    body = httpx.post(url + "/api/chat/ask", json={"question": "What did Kestrel say about rates?",
                                                   "data_sources": ["Meeting Notes", "Web Search"]},
                      headers=stack.headers, timeout=60).json()
    assert body["web_queries"] == ["kestrel rates 2024"] and not [c for c in body["citations"] if c["url"]]

    fake.stream(text("Internally [1]."), chunk({"text": ""}, grounding=grounding([], ["kestrel rates grpc"])))
    with channel(address, stack.metadata) as ch:
        events = list(gateway_pb2_grpc.GatewayStub(ch).Ask(gateway_pb2.AskRequest(
            question="What did Kestrel say about rates?", data_sources=["Meeting Notes", "Web Search"]), timeout=60))
    [sources] = [e.citations for e in events if e.HasField("citations")]
    assert list(sources.web_queries) == ["kestrel rates grpc"]


def test_an_uncited_unhedged_answer_is_replaced(gemini_gateway, stack: Stack) -> None:
    url, fake, _ = gemini_gateway
    fake.stream(text("Kestrel is the best fund ever and "), text("will double next year."))
    events = sse(url + "/api/chat/ask/stream", {"question": "What did Kestrel do with its Brazil exposure?"},
                 stack.headers)
    assert answer_of(events) == NOT_ENOUGH
    assert one(events, "citations") == []


def test_the_model_confirms_a_topic_change_within_its_time_limit(stack: Stack) -> None:
    """SCOPE_LLM_CHECK: the model's SAME/DIFFERENT verdict overrides the similarity verdict;
    a model slower than the limit leaves the similarity verdict in place."""
    fake = FakeGemini()
    fake.server.start()
    try:
        generator = stack.start_variant("generator", gemini_api_key="test-key", gemini_base_url=fake.url)
        gateway = stack.start_variant("gateway", generator_addr=generator.address, gemini_api_key="test-key",
                                      default_model="gemini-2.5-flash", scope_llm_check=True,
                                      scope_llm_timeout_s=3.0,  # the default 0.8 s, with room for a loaded CI machine
                                      **QUALITY_OFF)
        url = f"http://127.0.0.1:{gateway.app.http_port}/api/chat/ask/stream"
        fake.stream(text("Kestrel cut Brazil [1]."))
        conv = one(sse(url, {"question": "What did Kestrel do with its Brazil exposure?"}, stack.headers),
                   "strategy")["conversation_id"]

        fake.stream(text("DIFFERENT"))  # the topic check
        fake.stream(text("Kestrel said [1]."))  # the answer
        overruled = one(sse(url, {"question": "What did Kestrel say about the Brazil exposure cut?",
                                  "conversation_id": conv}, stack.headers), "strategy")
        assert overruled["retrieval"] == "RAG_NEW_QUERY" and "model says DIFFERENT" in overruled["reason"]

        fake.stream(text("SAME"), hold_after=0)  # no verdict in time: the similarity verdict stands
        fake.stream(text("Kestrel said [1]."))
        timed_out = one(sse(url, {"question": "What did Kestrel say about the Brazil exposure cut?",
                                  "conversation_id": conv}, stack.headers), "strategy")
        assert timed_out["retrieval"] == "RAG_REUSE" and "model check timed out" in timed_out["reason"]
    finally:
        fake.server.stop()


def test_small_talk_in_a_conversation_is_answered_by_the_model_from_the_conversation(gemini_gateway,
                                                                                     stack: Stack) -> None:
    """"ok, thanks, what else?" takes the direct route (no search) and, with a model configured, the model
    answers it with the conversation in its prompt, not a canned line."""
    url, fake, _ = gemini_gateway
    fake.stream(text("Northwind lost 4.1% in August 2024 [1]."))
    first = sse(url + "/api/chat/ask/stream", {"question": "How much did Northwind lose in August 2024?"},
                stack.headers)
    conversation = one(first, "strategy")["conversation_id"]
    fake.stream(text("You're welcome. Beyond Northwind's August loss, the notes cover Kestrel and Meridian."))
    events = sse(url + "/api/chat/ask/stream", {"question": "ok, thanks, what else?",
                                                "conversation_id": conversation}, stack.headers)
    strategy = one(events, "strategy")
    assert (strategy["route"], strategy["retrieval"], strategy["chunks"]) == ("DIRECT", "NO_RAG", 0)
    assert "the notes cover Kestrel" in answer_of(events)
    _, prompt = sent_prompt(fake)
    assert "How much did Northwind lose in August 2024?" in prompt and "Northwind lost 4.1%" in prompt
    assert "ok, thanks, what else?" in prompt
