"""The quality steps' reading of model replies: what a rewrite, a rerank or a compression reply
becomes, and what of it is refused; and each step's typed result: how it went, and what it made
(the integration tests run the steps through the gateway)."""
from __future__ import annotations

import asyncio

import pytest

from ragmesh.config import AnsweringSettings
from ragmesh.errors import Unavailable
from ragmesh.models import EXTRACTIVE
from ragmesh.types import Chunk, Hit
from services.gateway.quality import QualityStack, QualityStep, compress, rerank, rewrite

CHUNK = ("Kestrel cut its Brazil exposure from 12% to 4% of NAV. The remaining Brazil exposure is a single bank. "
         "The money went into India.")


@pytest.mark.parametrize("question, intent", [
    ("How do I set up a new fund mandate?", "procedural"),
    ("What did Kestrel say in March 2024?", "temporal"),
    ("What did Kestrel do with its Brazil exposure?", "factual"),
    ("Kestrel's views on emerging markets", "exploratory"),
])
def test_the_intent_picks_the_rewrite_instructions(question: str, intent: str) -> None:
    assert rewrite.intent(question) == intent
    assert rewrite.GUIDANCE[intent] in rewrite.prompt(question, intent)


def test_rewrite_keeps_at_most_three_distinct_queries_other_than_the_question() -> None:
    reply = "1. Kestrel Brazil cut\n- kestrel brazil CUT\n\nWhat did Kestrel do?\n2) \"Banco Serra Azul\"\nIndia weight\nMore"
    assert rewrite.variants(reply, "What did Kestrel do?") == ["Kestrel Brazil cut", "Banco Serra Azul", "India weight"]
    assert rewrite.variants("", "q") == []


def test_rerank_reads_scores_of_the_excerpts_shown_and_orders_by_them() -> None:
    hits = [Hit(Chunk(str(i), "d", "c", f"text {i}"), 1.0 - i / 10) for i in range(4)]
    scored = rerank.scores("1: 3\nExcerpt 2 - 9.5\n3: 10\n7: 10\n2: 1\nnot a score", len(hits))
    assert scored == {1: 3.0, 2: 9.5, 3: 10.0}, "out-of-range and repeated lines are ignored"
    assert [h.chunk.chunk_id for h in rerank.reorder(hits, scored)] == ["2", "1", "0", "3"]
    assert "Excerpt 4:\ntext 3" in rerank.prompt("q", hits)


def test_compression_keeps_verbatim_sentences_with_their_marker() -> None:
    assert compress.compressed("[partial] Kestrel cut its Brazil exposure from 12% to 4% of NAV.", CHUNK) == \
        "[Partial]: Kestrel cut its Brazil exposure from 12% to 4% of NAV."
    assert compress.compressed("[Conflicting]: The money went into  India. It also bought Chile.", CHUNK) == \
        "[Conflicting]: The money went into India.", "a sentence the chunk lacks is dropped"
    assert compress.compressed("NONE.", CHUNK) == ""
    assert compress.compressed("Kestrel likes Chile.", CHUNK) is None, "nothing of the chunk: keep it whole"


class Replying:
    """A generator whose model gives one reply (or raises it) to every step."""

    def __init__(self, reply: str | Exception) -> None:
        self.reply = reply

    async def complete(self, **_: object) -> str:
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


def outcome(step: QualityStep) -> tuple[str, str, str]:
    return step.step, step.status, step.detail


def test_each_step_returns_how_it_went_and_what_it_made_leaving_its_input_alone() -> None:
    hits = [Hit(Chunk(str(i), "d", "c", f"text {i}"), 1.0 - i / 10) for i in range(3)]
    reranked = asyncio.run(QualityStack(Replying("1: 2\n3: 9"), AnsweringSettings()).rerank("q", "gemini", hits))
    assert outcome(reranked.step) == ("rerank", "done", "2 of 3 candidates scored, best 9/10")
    assert [h.chunk.chunk_id for h in reranked.hits] == ["2", "0", "1"] and reranked.scored == 3
    assert [h.chunk.chunk_id for h in hits] == ["0", "1", "2"], "the planner's hits are not reordered in place"

    failed = asyncio.run(QualityStack(Replying(Unavailable("down")), AnsweringSettings()).rerank("q", "gemini", hits))
    assert outcome(failed.step) == ("rerank", "fallback", "model call failed (UNAVAILABLE): fused order kept")
    assert failed.hits == hits and failed.scored == 0

    unused = QualityStack(Replying("never asked"), AnsweringSettings(quality_rewrite=False))
    rewritten = asyncio.run(unused.rewrite("q", "gemini", cache_hit=False))
    assert outcome(rewritten.step) == ("rewrite", "skipped", "turned off (QUALITY_REWRITE=false)")
    assert rewritten.variants == []
    offline = asyncio.run(unused.compress("q", EXTRACTIVE, hits, 0))
    assert outcome(offline.step) == ("compress", "skipped", "no model configured") and offline.hits == hits


def test_compression_is_not_needed_when_every_hit_fits_the_context_whole() -> None:
    """A model with room for the hits as they are reads them whole: no call per hit (a large window's hundred
    hits would cost a hundred); past the room, each hit is cut."""
    hits = [Hit(Chunk(str(i), "d", "c", "Kestrel cut Brazil to 4%. It added India."), 1.0) for i in range(3)]
    room = sum(len(h.chunk.text) for h in hits)
    whole = asyncio.run(QualityStack(Replying(AssertionError("no call")), AnsweringSettings()).compress(
        "q", "gemini", hits, room))
    assert outcome(whole.step) == ("compress", "skipped", "every hit fits the context whole") and whole.hits == hits
    cut = asyncio.run(QualityStack(Replying("Kestrel cut Brazil to 4%."), AnsweringSettings()).compress(
        "q", "gemini", hits, room - 1))
    assert cut.step.status == "done" and [h.chunk.text for h in cut.hits] == ["Kestrel cut Brazil to 4%."] * 3
