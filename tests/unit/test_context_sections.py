"""The fund-research context layout: blocks under their collections' headers (meeting notes first, then factsheets
with how many factsheets and sections matched), the [n] numbers kept in rank order, and the budget
counting the headers too."""
from __future__ import annotations

import pytest

from ragmesh.context_budget import ContextBudget
from ragmesh.types import Chunk, Hit
from services.gateway.context import build, with_neighbours


WORDS = ["alpha beta gamma", "delta epsilon zeta", "theta iota kappa", "lambda sigma omicron", "rho tau upsilon"]


def _hit(collection: str, n: int, score: float, **meta: str) -> Hit:
    text = f"The {WORDS[n - 1]} desk reported {n * 7} percent exposure."
    return Hit(Chunk(f"{collection}/{n}", f"doc-{n}", collection, text, metadata=meta, date="2024-03-14"), score)


HITS = [_hit("factsheets", 1, 0.9, factsheet_id="fs-1", section_type="performance", fund_name="Kestrel"),
        _hit("meeting_notes", 2, 0.8, fund_name="Kestrel", manager="Ana", doc_type="USER"),
        _hit("factsheets", 3, 0.7, factsheet_id="fs-1", section_type="holdings", fund_name="Kestrel"),
        _hit("documents", 4, 0.6, filename="memo.pdf"),
        _hit("factsheets", 5, 0.5, factsheet_id="fs-2", section_type="commentary", fund_name="Harbor")]


def test_blocks_go_under_their_headers_in_000s_order_keeping_their_numbers() -> None:
    ctx = build(HITS, ContextBudget(12_000))
    text = ctx.text
    notes, sheets, docs = (text.index(h) for h in ("=== MEETING NOTES (RAG Retrieved) ===",
                                                    "=== RELEVANT FACTSHEET DATA (RAG Retrieved) ===",
                                                    "=== DOCUMENTS (RAG Retrieved) ==="))
    assert notes == 0 < sheets < docs
    assert "Found 2 unique factsheet(s) with 3 relevant section(s)" in text[sheets:docs]
    assert text.index("[2] Meeting note") < sheets < text.index("[1] Kestrel Factsheet") < text.index("[4] ")
    assert "Chunk Type: USER" in text[notes:sheets]
    assert [b.index for b in ctx.blocks] == [1, 2, 3, 4]  # rank order: citations do not move


@pytest.mark.parametrize("budget", [120, 300, 500, 700])
def test_the_budget_counts_the_headers(budget: int) -> None:
    ctx = build(HITS, ContextBudget(budget))
    assert ctx.blocks and len(ctx.text) <= budget, (len(ctx.text), ctx.text)


def _part(doc: str, index: int, score: float, text: str) -> Hit:
    return Hit(Chunk(f"meeting_notes/{doc}#{index}", doc, "meeting_notes", text, metadata={"fund_name": "Orion"},
                     date="2024-07-23", chunk_index=index), score)


def test_the_parts_written_next_to_the_best_hits_come_with_them() -> None:
    """A note's point can span two parts: the part after a kept one joins it though it ranked sixth, in
    place of the fifth; a part of the same note two away does not."""
    hits = [_part("a", 0, 0.9, "Tarn went the other way."), *(_part(f"o{i}", 0, 0.8 - i / 10, f"The {WORDS[i]} desk reported.")
                                                               for i in range(4)),
            _part("a", 1, 0.3, "The manager cut Tarn from 7% to 3% of NAV."), _part("a", 3, 0.2, "Far away.")]
    ordered = with_neighbours(hits)
    assert [h.chunk.chunk_id for h in ordered] == [h.chunk.chunk_id for h in [hits[0], hits[5], *hits[1:5], hits[6]]]
    ctx = build(ordered[:5], ContextBudget(12_000))
    assert len(ctx.blocks) == 4, "the note's two parts are one block"
    assert ctx.blocks[0].text == "Tarn went the other way.\n\nThe manager cut Tarn from 7% to 3% of NAV."


def test_what_the_hits_say_fills_the_budget_before_complete_factsheet_records_stand_for_it() -> None:
    record = '{"fund_name": "Orion", "commentary": "' + "padding " * 200 + '"}'
    sheet = Hit(Chunk("factsheets/fs#0", "fs", "factsheets", "Orion returned 4% in 2024.", parent_chunk_id="fs#p",
                      metadata={"factsheet_id": "fs", "fund_name": "Orion"}, date="2024-12-31"), 0.9,
                parent_text=record)
    note = _part("n", 0, 0.8, "The manager cut Tarn from 7% to 3% of NAV.")
    tight = build([sheet, note], ContextBudget(1_200))
    assert len(tight.blocks) == 2 and "Complete Factsheet Data" not in tight.text and len(tight.text) <= 1_200
    roomy = build([sheet, note], ContextBudget(4_000))
    assert len(roomy.blocks) == 2 and f"Complete Factsheet Data: {record}" in roomy.text
    assert "Content: Orion returned" not in roomy.text, "the record stands for its sections' text"
    assert roomy.blocks[0].text == "Orion returned 4% in 2024.", "what a backend quotes stays the sections' text"
