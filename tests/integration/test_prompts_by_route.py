"""Which prompt of the library and which temperature reach the model, by route: the questions go
through POST /api/chat/ask and Gateway.Ask of a gateway whose generator talks to the fake Gemini
server with the real google-genai SDK, and the tests read the requests the fake received (system
instruction, user prompt, generationConfig.temperature). Every prompt in ragmesh/prompts.py is
proved reachable: the library is enumerated and each prompt has a question that selects it.
Summaries made at ingest go to the model at 004's temperatures too, and an OpenAI-compatible model
gets the same prompt and temperature as Gemini."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from ragmesh.prompts import PROMPTS, system_instruction
from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc, retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel, headers
from tests.conftest import QUALITY_OFF
from tests.fakes.gemini import FakeGemini, text
from tests.fakes.openai import MODEL, FakeOpenAI, delta
from tests.stack import DEMO, Stack

TENANT = "q2-prompts"
PERSONA = "You are EchoMind, terse and exact."


def plan(sessions: int) -> str:
    """A board's plan: 6 sessions are one short text; 60 are two parts, each summarised before the whole."""
    return " ".join(f"The board reviewed the harbour expansion in session {j}, approving a budget of {10 + j} "
                    f"million and a finish date in {2026 + j % 5}." for j in range(sessions))



@dataclass
class Case:
    """A question and what the model must receive for it."""

    body: dict
    prompt: str
    temperature: float
    route: str
    tenant: bool = False  # asked in TENANT (its documents), else in DEMO (the demo corpus)
    turns_before: list[str] = field(default_factory=list)  # earlier questions of the same conversation


KESTREL = "What did Kestrel do with its Brazil exposure?"
CASES = {
    "fund_research": Case({"question": KESTREL}, "fund_research", 1.0, "SPECIFIC"),
    "investigator": Case({"question": "What budget did the board approve for the harbour expansion?",
                          "data_sources": ["Documents"]}, "investigator", 0.7, "SPECIFIC", tenant=True),
    "deep_reasoner": Case({"question": "Compare how Harborview and Kestrel managed risk"}, "deep_reasoner", 0.5,
                          "DEEP"),
    "global_summary": Case({"question": "Summarize this document", "data_sources": ["Documents"],
                            "document_ids": ["documents/harbour-plan"]}, "global_summary", 0.4, "SUMMARY",
                           tenant=True),
    "rag_persona": Case({"question": KESTREL, "persona": PERSONA}, "rag_persona", 0.7, "SPECIFIC"),
    "citation_enforced": Case({"question": KESTREL, "format": "notes"}, "citation_enforced", 0.3, "SPECIFIC"),
}
ROUTE_CASES = {  # the Path A routes besides SPECIFIC
    "LOOKUP": Case({"question": "What does item 2 say about Kestrel?"}, "fund_research", 1.0, "LOOKUP"),
    "NO_RAG": Case({"question": "summarize that"}, "fund_research", 1.0, "NO_RAG",
                   turns_before=[KESTREL, "What did Kestrel say about rates?"]),
}


@dataclass
class Asker:
    stack: Stack
    url: str
    fake: FakeGemini
    address: str  # the gateway's gRPC address
    tenant_headers: dict[str, str]

    def ask(self, case: Case) -> dict:
        """Asks the case's earlier turns, then its question; returns the final strategy."""
        who = self.tenant_headers if case.tenant else self.stack.headers
        conversation = ""
        for question in case.turns_before:
            self.fake.stream(text("Kestrel cut Brazil to 4% [1]."))
            earlier = {"question": question} | ({"conversation_id": conversation} if conversation else {})
            conversation = self._post(earlier, who)["conversation_id"]
        self.fake.stream(text("Answer with a citation [1]."))
        answered = self._post(case.body | ({"conversation_id": conversation} if conversation else {}), who)
        if case.body.get("format") == "notes":  # 002's contract names no route: the stored strategy does
            return self._stored_strategy(answered["conversation_id"], who)
        return answered["meta"]["strategy"]

    def _post(self, body: dict, who: dict[str, str]) -> dict:
        reply = httpx.post(self.url + "/api/chat/ask", json=body, headers=who, timeout=60)
        assert reply.status_code == 200, reply.text
        return reply.json()

    def _stored_strategy(self, conversation: str, who: dict[str, str]) -> dict:
        """The strategy the conversation's last answer was given, as read back."""
        reply = httpx.get(f"{self.url}/api/conversations/{conversation}", headers=who, timeout=30)
        assert reply.status_code == 200, reply.text
        return reply.json()["messages"][-1]["strategy"]

    def sent(self) -> tuple[str, str, float]:
        """(system instruction, user prompt, temperature) of the last answer the model was asked for."""
        body = self.fake.requests("streamGenerateContent")[-1].body
        system = "".join(p["text"] for p in body.get("systemInstruction", {}).get("parts", []))
        user = "".join(p.get("text", "") for c in body["contents"] for p in c["parts"])
        return system, user, body["generationConfig"]["temperature"]


@pytest.fixture(scope="module")
def asker(stack: Stack, gemini_gateway) -> Iterator[Asker]:
    """The Gemini gateway, and a tenant of its own holding a document with summaries (for SUMMARY and
    for questions over documents)."""
    url, fake, address = gemini_gateway
    key = stack.key(TENANT, "analyst", "admin")
    doc = retriever_pb2.Document(doc_id="harbour-plan", collection="documents", text=plan(6), summarize=True)
    with channel(stack.address("retriever"), bearer(key)) as ch:
        progress = list(retriever_pb2_grpc.RetrieverStub(ch).Ingest(iter([doc]), timeout=120))
    assert [p.error for p in progress if p.error] == [] and any(p.summarized for p in progress)
    yield Asker(stack, url, fake, address, headers(key))


@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_every_prompt_in_the_library_is_selected_by_a_question(asker: Asker, name: str) -> None:
    case = CASES[name]  # a prompt without a question that selects it fails here
    strategy = asker.ask(case)
    assert strategy["route"] == case.route
    system, user, temperature = asker.sent()
    persona = case.body.get("persona", "")
    assert system.endswith(system_instruction(PROMPTS[name], persona)), system
    assert PROMPTS[name].instructions in user
    assert temperature == pytest.approx(case.temperature)


@pytest.mark.parametrize("route", sorted(ROUTE_CASES))
def test_the_other_path_a_routes_use_their_prompts_temperature(asker: Asker, route: str) -> None:
    """Over the fund research sources that is 000's temperature 1 on every route, not Path A's 0.7."""
    case = ROUTE_CASES[route]
    assert asker.ask(case)["route"] == route
    system, _, temperature = asker.sent()
    assert system.endswith(system_instruction(PROMPTS[case.prompt])) and temperature == pytest.approx(case.temperature)


def test_a_persona_fills_every_prompt_and_reaches_the_model_over_grpc(asker: Asker, stack: Stack) -> None:
    asker.fake.stream(text("Comparing [1] and [2]."))
    with channel(asker.address, stack.metadata) as ch:
        events = list(gateway_pb2_grpc.GatewayStub(ch).Ask(gateway_pb2.AskRequest(
            question="Compare how Harborview and Kestrel managed risk", persona=PERSONA), timeout=60))
    assert [e.strategy.route for e in events if e.HasField("strategy")] == ["DEEP"]
    system, _, temperature = asker.sent()
    assert system.endswith(system_instruction(PROMPTS["deep_reasoner"], PERSONA)) and PERSONA in system
    assert temperature == pytest.approx(0.5)


def test_summaries_at_ingest_go_to_the_model_at_004s_temperatures(stack: Stack) -> None:
    """A retriever whose summaries come from Gemini: each section at 0.3, the document at 0.4."""
    fake = FakeGemini()
    fake.server.start()
    generator = stack.start_variant("generator", gemini_api_key="test-key", gemini_base_url=fake.url)
    retriever = stack.start_variant("retriever", generator_addr=generator.address, summary_model="gemini-2.5-flash")
    try:
        for _ in range(3):  # two parts, then the whole
            fake.stream(text("The board approved the harbour expansion budget."))
        doc = retriever_pb2.Document(doc_id="harbour-temps", collection="documents", text=plan(60), summarize=True)
        with channel(retriever.address, bearer(stack.key(TENANT, "analyst", "admin"))) as ch:
            progress = list(retriever_pb2_grpc.RetrieverStub(ch).Ingest(iter([doc]), timeout=120))
        assert any(p.summarized for p in progress), progress
        sent: dict[str, list[float]] = {}
        for request in fake.requests("streamGenerateContent"):
            prompt = "".join(p.get("text", "") for c in request.body["contents"] for p in c["parts"])
            kind = "section" if prompt.startswith("Summarize the section") else "document"  # a part is a section
            sent.setdefault(kind, []).append(request.body["generationConfig"]["temperature"])
        assert sent == {"section": [pytest.approx(0.3)] * 2, "document": [pytest.approx(0.4)]}
    finally:
        for host in (retriever, generator):
            stack.extra.remove(host)
            stack.call(host.stop())
        fake.server.stop()


def test_an_openai_compatible_model_gets_the_prompt_and_temperature_too(stack: Stack, fake_openai: FakeOpenAI) -> None:
    generator = stack.start_variant("generator", openai_base_url=fake_openai.url, openai_model=MODEL)
    gateway = stack.start_variant("gateway", generator_addr=generator.address, default_model="openai", **QUALITY_OFF)
    try:
        fake_openai.stream(delta("Comparing [1] and [2]."), delta(finish_reason="stop"))
        reply = httpx.post(f"http://127.0.0.1:{gateway.app.http_port}/api/chat/ask", headers=stack.headers, json={
            "question": "Compare how Harborview and Kestrel managed risk", "persona": PERSONA}, timeout=60)
        assert reply.status_code == 200 and reply.json()["meta"]["strategy"]["route"] == "DEEP", reply.text
        body = fake_openai.requests()[-1].body
        assert body["temperature"] == pytest.approx(0.5)
        assert body["messages"][0]["role"] == "system"
        assert body["messages"][0]["content"].endswith(system_instruction(PROMPTS["deep_reasoner"], PERSONA))
    finally:
        for host in (gateway, generator):
            stack.extra.remove(host)
            stack.call(host.stop())
