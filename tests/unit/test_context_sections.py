"""000's context layout: blocks under their collections' headers (meeting notes first, then factsheets
with how many factsheets and sections matched), the [n] numbers kept in rank order, and the budget
counting the headers too."""
from __future__ import annotations

import pytest

from ragmesh.types import Chunk, Hit
from services.gateway.context import build


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
    ctx = build(HITS, 12_000)
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
    ctx = build(HITS, budget)
    assert ctx.blocks and len(ctx.text) <= budget, (len(ctx.text), ctx.text)
