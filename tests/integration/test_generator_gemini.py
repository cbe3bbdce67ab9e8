"""Generator.Generate over real gRPC with the Gemini backend: the real google-genai SDK
talks to the fake Gemini server, so these tests check both what the SDK sent and
what the client received, the status codes of provider errors, and that cancelling
the call closes the provider's stream."""
from __future__ import annotations

import asyncio
import re
import socket

import grpc
import pytest

from ragmesh.v1 import generator_pb2, generator_pb2_grpc
from services.generator.app import GeneratorApp
from services.generator.backends import GenerationRequest
from services.generator.backends.gemini import GeminiGenerator
from ragmesh.models import LOCAL
from tests.fakes.gemini import FakeGemini, chunk, grounding, text, thought, usage
from tests.fakes.http import Request
from tests.fakes.serving import serving, settings

PROMPT = "Question: What did Kestrel do with Brazil?\n\nInternal Data:\n[1] ...\n[2] ..."
SYSTEM = "You are a research assistant. Cite blocks like [2]."


def blocks() -> list[generator_pb2.ContextBlock]:
    return [generator_pb2.ContextBlock(index=i, text=f"block {i}", label=f"B{i}") for i in (1, 2)]


def ask(model: str, **fields) -> generator_pb2.GenerateRequest:
    return generator_pb2.GenerateRequest(model=model, question="What did Kestrel do with Brazil?", prompt=PROMPT,
                                         system_instruction=SYSTEM, blocks=blocks(), **fields)


def generate(fake: FakeGemini, request: generator_pb2.GenerateRequest) -> list[generator_pb2.GenerateEvent]:
    async def go() -> list[generator_pb2.GenerateEvent]:
        app = GeneratorApp(settings(gemini_api_key="test-key", gemini_base_url=fake.url))
        async with serving(app) as channel:
            return [e async for e in generator_pb2_grpc.GeneratorStub(channel).Generate(request, timeout=20)]

    return asyncio.run(go())


def failure(fake: FakeGemini, request: generator_pb2.GenerateRequest) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        generate(fake, request)
    return info.value


def thinking_config(request: Request) -> dict:
    """generationConfig.thinkingConfig with camelCase keys (the SDK may send either spelling)."""
    raw = request.body["generationConfig"].get("thinkingConfig", {})
    return {re.sub(r"_(\w)", lambda m: m[1].upper(), k): v for k, v in raw.items()}


def test_streams_thinking_content_grounding_and_usage_and_sends_what_step_7_says(fake_gemini: FakeGemini) -> None:
    fake_gemini.stream(
        thought("Looking at the meeting notes first."),
        text("Kestrel cut Brazil from 12% to 4% [1"),
        text("]. It moved the money to India [7][2]."),
        chunk({"text": " See the web section."}, finish_reason="STOP",
              grounding=grounding([("Reuters", "https://reuters.example/brazil"),
                                   ("FT", "https://ft.example/em")], ["Kestrel Brazil exposure"]),
              usage=usage(120, 40, 25)),
    )
    events = generate(fake_gemini, ask("gemini-3-low-thinking", web_search=True))

    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[0] == "thinking" and events[0].thinking == "Looking at the meeting notes first."
    assert kinds[-3:] == ["grounding", "usage", "done"]
    answer = "".join(e.content for e in events if e.HasField("content"))
    assert answer == "Kestrel cut Brazil from 12% to 4% [1]. It moved the money to India [2]. See the web section."
    web = events[-3].grounding.web
    assert [(c.title, c.url) for c in web] == [("Reuters", "https://reuters.example/brazil"),
                                               ("FT", "https://ft.example/em")]
    assert list(events[-3].grounding.queries) == ["Kestrel Brazil exposure"]
    u = events[-2].usage
    assert (u.prompt_tokens, u.completion_tokens, u.thinking_tokens, u.total_tokens) == (120, 40, 25, 185)
    assert events[-1].done.model == "gemini-2.5-flash"  # the modelVersion the API reported
    assert events[-1].done.finish_reason == "stop"

    [sent] = fake_gemini.requests("streamGenerateContent")
    assert re.fullmatch(r"/v1(beta)?/models/gemini-3-pro-preview:streamGenerateContent", sent.path)
    assert sent.query == {"alt": "sse"}
    assert sent.headers["x-goog-api-key"] == "test-key"
    assert sent.body["contents"] == [{"role": "user", "parts": [{"text": PROMPT}]}]
    assert sent.body["systemInstruction"]["parts"] == [{"text": SYSTEM}]
    assert sent.body["tools"] == [{"googleSearch": {}}]
    assert sent.body["generationConfig"]["temperature"] == 1.0
    assert thinking_config(sent) == {"includeThoughts": True, "thinkingLevel": "LOW"}


@pytest.mark.parametrize("model, api_model, level", [
    ("gemini-2.5-flash", "gemini-2.5-flash", None),
    ("gemini-2.5-pro", "gemini-2.5-pro", None),
    ("gemini-3-low-thinking", "gemini-3-pro-preview", "LOW"),
    ("gemini-3-high-thinking", "gemini-3-pro-preview", None),
])
def test_frontend_names_map_to_api_models_and_thinking(fake_gemini: FakeGemini, model: str, api_model: str,
                                                       level: str | None) -> None:
    fake_gemini.stream(text("ok"))
    generate(fake_gemini, ask(model, temperature=0.2))
    [sent] = fake_gemini.requests("streamGenerateContent")
    assert f"/models/{api_model}:" in sent.path
    expected = {"includeThoughts": True} | ({"thinkingLevel": level} if level else {})
    assert thinking_config(sent) == expected
    assert sent.body["generationConfig"]["temperature"] == pytest.approx(0.2)
    assert "tools" not in sent.body, "no Google Search unless web search is selected"


@pytest.mark.parametrize("script, code, words", [
    (dict(status=429, message="Quota exceeded for generate_content", retry_delay="37s"),
     grpc.StatusCode.RESOURCE_EXHAUSTED, ["rate limit", "Quota exceeded", "retry in 37s"]),
    (dict(status=400, message="thinking_level is not supported by this model"),
     grpc.StatusCode.INVALID_ARGUMENT, ["thinking_level is not supported"]),
    (dict(status=401, message="Request had invalid authentication credentials"),
     grpc.StatusCode.FAILED_PRECONDITION, ["invalid authentication credentials"]),
    (dict(status=400, message="API key not valid. Please pass a valid API key.", reason="API_KEY_INVALID"),
     grpc.StatusCode.FAILED_PRECONDITION, ["API key not valid"]),
    (dict(status=503, message="The model is overloaded"), grpc.StatusCode.UNAVAILABLE, ["overloaded"]),
])
def test_provider_errors_become_status_codes_a_caller_can_act_on(
    fake_gemini: FakeGemini, script: dict, code: grpc.StatusCode, words: list[str]
) -> None:
    fake_gemini.error(**script)
    error = failure(fake_gemini, ask("gemini-2.5-flash"))
    assert error.code() == code
    for word in words:
        assert word in error.details()


def test_an_error_in_the_middle_of_the_stream_ends_the_call_with_its_code(fake_gemini: FakeGemini) -> None:
    fake_gemini.stream(text("Kestrel cut"), {"error": {"code": 503, "message": "The model is overloaded",
                                                       "status": "UNAVAILABLE"}})

    async def go() -> tuple[list[str], grpc.aio.AioRpcError]:
        app = GeneratorApp(settings(gemini_api_key="test-key", gemini_base_url=fake_gemini.url))
        received: list[str] = []
        async with serving(app) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                async for event in generator_pb2_grpc.GeneratorStub(channel).Generate(ask("gemini-2.5-flash")):
                    received.append(event.content)
        return received, info.value

    received, error = asyncio.run(go())
    assert received == ["Kestrel cut"], "what streamed before the error was delivered"
    assert error.code() == grpc.StatusCode.UNAVAILABLE and "overloaded" in error.details()


def test_an_unreachable_provider_is_unavailable(fake_gemini: FakeGemini) -> None:
    with socket.socket() as sock:  # a port nothing listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]

    async def go() -> None:
        app = GeneratorApp(settings(gemini_api_key="test-key", gemini_base_url=f"http://127.0.0.1:{closed_port}"))
        async with serving(app) as channel:
            await generator_pb2_grpc.GeneratorStub(channel).Generate(ask("gemini-2.5-pro"), timeout=20).read()

    with pytest.raises(grpc.aio.AioRpcError) as info:
        asyncio.run(go())
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE and "gemini unreachable" in info.value.details()


def test_cancelling_the_call_closes_the_provider_stream(fake_gemini: FakeGemini) -> None:
    fake_gemini.stream(thought("Planning."), text("Kestrel cut"), text(" never sent"), hold_after=2)

    async def go() -> tuple[int, generator_pb2.GeneratorStatsResponse]:
        app = GeneratorApp(settings(gemini_api_key="test-key", gemini_base_url=fake_gemini.url))
        async with serving(app) as channel:
            stub = generator_pb2_grpc.GeneratorStub(channel)
            call = stub.Generate(ask("gemini-2.5-flash"), timeout=20)
            received = 0
            async for event in call:
                received += 1
                if event.HasField("content"):
                    call.cancel()  # the gateway does this when the user presses stop
                    break
            # The fake holds the stream open until its client goes away: this returns only once it has.
            assert await asyncio.to_thread(fake_gemini.hung_up.wait, 10)
            while app.service.cancelled == 0:  # counted right after the provider stream is closed
                await asyncio.sleep(0.01)
            return received, await stub.Stats(generator_pb2.GeneratorStatsRequest())

    received, stats = asyncio.run(go())
    assert received == 2
    assert stats.cancelled == 1 and stats.completed == 0


def test_the_four_gemini_names_are_served_only_with_a_key(fake_gemini: FakeGemini) -> None:
    async def models(**overrides) -> list[str]:
        async with serving(GeneratorApp(settings(**overrides))) as channel:
            stats = await generator_pb2_grpc.GeneratorStub(channel).Stats(generator_pb2.GeneratorStatsRequest())
            return [m for m in stats.models if m != LOCAL]  # present where the local-llm extra is installed

    assert asyncio.run(models()) == ["extractive"]
    with_key = asyncio.run(models(gemini_api_key="k", gemini_base_url=fake_gemini.url))
    assert with_key == sorted(["extractive", "gemini-2.5-flash", "gemini-2.5-pro", "gemini-3-high-thinking",
                               "gemini-3-low-thinking"])


def test_a_gemini_name_without_a_key_is_refused_naming_the_setting_never_answered_offline() -> None:
    request = generator_pb2.GenerateRequest(
        model="gemini-2.5-flash", question="What did Kestrel do with Brazil exposure?",
        blocks=[generator_pb2.ContextBlock(index=1, label="Meeting note",
                                           text="Kestrel cut its Brazil exposure from 12% to 4% in March 2024.")],
    )

    async def go() -> grpc.aio.AioRpcError:
        async with serving(GeneratorApp(settings())) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                [e async for e in generator_pb2_grpc.GeneratorStub(channel).Generate(request, timeout=20)]
            return caught.value

    error = asyncio.run(go())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("model: model 'gemini-2.5-flash' is not configured")
    assert "GEMINI_API_KEY" in error.details() and "configured: extractive" in error.details()


@pytest.mark.parametrize("how", ["aclose", "cancel"])
def test_the_provider_response_is_closed_before_the_backend_stream_returns(fake_gemini: FakeGemini, how: str) -> None:
    """Not left to the garbage collector: once our stream is closed or its task cancelled, the
    connection is already shut, even if this event loop never runs another callback."""
    fake_gemini.stream(thought("Planning."), text("never sent"), hold_after=1)

    async def go() -> bool:
        backend = GeminiGenerator("test-key", fake_gemini.url)
        stream = backend.stream(GenerationRequest("gemini-2.5-flash", "q", prompt="p"))
        assert (await anext(stream)).kind == "thinking"
        if how == "aclose":
            await stream.aclose()
        else:
            task = asyncio.ensure_future(anext(stream))
            await asyncio.sleep(0)  # the task is now waiting for the provider
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return fake_gemini.hung_up.wait(10)  # blocks this loop on purpose

    assert asyncio.run(go())
