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


def test_a_deep_question_goes_to_the_reasoning_model(reasoning_gateway, stack: Stack) -> None:
    url, fake = reasoning_gateway
    before = len(models_called(fake))
    fake.stream(text("Kestrel cut Brazil while Northwind's yen trade unwound [1]."))
    events = ask(url, stack, "Compare how Kestrel and Northwind handled risk in 2024 and explain why they differ")
    strategy = one(events, "strategy")
    assert strategy["route"] == "DEEP" and strategy["model"] == REASONING
    assert models_called(fake)[before:] == [REASONING]
    sent = fake.requests("streamGenerateContent")[-1].body
    assert "DEEP REASONING MODE" in str(sent["contents"]), "with the deep-reasoner prompt"


def test_other_questions_keep_the_default_model(reasoning_gateway, stack: Stack) -> None:
    url, fake = reasoning_gateway
    before = len(models_called(fake))
    fake.stream(text("Kestrel cut Brazil from 12% to 4% [1]."))
    events = ask(url, stack, "What did Kestrel do with its Brazil exposure in March 2024?")
    strategy = one(events, "strategy")
    assert strategy["route"] == "SPECIFIC" and strategy["model"] == DEFAULT
    assert models_called(fake)[before:] == [DEFAULT]
