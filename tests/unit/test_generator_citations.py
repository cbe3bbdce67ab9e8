"""Citations are checked while the answer streams: markers naming no supplied block never
reach the client, however the stream is cut into chunks, and little text is held back."""
from __future__ import annotations

import asyncio

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ragmesh.types import GenEvent
from services.generator.citations import CitationFilter, checked


def stream(chunks: list[str], valid: set[int]) -> list[str]:
    f = CitationFilter(valid)
    return [f.feed(c) for c in chunks] + [f.flush()]


def test_markers_split_across_chunks_are_checked_whole() -> None:
    out = stream(["Brazil went to 4% [", "1", "]. India got it [", "7][", "2]."], {1, 2})
    assert "".join(out) == "Brazil went to 4% [1]. India got it [2]."
    assert "[" not in out[0], "an unfinished marker is held, not sent"


def test_invented_markers_are_removed_with_the_space_before_them() -> None:
    f = CitationFilter({1, 2})
    assert f.feed("Cut to 4% [9]. Moved to India [1][12] and Chile [3].") + f.flush() == \
        "Cut to 4%. Moved to India [1] and Chile."
    assert f.removed == [9, 12, 3]


def test_lists_keep_their_valid_numbers_in_the_form_the_gateway_resolves() -> None:
    assert "".join(stream(["See [1, 4, 2]."], {1, 2})) == "See [1][2]."


def test_no_supplied_blocks_means_no_marker_survives() -> None:
    assert "".join(stream(["As noted [1] and [2]."], set())) == "As noted and."


def test_text_that_is_not_a_marker_passes_untouched() -> None:
    text = "In [2024] see [the notes](https://x.example/a[1]b) and a[i] or [ 1 ] or [1a]."
    assert "".join(stream([text], {1})) == text


def test_only_the_end_that_could_become_a_marker_is_held() -> None:
    f = CitationFilter({1})
    assert f.feed("Exposure fell to 4%  [1") == "Exposure fell to 4%"
    assert f.feed("] and ") == "  [1] and"
    assert f.feed("x[1, 2, 3, 4, 5") == " x[1, 2, 3, 4, 5", "more numbers than a marker holds: not held"
    assert f.feed(" [7][9]") == "", "a run of invented markers at the end may go on"
    assert f.feed("[1].") == " [1].", "and keeps its space for the valid marker that followed"
    assert f.flush() == ""


@settings(max_examples=300, deadline=None)
@example(text="a [7][1][3].", cuts=[11])
@given(text=st.text(alphabet="a [],1237 ", max_size=60), cuts=st.lists(st.integers(0, 60), max_size=10))
def test_any_chunking_gives_the_same_answer_as_one_chunk(text: str, cuts: list[int]) -> None:
    bounds = sorted({0, len(text), *[min(c, len(text)) for c in cuts]})
    chunks = [text[a:b] for a, b in zip(bounds, bounds[1:])]
    assert "".join(stream(chunks, {1, 2})) == "".join(stream([text], {1, 2}))


def test_held_text_goes_out_before_usage_and_done() -> None:
    async def events() -> list[GenEvent]:
        async def source():
            yield GenEvent("thinking", text="hmm")
            yield GenEvent("content", text="Cut to 4% [")
            yield GenEvent("content", text="1")
            yield GenEvent("usage", usage={"total_tokens": 3})
            yield GenEvent("done", model="m", text="stop")

        return [e async for e in checked(source(), {1})]

    out = asyncio.run(events())
    assert [(e.kind, e.text) for e in out] == [
        ("thinking", "hmm"), ("content", "Cut to 4%"), ("content", " [1"), ("usage", ""), ("done", "stop")]
