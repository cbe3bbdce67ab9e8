"""REASONING_MODEL: a deep question (the DEEP route: "compare", "why", ...) is answered by the reasoning
model with the deep-reasoner prompt; any other question by the default model. Checked on what the fake
Gemini server received: the model named in each generation call's path."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import QUALITY_OFF, one, sse
from tests.fakes.gemini import FakeGemini, text
from tests.stack import Stack

REASONING, DEFAULT = "gemini-2.5-pro", "gemini-2.5-flash"


@pytest.fixture(scope="module")
def reasoning_gateway(stack: Stack) -> Iterator[tuple[str, FakeGemini]]:
    fake = FakeGemini()
    fake.server.start()
    generator = stack.start_variant("generator", gemini_api_key="test-key", gemini_base_url=fake.url)
    gateway = stack.start_variant("gateway", generator_addr=generator.address, gemini_api_key="test-key",
                                  default_model=DEFAULT, reasoning_model=REASONING, **QUALITY_OFF)
    yield f"http://127.0.0.1:{gateway.app.http_port}", fake
    for host in (gateway, generator):
        stack.extra.remove(host)
        stack.call(host.stop())
    fake.server.stop()


def models_called(fake: FakeGemini) -> list[str]:
    return [r.path.split("/models/")[1].split(":")[0] for r in fake.requests("streamGenerateContent")]


def ask(url: str, stack: Stack, question: str) -> list[dict]:
    return sse(url + "/api/chat/ask/stream", {"question": question}, stack.headers)


@pytest.mark.parametrize(("question", "route", "model"), [
    ("Compare how Kestrel and Northwind handled risk in 2024 and explain why they differ", "DEEP", REASONING),
    ("What did Kestrel do with its Brazil exposure in March 2024?", "SPECIFIC", DEFAULT),
])
def test_a_deep_question_goes_to_the_reasoning_model_and_others_to_the_default(
        reasoning_gateway, stack: Stack, question: str, route: str, model: str) -> None:
    url, fake = reasoning_gateway
    before = len(models_called(fake))
    fake.stream(text("Kestrel cut Brazil from 12% to 4% [1]."))
    strategy = one(ask(url, stack, question), "strategy")
    assert strategy["route"] == route and strategy["model"] == model
    assert models_called(fake)[before:] == [model]
    sent = fake.requests("streamGenerateContent")[-1].body
    assert ("DEEP REASONING MODE" in str(sent["contents"])) == (route == "DEEP"), "the deep-reasoner prompt for DEEP"
