"""The generator sends an answer's text in fewer pieces: what a backend streams within one window of the
last piece sent goes out together, the first piece at once, the text and the events' order unchanged,
a backend's failure and a caller that goes handled as without it."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from ragmesh.errors import InvalidArgument
from ragmesh.types import ContextBlock, GenEvent
from services.generator.backends import GenerationRequest
from services.generator.backends.extractive import ExtractiveBackend
from services.generator.coalesce import coalesced
from services.generator.service import GenerationService

WORDS = [f"w{i}" for i in range(40)]


async def paced(delay_s: float, first_seen: asyncio.Event | None = None) -> AsyncIterator[GenEvent]:
    """A backend streaming a word every `delay_s`, then its usage and end; with `first_seen`, the second
    word waits until the caller has the first."""
    for i, word in enumerate(WORDS):
        if i == 1 and first_seen is not None:
            await first_seen.wait()
        if i:
            await asyncio.sleep(delay_s)
        yield GenEvent("content", text=(" " if i else "") + word)
    yield GenEvent("usage", usage={"completion_tokens": len(WORDS)})
    yield GenEvent("done", model="m", text="stop")


async def collect(events: AsyncIterator[GenEvent]) -> list[GenEvent]:
    return [e async for e in events]


def test_pieces_streamed_within_a_window_go_out_together_with_the_same_text() -> None:
    out = asyncio.run(collect(coalesced(paced(0.005), 0.05)))
    content = [e.text for e in out if e.kind == "content"]
    assert "".join(content) == " ".join(WORDS)
    assert len(content) < len(WORDS) / 3, content
    assert [e.kind for e in out[-2:]] == ["usage", "done"], "what follows the text keeps its place"


def test_the_first_piece_goes_out_before_the_backend_yields_the_second() -> None:
    async def first() -> str:
        seen = asyncio.Event()
        async with asyncio.timeout(5):  # without it coalesced would wait for the second piece forever
            async for event in coalesced(paced(0.005, seen), 0.05):
                seen.set()
                return event.text
        return ""

    assert asyncio.run(first()) == WORDS[0]


def test_without_a_window_every_piece_goes_out_as_it_comes() -> None:
    out = asyncio.run(collect(coalesced(paced(0.0), 0.0)))
    assert [e.text for e in out if e.kind == "content"] == [(" " if i else "") + w for i, w in enumerate(WORDS)]


def test_thinking_and_content_are_never_joined_into_one_another() -> None:
    async def mixed() -> AsyncIterator[GenEvent]:
        for kind in ("thinking", "thinking", "content", "content", "thinking"):
            yield GenEvent(kind, text=kind[0])

    out = asyncio.run(collect(coalesced(mixed(), 0.05)))
    assert [(e.kind, e.text) for e in out] == [("thinking", "tt"), ("content", "cc"), ("thinking", "t")]


def test_a_backend_failure_reaches_the_caller_after_the_text_before_it() -> None:
    async def failing() -> AsyncIterator[GenEvent]:
        yield GenEvent("content", text="a")
        yield GenEvent("content", text="b")
        raise InvalidArgument("model", "refused by the provider")

    async def run() -> list[str]:
        seen = []
        with pytest.raises(InvalidArgument, match="refused by the provider"):
            async for event in coalesced(failing(), 0.05):
                seen.append(event.text)
        return seen

    assert "".join(asyncio.run(run())) == "ab"


def test_a_caller_that_goes_closes_the_backend_stream_at_once() -> None:
    closed = asyncio.Event()

    async def endless() -> AsyncIterator[GenEvent]:
        try:
            while True:
                yield GenEvent("content", text="x")
                await asyncio.sleep(0.001)
        finally:
            closed.set()

    async def run() -> bool:
        stream = coalesced(endless(), 0.05)
        await anext(stream)
        await anext(stream)
        await stream.aclose()
        return closed.is_set()

    assert asyncio.run(run())


def test_the_service_sends_an_extractive_answer_in_fewer_pieces_with_the_same_text() -> None:
    request = GenerationRequest("extractive", "What is the yield?", [ContextBlock(
        index=1, label="Factsheet", text="The fund's yield is 4.2% as of June. " * 12)])

    async def pieces(window_s: float) -> list[str]:
        service = GenerationService({"extractive": ExtractiveBackend(delay_ms=2)}, "extractive", window_s)
        return [e.text async for e in service.generate(GenerationRequest(**vars(request))) if e.kind == "content"]

    each, joined = asyncio.run(pieces(0.0)), asyncio.run(pieces(0.05))
    assert "".join(joined) == "".join(each)
    assert joined[0] == each[0], "the first piece, through the first citation, is the same"
    assert len(joined) < len(each) / 2


def test_a_backend_stream_cancelled_from_elsewhere_ends_the_answer_instead_of_leaving_it_waiting() -> None:
    async def cancelled() -> AsyncIterator[GenEvent]:
        yield GenEvent("content", text="a")
        raise asyncio.CancelledError  # as a provider's client does when its own task is cancelled

    async def consume() -> None:
        async for _ in coalesced(cancelled(), 0.05):
            pass

    async def run() -> bool:
        task = asyncio.ensure_future(consume())
        done, _ = await asyncio.wait({task}, timeout=5)  # still waiting after 5 s: it would wait for ever
        task.cancel()
        return task in done and task.cancelled()

    assert asyncio.run(run())


def test_the_extractive_backend_yields_the_pieces_of_one_window_at_once_with_the_same_text() -> None:
    """Given the generator's window, the offline backend wakes once a window, not once a piece: the pieces
    due in it come as one, the first alone and at once, the text unchanged."""
    request = GenerationRequest("extractive", "What is the yield?", [ContextBlock(
        index=1, label="Factsheet", text="The fund's yield is 4.2% as of June. " * 12)])

    async def pieces(window_ms: float) -> list[str]:
        backend = ExtractiveBackend(delay_ms=2, piece_window_ms=window_ms)
        return [e.text async for e in backend.stream(GenerationRequest(**vars(request))) if e.kind == "content"]

    each, joined = asyncio.run(pieces(0.0)), asyncio.run(pieces(8.0))  # 4 pieces of 2 ms a window
    assert "".join(joined) == "".join(each) and joined[0] == each[0]
    assert joined[1:] == ["".join(each[i:i + 4]) for i in range(1, len(each), 4)]
