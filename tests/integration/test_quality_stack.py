"""003's quality stack through the gateway, on the real stack with a generator on the fake Gemini
server (the real google-genai SDK): the question rewritten into variants the retriever fuses, the
fused candidates reranked by the model's 0-10 scores, each chunk compressed with its marker, and
the conversation answering when nothing retrieved is close enough. The tests read what the fake
received (the prompts of every step) and what the retriever was asked; the fake answers each step
by what its prompt says, since compression asks for every chunk at once. Without a model each
step says it was skipped; a model that fails or is too slow leaves the unimproved path, said so."""
from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc
from tests.auth import channel
from tests.conftest import answer_of, one, sse
from tests.fakes.gemini import FakeGemini
from tests.fakes.http import Reply
from tests.fakes.openai import MODEL, FakeOpenAI
from tests.stack import Stack

QUESTION = "What did Kestrel do with its Brazil exposure?"
VARIANTS = ["Kestrel Brazil position cut", "Kestrel Emerging Markets Brazil allocation NAV",
            "Banco Serra Azul holding"]
REWRITE, RERANK, COMPRESS = "alternative search queries", "Score how relevant each excerpt", "Copy, word for word"
ANSWER = "Now provide a comprehensive answer."
STEPS = ["rewrite", "rerank", "history", "compress"]  # the order they run in


@pytest.fixture(scope="module")
def model_gateway(stack: Stack) -> Iterator[tuple[str, FakeGemini]]:
    """(the HTTP base URL of a gateway whose default model is Gemini on the fake, the fake)."""
    fake = FakeGemini()
    fake.server.start()
    generator = stack.start_variant("generator", gemini_api_key="test-key", gemini_base_url=fake.url)
    # Generous limits: only the tests that make the model hang wait for them, on their own gateway. A context of
    # 2,000 characters (CONTEXT_MAX_CHARS, here and in each gateway of these tests): the steps shape the route's 5
    # hits (not the hundred Gemini's window takes), which hold more than that, so compression is needed; no room
    # for a complete factsheet, which would stand for its sections' compressed text.
    gateway = stack.start_variant("gateway", generator_addr=generator.address, gemini_api_key="test-key",
                                  default_model="gemini-2.5-flash", rewrite_timeout_s=20.0, rerank_timeout_s=20.0,
                                  compress_timeout_s=20.0, context_max_chars=2_000)
    yield f"http://127.0.0.1:{gateway.app.http_port}", fake
    fake.server.stop()


@pytest.fixture
def model(model_gateway: tuple[str, FakeGemini]) -> Iterator[tuple[str, FakeGemini]]:
    url, fake = model_gateway
    yield url, fake
    fake.rules.clear()


@pytest.fixture
def searched(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> list:
    """Every SearchQuery the stack's retriever runs while the test lasts."""
    engine = stack.app("retriever").engine
    seen, search = [], engine.search

    async def recording(query):
        seen.append(query)
        return await search(query)

    monkeypatch.setattr(engine, "search", recording)
    return seen


def prompts(fake: FakeGemini, containing: str, temperature: float | None = None) -> list[str]:
    """The contents of the generateContent requests whose prompt contains `containing` (all asked
    at `temperature` when one is given)."""
    found = [(r.body, "".join(p.get("text", "") for c in r.body["contents"] for p in c["parts"]))
             for r in fake.requests("streamGenerateContent")]
    found = [(body, text) for body, text in found if containing in text]
    if temperature is not None:
        assert {body.get("generationConfig", {}).get("temperature") for body, _ in found} == {temperature}
    return [text for _, text in found]


def excerpts(prompt: str) -> list[str]:
    return re.findall(r"Excerpt \d+:\n(.*?)(?=\n\nExcerpt \d+:|\Z)", prompt, re.S)


def the_excerpt(prompt: str) -> str:
    """The chunk text of a compression prompt."""
    return prompt.split("Excerpt:\n", 1)[1].split("\n\n" + COMPRESS, 1)[0]


def first_sentence(text: str) -> str:
    return re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0]


def steps(strategy: dict) -> dict[str, dict]:
    assert [q["step"] for q in strategy["quality"]] == STEPS, strategy["quality"]
    assert all(isinstance(q["ms"], float) and q["ms"] >= 0 for q in strategy["quality"])
    return {q["step"]: q for q in strategy["quality"]}


def test_rewrite_rerank_and_compression_shape_the_context(model, stack: Stack, searched: list) -> None:
    url, fake = model
    fake.respond(REWRITE, "\n".join(f"{i}. {v}" for i, v in enumerate(VARIANTS, start=1)))
    # The model prefers the last candidate it is shown, so reranking visibly changes the order.
    fake.respond(RERANK, lambda sent: "\n".join(
        f"{i}: {10 if i == len(excerpts(sent)) else 2}" for i in range(1, len(excerpts(sent)) + 1)))
    fake.respond(COMPRESS, lambda sent: "[Partial]: " + first_sentence(the_excerpt(sent)))
    fake.respond(ANSWER, "Kestrel cut Brazil from 12% to 4% of NAV [1].")

    events = sse(url + "/api/chat/ask/stream", {"question": QUESTION}, stack.headers)
    strategy = one(events, "strategy")
    done = steps(strategy)
    assert done["rewrite"] == {**done["rewrite"], "status": "done", "detail": "factual intent: 3 variants"}
    assert strategy["variants"] == VARIANTS
    [rewrite] = prompts(fake, REWRITE, temperature=0.0)
    assert "Intent: factual." in rewrite and f"Question: {QUESTION}" in rewrite
    assert {tuple(q.variants) for q in searched} == {tuple(VARIANTS)}, "every search fuses the variants"
    assert all(q.query == QUESTION for q in searched)

    [rerank] = prompts(fake, RERANK, temperature=0.0)
    pool = excerpts(rerank)
    assert done["rerank"]["status"] == "done" and strategy["rerank_count"] == len(pool) > 1
    assert f"Question: {QUESTION}" in rerank and "from 0 (unrelated) to 10" in rerank

    compressions = prompts(fake, COMPRESS, temperature=0.0)
    assert len(compressions) == strategy["chunks"] == 5, "one compression call per chunk of the context"
    assert done["compress"] == {**done["compress"], "status": "done", "detail": "5 chunks: 5 cut, 5 Partial"}
    answered = prompts(fake, ANSWER)[-1]
    contents = re.findall(r"^Content: (.*)$", answered, re.M)
    block_one = re.search(r"^\[1\] .*?^Content: (.*?)$", answered, re.M | re.S).group(1)  # its group may come second
    assert block_one == "[Partial]: " + first_sentence(pool[-1]), "the model's favourite is block [1]"
    assert set(contents) <= {"[Partial]: " + first_sentence(the_excerpt(p)) for p in compressions}, \
        "the context holds the compressed text only"
    assert done["history"]["status"] == "skipped" and "within the similarity thresholds" in done["history"]["detail"]
    assert answer_of(events) == "Kestrel cut Brazil from 12% to 4% of NAV [1]."
    assert one(events, "citations")[0]["snippet"].startswith("[Partial]: ")


def test_the_notes_contract_reports_the_rerank(model, stack: Stack) -> None:
    """002's meta counts the candidates the model reranked and names the strategy `hybrid_reranked`."""
    url, fake = model
    fake.respond(REWRITE, "Kestrel Brazil")
    fake.respond(RERANK, lambda sent: "\n".join(f"{i}: {i}" for i in range(1, len(excerpts(sent)) + 1)))
    fake.respond(COMPRESS, lambda sent: first_sentence(the_excerpt(sent)))
    fake.respond(ANSWER, "Kestrel cut Brazil [1].")
    body = httpx.post(url + "/api/chat/ask", json={"question": QUESTION, "format": "notes"}, headers=stack.headers,
                      timeout=60).json()
    retrieval = body["meta"]["retrieval"]
    rerank = prompts(fake, RERANK)[-1]
    assert retrieval["strategy"] == "hybrid_reranked" and retrieval["rerankCount"] == len(excerpts(rerank)) > 1
    assert body["answer"] == "Kestrel cut Brazil [N1]."


def test_compression_keeps_only_the_chunks_sentences_and_drops_what_it_finds_irrelevant(model, stack: Stack) -> None:
    url, fake = model
    fake.respond(REWRITE, "Kestrel Brazil")

    def compressing(sent: str) -> str:
        chunk = the_excerpt(sent)
        if "Banco Serra Azul" in chunk:
            return "[Conflicting]: " + first_sentence(chunk) + " Kestrel doubled its Brazil exposure."
        # Another part of a Brazil note keeps one sentence: whole, it could fill the 2,000 characters itself.
        return "NONE" if "Brazil" not in chunk else "[Partial]: " + first_sentence(chunk)

    fake.respond(COMPRESS, compressing)
    fake.respond(ANSWER, "Kestrel cut Brazil [1].")
    body = httpx.post(url + "/api/chat/ask", json={"question": QUESTION, "top_k": 10}, headers=stack.headers,
                      timeout=60).json()
    compress = steps(body["meta"]["strategy"])["compress"]
    assert compress["status"] == "done" and "Conflicting" in compress["detail"] and "dropped" in compress["detail"]
    answer_prompt = prompts(fake, ANSWER)[-1]
    assert "Content: [Conflicting]: " in answer_prompt
    assert "Kestrel doubled its Brazil exposure." not in answer_prompt, "a sentence the chunk lacks is dropped"
    assert body["meta"]["strategy"]["rerank_count"] == 0 and steps(body["meta"]["strategy"])["rerank"]["status"] == "fallback"


def test_a_failing_or_silent_model_leaves_the_unimproved_path(stack: Stack) -> None:
    """The model never answers the rewrite (past its limit), says no scores, and fails compression: the
    answer is still made, from the question alone, the fused order and whole chunks, and says so."""
    fake = FakeGemini()
    fake.server.start()
    try:
        generator = stack.start_variant("generator", gemini_api_key="test-key", gemini_base_url=fake.url)
        gateway = stack.start_variant("gateway", generator_addr=generator.address, gemini_api_key="test-key",
                                      default_model="gemini-2.5-flash", rewrite_timeout_s=0.5, context_max_chars=2_000)
        fake.respond(REWRITE, "", hold=True)
        fake.respond(RERANK, "I cannot score these excerpts.")
        fake.rules.add(COMPRESS, lambda _: Reply(503, {"error": {"code": 503, "message": "overloaded",
                                                                 "status": "UNAVAILABLE"}}))
        fake.respond(ANSWER, "Kestrel cut Brazil [1].")
        events = sse(f"http://127.0.0.1:{gateway.app.http_port}/api/chat/ask/stream", {"question": QUESTION},
                     stack.headers)
        assert not [e for e in events if "error" in e]
        strategy = one(events, "strategy")
        fell = steps(strategy)
        assert fell["rewrite"] == {**fell["rewrite"], "status": "fallback",
                                   "detail": "no reply from the model within 0.5 s: the question alone is searched"}
        assert strategy["variants"] == []
        assert fell["rerank"] == {**fell["rerank"], "status": "fallback",
                                  "detail": "the model's reply held no score: fused order kept"}
        assert strategy["rerank_count"] == 0
        assert fell["compress"]["status"] == "fallback" and fell["compress"]["detail"].startswith("model call failed")
        assert fell["compress"]["detail"].endswith(": chunks kept whole")
        whole = " ".join(excerpts(prompts(fake, RERANK)[0])[0].split())  # the best fused candidate
        contents = re.findall(r"^Content: (.*)$", prompts(fake, ANSWER)[-1], re.M)
        assert contents[0] == whole, "the fused order and the whole chunk"
        assert answer_of(events) == "Kestrel cut Brazil [1]."
    finally:
        fake.server.stop()


def test_the_conversation_answers_when_nothing_retrieved_is_close(model, stack: Stack) -> None:
    url, fake = model
    fake.respond(ANSWER, "From our conversation: Kestrel cut Brazil [1].")
    off_topic = "What is a good recipe for mushroom risotto with saffron?"
    first = sse(url + "/api/chat/ask/stream", {"question": off_topic}, stack.headers)
    history = steps(one(first, "strategy"))["history"]
    assert history == {**history, "status": "skipped", "detail": "no earlier turns to answer from"}

    conv = one(sse(url + "/api/chat/ask/stream", {"question": QUESTION}, stack.headers),
               "strategy")["conversation_id"]
    fake.respond(ANSWER, "Earlier I said Kestrel cut Brazil; I have nothing on risotto.")
    events = sse(url + "/api/chat/ask/stream", {"question": off_topic, "conversation_id": conv}, stack.headers)
    strategy = one(events, "strategy")
    history = steps(strategy)["history"]
    assert history["status"] == "done" and "answered from the conversation" in history["detail"]
    assert strategy["retrieval"] == "NO_RAG" and strategy["chunks"] == 0
    assert steps(strategy)["compress"]["detail"] == "no hits"
    answer_prompt = prompts(fake, ANSWER)[-1]
    assert "Previous conversation:" in answer_prompt and f"User: {QUESTION}\nAssistant: " in answer_prompt
    assert answer_prompt.count("<data>") == 1, "the earlier turns only, fenced"
    assert "Internal Data:" not in answer_prompt and "Content:" not in answer_prompt
    assert answer_of(events) == "Earlier I said Kestrel cut Brazil; I have nothing on risotto."


def test_the_steps_can_ask_another_model_than_the_answer(stack: Stack, fake_openai: FakeOpenAI) -> None:
    """QUALITY_MODEL=openai beside a Gemini answer: the steps go to the OpenAI-compatible server, the
    answer to Gemini."""
    gemini = FakeGemini()
    gemini.server.start()
    try:
        generator = stack.start_variant("generator", gemini_api_key="test-key", gemini_base_url=gemini.url,
                                        openai_base_url=fake_openai.url, openai_model=MODEL)
        gateway = stack.start_variant("gateway", generator_addr=generator.address, gemini_api_key="test-key",
                                      default_model="gemini-2.5-flash", quality_model="openai",
                                      rewrite_timeout_s=20.0, rerank_timeout_s=20.0, compress_timeout_s=20.0,
                                      context_max_chars=2_000)
        fake_openai.respond(REWRITE, "\n".join(VARIANTS))
        fake_openai.respond(RERANK, "1: 9\n2: 3")
        fake_openai.respond(COMPRESS, lambda sent: first_sentence(the_excerpt(sent)))
        gemini.respond(ANSWER, "Kestrel cut Brazil [1].")
        events = sse(f"http://127.0.0.1:{gateway.app.http_port}/api/chat/ask/stream", {"question": QUESTION},
                     stack.headers)
        strategy = one(events, "strategy")
        assert [q["status"] for q in strategy["quality"]] == ["done", "done", "skipped", "done"]
        sent = [r.body for r in fake_openai.requests()]
        assert {b["model"] for b in sent} == {MODEL}
        assert sum(REWRITE in b["messages"][-1]["content"] for b in sent) == 1
        assert sum(RERANK in b["messages"][-1]["content"] for b in sent) == 1
        assert sum(COMPRESS in b["messages"][-1]["content"] for b in sent) == strategy["chunks"]
        assert [b["messages"][0]["role"] for b in sent] == ["system"] * len(sent)
        assert not prompts(gemini, REWRITE) and len(prompts(gemini, ANSWER)) == 1
        assert answer_of(events) == "Kestrel cut Brazil [1]."
    finally:
        gemini.server.stop()


def test_without_a_model_every_step_says_it_was_skipped(stack: Stack) -> None:
    """The stack's own gateway answers with the offline extractive backend: no step runs, each says why."""
    body = httpx.post(stack.http_url + "/api/chat/ask", json={"question": QUESTION}, headers=stack.headers,
                      timeout=60).json()
    strategy = body["meta"]["strategy"]
    assert [(q["step"], q["status"], q["detail"]) for q in strategy["quality"]] == [
        (step, "skipped", "no model configured") for step in STEPS]
    assert strategy["variants"] == [] and strategy["rerank_count"] == 0
    assert "Banco Serra Azul" in body["answer"] and body["citations"], "the extractive answer is unchanged"

    with channel(stack.address("gateway"), stack.metadata) as ch:
        events = list(gateway_pb2_grpc.GatewayStub(ch).Ask(gateway_pb2.AskRequest(question=QUESTION), timeout=60))
    [grpc_strategy] = [e.strategy for e in events if e.HasField("strategy")]
    assert [(q.step, q.status, q.detail) for q in grpc_strategy.quality] == [
        (step, "skipped", "no model configured") for step in STEPS]
