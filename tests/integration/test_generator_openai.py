"""Generator.Generate over real gRPC with the OpenAI-compatible backend against a fake
chat-completions server: the request it sends, the events it streams (reasoning as
thinking, content with checked citations, usage), error codes and cancellation."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from ragmesh.v1 import generator_pb2, generator_pb2_grpc
from services.generator.app import GeneratorApp
from services.generator.backends import GenerationRequest
from services.generator.backends.openai_compat import OpenAICompatGenerator
from ragmesh.models import LOCAL
from tests.fakes.openai import MODEL, FakeOpenAI, delta, usage
from tests.fakes.serving import serving, settings


def app_for(fake: FakeOpenAI, key: str = "sk-test") -> GeneratorApp:
    return GeneratorApp(settings(openai_base_url=fake.url, openai_api_key=key, openai_model=MODEL))


def request(**fields) -> generator_pb2.GenerateRequest:
    blocks = [generator_pb2.ContextBlock(index=i, text=f"block {i}") for i in (1, 2, 3)]
    return generator_pb2.GenerateRequest(model="openai", question="q?", prompt="the prompt",
                                         system_instruction="be brief", blocks=blocks, **fields)


def generate(fake: FakeOpenAI, req: generator_pb2.GenerateRequest) -> list[generator_pb2.GenerateEvent]:
    async def go() -> list[generator_pb2.GenerateEvent]:
        async with serving(app_for(fake)) as channel:
            return [e async for e in generator_pb2_grpc.GeneratorStub(channel).Generate(req, timeout=20)]

    return asyncio.run(go())


def test_streams_reasoning_content_and_usage_from_the_chat_completions_stream(fake_openai: FakeOpenAI) -> None:
    fake_openai.stream(
        delta(reasoning="The notes say 4%."),
        delta(content="Kestrel cut Brazil to 4% [3"),
        delta(content="][12]."),
        delta(finish_reason="stop"),
        usage(50, 9),
    )
    events = generate(fake_openai, request(temperature=0.3))

    assert events[0].thinking == "The notes say 4%."
    assert "".join(e.content for e in events if e.HasField("content")) == "Kestrel cut Brazil to 4% [3]."
    assert events[-2].usage.prompt_tokens == 50 and events[-2].usage.total_tokens == 59
    assert (events[-1].done.model, events[-1].done.finish_reason) == (MODEL, "stop")

    [sent] = fake_openai.requests()
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.body["model"] == MODEL and sent.body["stream"] is True
    assert sent.body["messages"] == [{"role": "system", "content": "be brief"},
                                     {"role": "user", "content": "the prompt"}]
    assert sent.body["temperature"] == pytest.approx(0.3)
    assert sent.body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("status, message, retry_after, code, words", [
    (429, "Rate limit reached for requests", "7", grpc.StatusCode.RESOURCE_EXHAUSTED,
     ["rate limit", "Rate limit reached", "retry in 7s"]),
    (400, "context length exceeded", None, grpc.StatusCode.INVALID_ARGUMENT, ["context length exceeded"]),
    (401, "Incorrect API key provided", None, grpc.StatusCode.FAILED_PRECONDITION, ["Incorrect API key"]),
    (502, "upstream model crashed", None, grpc.StatusCode.UNAVAILABLE, ["HTTP 502", "model crashed"]),
])
def test_http_errors_become_status_codes(fake_openai: FakeOpenAI, status: int, message: str,
                                         retry_after: str | None, code: grpc.StatusCode, words: list[str]) -> None:
    fake_openai.error(status, message, retry_after=retry_after)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        generate(fake_openai, request())
    assert info.value.code() == code
    for word in words:
        assert word in info.value.details()


def test_an_error_inside_the_stream_ends_the_call_with_its_code(fake_openai: FakeOpenAI) -> None:
    fake_openai.stream(delta(content="Kestrel"), {"error": {"message": "model unloaded", "code": 503}})
    with pytest.raises(grpc.aio.AioRpcError) as info:
        generate(fake_openai, request())
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE and "model unloaded" in info.value.details()


def test_the_openai_name_is_served_only_when_a_server_is_configured(fake_openai: FakeOpenAI) -> None:
    async def models(app: GeneratorApp) -> list[str]:
        async with serving(app) as channel:
            models = (await generator_pb2_grpc.GeneratorStub(channel).Stats(generator_pb2.GeneratorStatsRequest())).models
            return [m for m in models if m != LOCAL]  # present where the local-llm extra is installed

    assert asyncio.run(models(GeneratorApp(settings()))) == ["extractive"]
    assert asyncio.run(models(app_for(fake_openai))) == ["extractive", "openai"]
    with pytest.raises(ValueError, match="OPENAI_MODEL"):
        GeneratorApp(settings(openai_base_url=fake_openai.url))


def test_cancelling_the_call_closes_the_connection_to_the_server(fake_openai: FakeOpenAI) -> None:
    fake_openai.stream(delta(content="Kestrel"), delta(content=" never sent"), hold_after=1)

    async def go() -> int:
        app = app_for(fake_openai)
        async with serving(app) as channel:
            call = generator_pb2_grpc.GeneratorStub(channel).Generate(request(), timeout=20)
            async for event in call:
                assert event.content == "Kestrel"
                call.cancel()
                break
            assert await asyncio.to_thread(fake_openai.hung_up.wait, 10)
            while app.service.cancelled == 0:
                await asyncio.sleep(0.01)
            return app.service.completed

    assert asyncio.run(go()) == 0


def test_closing_the_backend_stream_closes_the_response_at_once(fake_openai: FakeOpenAI) -> None:
    fake_openai.stream(delta(content="Kestrel"), delta(content=" never sent"), hold_after=1)

    async def go() -> bool:
        backend = OpenAICompatGenerator(fake_openai.url, "", MODEL)
        stream = backend.stream(GenerationRequest("openai", "q", prompt="p"))
        assert (await anext(stream)).text == "Kestrel"
        await stream.aclose()
        return fake_openai.hung_up.wait(10)  # blocks this loop: the close must already have happened

    assert asyncio.run(go())
