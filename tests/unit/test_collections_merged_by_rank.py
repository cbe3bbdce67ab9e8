"""The planner merges the collections' hits by rank, not by score: each collection's search normalises its
own scores (under convex fusion each list's best is 1), so a fund's near-identical factsheets (one per date,
each scoring close to that list's best) must not take every place the route keeps from the meeting note
that answers."""
from __future__ import annotations

import asyncio

import numpy as np

from ragmesh import config
from ragmesh.clients import SearchResult
from ragmesh.models import EXTRACTIVE
from ragmesh.types import Chunk, Hit
from services.gateway.collection_merge import by_rank
from services.gateway.history import Recent
from services.gateway.planner import Planner
from services.gateway.request import AskInput
from services.gateway.scope_cache import ScopeCache

QUESTION = "Who manages Altair Credit Opportunities?"
HEADER = "Altair Credit Opportunities Factsheet ({date}). Fund manager: see the fund's notes. Strategy: credit."
DATES = ("2024-03-31", "2024-06-30", "2024-09-30", "2024-12-31", "2025-03-31", "2025-06-30")


def _hit(collection: str, doc_id: str, text: str, score: float) -> Hit:
    return Hit(Chunk(f"{doc_id}#0", doc_id, collection, text), score)


FACTSHEETS = [_hit("factsheets", f"fs-altair-{d}", HEADER.format(date=d), 1.0 - i / 1000) for i, d in enumerate(DATES)]
NOTES = [_hit("meeting_notes", "mn-altair", "Priya Raman, who manages Altair, walked us through the book.", 0.62),
         _hit("meeting_notes", "mn-altair-2", "Altair's recoveries on Vantor Telecom were 71 cents.", 0.41)]


class FakeRetriever:
    """Each collection's search answers its own hits, best first, on its own scale."""

    async def search(self, query: str, collections: list[str], *args, **kwargs) -> SearchResult:
        hits = {"factsheets": FACTSHEETS, "meeting_notes": NOTES}.get(collections[0], [])
        return SearchResult(list(hits), len(hits), {})


class FakeEmbedder:
    async def embed(self, texts: list[str], kind: str, timeout: float) -> np.ndarray:
        return np.ones((len(texts), 4), dtype=np.float32)


def _planned(top_k: int) -> list[Hit]:
    settings = config.load().replace(quality_rewrite=False, quality_rerank=False, quality_compress=False,
                                     quality_history=False, scope_llm_check=False, retrieval_timeout_s=5.0)

    async def no_funds(tenant: str) -> list[str]:
        return []

    planner = Planner(FakeRetriever(), None, FakeEmbedder(), ScopeCache(), no_funds, settings, EXTRACTIVE, {})
    ask = AskInput(QUESTION, data_sources=["Factsheet", "Meeting Notes"], tenant="t", conversation_id="c",
                   top_k=top_k)
    return asyncio.run(planner.plan(ask, Recent(0, []))).hits


def test_near_identical_chunks_of_one_collection_do_not_crowd_out_the_others_best() -> None:
    hits = _planned(top_k=5)
    assert len(hits) == 5
    assert "mn-altair" in {h.chunk.doc_id for h in hits}, [h.chunk.doc_id for h in hits]
    assert [h.chunk.collection for h in hits[:2]] == ["factsheets", "meeting_notes"], "each collection's first first"


def test_each_collections_order_is_kept_and_ranks_alternate_the_higher_score_first() -> None:
    merged = by_rank([NOTES, FACTSHEETS[:3]])
    assert [h.chunk.doc_id for h in merged] == [
        "fs-altair-2024-03-31", "mn-altair", "fs-altair-2024-06-30", "mn-altair-2", "fs-altair-2024-09-30"]
    assert by_rank([[], FACTSHEETS[:2], []]) == FACTSHEETS[:2] and by_rank([]) == []
