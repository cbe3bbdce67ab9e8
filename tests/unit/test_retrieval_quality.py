"""Issue 15's quality changes, as behaviour: BM25 finds a chunk by its document's title, and
RRF weighs the top of a list more than agreement far down both lists."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ragmesh.types import Chunk, Document, SearchFilter, StoredChunk
from services.retriever.analyzer import lexical_text
from services.retriever.fusion import DEFAULT_RRF_K, fuse_rrf
from services.retriever.index import IndexRegistry
from services.retriever.search import SearchQuery
from tests.unit.test_fusion import ranked, retrieved
from tests.unit.test_ingest_pipeline import make, run, stored

DIM = 8
TITLE = "Vitamin D and bone density"


def _doc(doc_id: str, texts: list[str], title: str = TITLE) -> tuple[tuple[str, str], list[StoredChunk]]:
    vector = np.ones(DIM, np.float32) / np.sqrt(DIM)
    return ("t", doc_id), [StoredChunk(Chunk(f"{doc_id}#{i}", doc_id, "c", text, {"title": title} if title else {},
                                             tenant="t", chunk_index=i), vector) for i, text in enumerate(texts)]


def _sparse_hits(registry: IndexRegistry, query: str) -> list[str]:
    found = registry.search("c", [query], None, 10, SearchFilter(tenant="t"))
    return [found.chunks[int(s)].chunk_id for s in found.sparse[0][0]]


def test_bm25_finds_a_chunk_by_its_documents_title_and_forgets_it_with_the_document() -> None:
    registry = IndexRegistry(DIM)
    registry.apply("c", [_doc("a", [f"{TITLE}\n\nWe measured it.", "Older adults took supplements for a year."]),
                         _doc("b", ["Unrelated text about supplements."], title="")])
    assert set(_sparse_hits(registry, "vitamin bone")) == {"a#0", "a#1"}, "the second chunk names neither word"
    registry.apply("c", [(("t", "a"), [])])
    assert _sparse_hits(registry, "vitamin bone") == []
    assert registry.get("c").sparse.doc_freq("vitamin") == 0, "the title's terms left with the document"


def test_a_chunk_that_starts_with_the_title_is_not_given_it_twice() -> None:
    [first, second] = _doc("a", [f"{TITLE}\n\nWe measured it.", "Later text."])[1]
    assert lexical_text(first.chunk) == first.chunk.text
    assert lexical_text(second.chunk) == f"{TITLE}\n\nLater text."
    assert lexical_text(Chunk("x", "x", "c", "No title here.")) == "No title here."


def test_ingested_chunks_carry_the_documents_title(tmp_path: Path) -> None:
    ingestor = make(tmp_path)
    run(ingestor, Document("paper", "library", text="First paragraph.\n\nSecond paragraph.", title=TITLE),
        Document("untitled", "library", text="Just text."))
    assert {s.chunk.metadata["title"] for s in stored(ingestor, "paper")} == {TITLE}
    assert "title" not in stored(ingestor, "untitled")[0].chunk.metadata


def test_rrf_by_default_puts_the_top_of_one_list_above_agreement_far_down_both() -> None:
    """Slot 0 tops the dense list only; slot 1 is 40th in both. k 60 would rank slot 1 first."""
    filler = list(range(2, 41))
    r = retrieved([ranked(0, *filler[:38], 1)], [ranked(*filler[:39], 1)], n=41)
    assert SearchQuery("q").rrf_k == DEFAULT_RRF_K
    fused = {c.slot: c.fused for c in fuse_rrf(r, 0.5, 0.5, SearchQuery("q").rrf_k)}
    assert fused[0] > fused[1]
