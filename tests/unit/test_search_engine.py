"""SearchEngine on an in-memory registry: validation, the hybrid fusion and the embedder-down fallback."""
import asyncio
import datetime as dt

import numpy as np
import pytest

from ragmesh.errors import InvalidArgument, Unavailable
from ragmesh.types import Chunk, SearchFilter, StoredChunk
from services.retriever.fusion import CONVEX, DBSF, HYBRID_FUSIONS, HYBRID_WEIGHTS, Boosters
from services.retriever.index import IndexRegistry
from services.retriever.search import SearchEngine, SearchQuery


def registry() -> IndexRegistry:
    r = IndexRegistry(4)
    vectors = np.eye(4, dtype=np.float32)
    r.apply("c", [(("", f"d{i}"), [StoredChunk(Chunk(f"d{i}#0", f"d{i}", "c", text), vectors[i])])
                  for i, text in enumerate(["gold miners", "bond yields", "gold price", "oil"])])
    return r


async def down(texts: list[str], task: str) -> np.ndarray:
    raise Unavailable("embedder: UNAVAILABLE: connection refused")


def test_embedder_down_means_sparse_only_and_flagged() -> None:
    outcome = asyncio.run(SearchEngine(registry(), down).search(SearchQuery("gold")))
    assert outcome.dense_skipped
    assert {h.chunk.doc_id for h in outcome.hits} == {"d0", "d2"}
    assert all(h.dense_rank == 0 and h.sparse_rank > 0 for h in outcome.hits)


@pytest.mark.parametrize("query, field", [
    (SearchQuery("x", top_k=0), "top_k"),
    (SearchQuery("x", dense_weight=-1), "dense_weight"),
    (SearchQuery("x", dense_weight=0, sparse_weight=0), "dense_weight"),
    (SearchQuery("x", rrf_k=0), "rrf_k"),
    (SearchQuery("x", variants=[f"v{i}" for i in range(9)]), "variants"),
    (SearchQuery("x", boosters=Boosters(time_window="2d")), "boosters.time_window"),
    (SearchQuery("x", boosters=Boosters(now="yesterday")), "boosters.now"),
])
def test_bad_searches_name_the_field(query: SearchQuery, field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        asyncio.run(SearchEngine(registry(), down).search(query))
    assert err.value.field == field


async def embed(texts: list[str], task: str) -> np.ndarray:
    """'gold price' sits on d2's vector; anything else between d0 and d1."""
    return np.array([[0, 0, 1, 0] if t == "gold price" else [0.6, 0.8, 0, 0] for t in texts], dtype=np.float32)


@pytest.mark.parametrize("fusion", HYBRID_FUSIONS)
def test_the_engine_fuses_by_its_hybrid_fusion_with_that_fusions_weights(fusion: str) -> None:
    """d2 tops both lists; d0 is last of both: min-max (convex) gives it 0, RRF and DBSF a share."""
    outcome = asyncio.run(SearchEngine(registry(), embed, fusion).search(SearchQuery("gold price")))
    hits = {h.chunk.doc_id: h for h in outcome.hits}
    assert outcome.hits[0].chunk.doc_id == "d2" and hits["d2"].fused_score == pytest.approx(
        1.0 if fusion != DBSF else sum(w * top for w, top in zip(HYBRID_WEIGHTS[DBSF], _dbsf_tops())))
    assert (hits["d0"].fused_score == 0) == (fusion == CONVEX)
    assert SearchQuery("q").weights(fusion)[:2] == HYBRID_WEIGHTS[fusion]


def _dbsf_tops() -> tuple[float, float]:
    """d2's DBSF-normalised dense and keyword scores: dense cosines 1, 0, 0, 0; keyword d2 then d0 (two
    scores: the higher is mean + 1 std, 4/6 of the way from mean - 3 std to mean + 3 std)."""
    std = np.std([1, 0, 0, 0])
    return (1 - (0.25 - 3 * std)) / (6 * std), 4 / 6


@pytest.mark.parametrize("fusion", HYBRID_FUSIONS)
def test_a_filtered_search_fuses_the_admitted_chunks_alone(fusion: str) -> None:
    """The filter admits d0 and d3: d0 tops both admitted lists (the keyword list is d0 alone, d2 the other gold
    document being filtered out) and every fused score stays in 0..1: normalisation reads the admitted lists,
    never the documents the caller may not read."""
    engine = SearchEngine(registry(), embed, fusion)
    outcome = asyncio.run(engine.search(SearchQuery("gold", filter=SearchFilter(doc_ids=["d0", "d3"]))))
    assert {h.chunk.doc_id for h in outcome.hits} <= {"d0", "d3"} and outcome.hits[0].chunk.doc_id == "d0"
    assert all(0.0 <= h.fused_score <= 1.0 for h in outcome.hits)
    assert (outcome.hits[0].dense_rank, outcome.hits[0].sparse_rank) == (1, 1)


def dated_registry() -> IndexRegistry:
    """Three notes that match "gold" alike, written weeks apart, in no date order."""
    r = IndexRegistry(4)
    vectors = np.eye(4, dtype=np.float32)
    notes = [("d0", 90), ("d1", 3), ("d2", 30)]  # days old
    r.apply("c", [(("", doc), [StoredChunk(Chunk(f"{doc}#0", doc, "c", "gold position", date=_days_ago(age)),
                                           vectors[i])])
                  for i, (doc, age) in enumerate(notes)])
    return r


def _days_ago(days: int) -> str:
    return (dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=days)).isoformat()


def test_embedder_down_ranks_keyword_matches_newest_first() -> None:
    """Keyword and recency, the notes design's fallback: equal keyword matches come newest first, and say
    how they were ranked."""
    for fusion in ("RRF", "LINEAR"):
        outcome = asyncio.run(SearchEngine(dated_registry(), down).search(SearchQuery("gold", fusion=fusion)))
        assert outcome.dense_skipped
        assert [h.chunk.doc_id for h in outcome.hits] == ["d1", "d2", "d0"], fusion
        assert all("keyword + recency (embedder down)" in h.boosts for h in outcome.hits)


def test_a_better_keyword_match_still_beats_a_newer_note() -> None:
    r = IndexRegistry(4)
    vectors = np.eye(4, dtype=np.float32)
    notes = [("old", _days_ago(40), "gold miners rally as gold rises"),
             ("new", _days_ago(1), "gold mentioned once among many other unrelated words here"),
             ("other", _days_ago(20), "bond yields fall"), ("more", _days_ago(10), "oil output cut")]
    r.apply("c", [(("", doc), [StoredChunk(Chunk(f"{doc}#0", doc, "c", text, date=date), vectors[i])])
                  for i, (doc, date, text) in enumerate(notes)])
    outcome = asyncio.run(SearchEngine(r, down).search(SearchQuery("gold miners")))
    assert [h.chunk.doc_id for h in outcome.hits][0] == "old"
