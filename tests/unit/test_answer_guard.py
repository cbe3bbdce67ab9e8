"""The answer guard holds uncited text, but an answer that cites early is shown as it streams: the
first piece that cites a given block passes the generator's citation check and the gateway's guard
whole, at once, with no waiting for more text."""
from __future__ import annotations

import asyncio

from ragmesh.types import GenEvent
from services.gateway.answer_guard import AnswerGuard
from services.generator.backends import GenerationRequest
from services.generator.backends.extractive import ExtractiveBackend
from services.generator.citations import CitationFilter, checked
from tests.unit.test_extractive import BLOCKS


def test_a_cited_first_piece_passes_the_guard_at_once() -> None:
    guard = AnswerGuard({1, 2}, enforce=True)
    assert guard.feed("- Kestrel cut Brazil to 4% [2]") == "- Kestrel cut Brazil to 4% [2]"
    assert guard.feed(" and more.") == " and more."


def test_a_finished_valid_marker_at_the_end_of_a_chunk_is_not_held() -> None:
    f = CitationFilter({1, 2})
    assert f.feed("Kestrel cut Brazil [2]") == "Kestrel cut Brazil [2]"
    assert f.feed("[9]. Then") == ". Then", "an invented marker after it is still removed"
    assert f.feed(" India [7]") == " India", "an invented run may need its space for what follows: held"
    assert f.feed("[1].") == " [1]."


def test_the_extractive_first_piece_reaches_the_reader_whole_and_first() -> None:
    """Backend -> generator's citation check -> gateway's guard: what the guard shows for the first
    event is everything the backend's first piece said."""
    async def shown() -> tuple[str, list[str]]:
        request = GenerationRequest("extractive", "What did Kestrel do with Brazil exposure?", BLOCKS)
        backend, valid = ExtractiveBackend(delay_ms=0), {b.index for b in BLOCKS}
        first_piece = await anext(e.text async for e in backend.stream(request) if e.kind == "content")
        guard = AnswerGuard(valid, enforce=True)
        events: list[GenEvent] = [e async for e in checked(backend.stream(request), valid)]
        return first_piece, [guard.feed(e.text) for e in events if e.kind == "content"]

    first_piece, outputs = asyncio.run(shown())
    assert outputs[0] == first_piece and "[" in first_piece
