"""SearchEngine on an in-memory registry: validation and the embedder-down fallback."""
import asyncio

import numpy as np
import pytest

from ragmesh.errors import InvalidArgument, Unavailable
from ragmesh.types import Chunk, StoredChunk
from services.retriever.fusion import Boosters
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
