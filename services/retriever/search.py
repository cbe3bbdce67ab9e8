"""Hybrid search over one or more collections: dense and sparse side by side under
one compiled filter, fused per collection with weighted RRF, merged by fused score."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from ragmesh.errors import InvalidArgument, RagmeshError
from ragmesh.types import Hit, SearchFilter
from ragmesh.validation import check_top_k
from services.retriever import filters
from services.retriever.fusion import weighted_rrf
from services.retriever.index import CollectionIndex, IndexRegistry

log = logging.getLogger(__name__)

EmbedFn = Callable[[list[str], str], Awaitable[np.ndarray]]


@dataclass
class SearchQuery:
    query: str
    collections: list[str] = field(default_factory=list)
    filter: SearchFilter = field(default_factory=SearchFilter)
    top_k: int = 50
    dense_weight: float = 0.5
    sparse_weight: float = 0.5
    rrf_k: int = 60
    vector: np.ndarray | None = None

    def validate(self) -> None:
        if not self.query.strip() and self.vector is None:
            raise InvalidArgument("query", "must not be empty")
        check_top_k(self.top_k)
        if self.dense_weight < 0 or self.sparse_weight < 0 or self.dense_weight + self.sparse_weight == 0:
            raise InvalidArgument("dense_weight", "weights must be >= 0 and not both 0")
        if self.rrf_k < 1:
            raise InvalidArgument("rrf_k", f"must be at least 1, got {self.rrf_k}")
        filters.validate(self.filter)


@dataclass
class SearchOutcome:
    hits: list[Hit]
    candidate_count: int
    timings: dict[str, float]
    dense_skipped: bool = False


class SearchEngine:
    def __init__(self, registry: IndexRegistry, embed: EmbedFn) -> None:
        self.registry = registry
        self.embed = embed
        self.searches = 0

    async def search(self, q: SearchQuery) -> SearchOutcome:
        q.validate()
        self.searches += 1
        started = time.perf_counter()
        names = q.collections or self.registry.names()
        indexes = [ix for ix in (self.registry.get(n) for n in names) if ix is not None and len(ix)]
        timings = {"embed_ms": 0.0, "dense_ms": 0.0, "sparse_ms": 0.0, "fusion_ms": 0.0}
        vector, dense_skipped = q.vector, False
        if vector is None and indexes:
            t0 = time.perf_counter()
            try:
                vector = (await self.embed([q.query], "QUERY"))[0]
            except RagmeshError as exc:  # embedder down: keyword search still answers
                log.warning("embedder unavailable, sparse-only search", extra={"error": str(exc)})
                dense_skipped = True
            timings["embed_ms"] = (time.perf_counter() - t0) * 1000
        hits: list[Hit] = []
        candidates = 0
        for ix in indexes:
            found, admitted = await self._search_collection(q, ix, vector, timings)
            hits += found
            candidates += admitted
        hits.sort(key=lambda h: -h.score)
        hits = hits[: q.top_k]
        timings["total_ms"] = (time.perf_counter() - started) * 1000
        return SearchOutcome(hits, candidates, timings, dense_skipped)

    async def _search_collection(
        self, q: SearchQuery, ix: CollectionIndex, vector: np.ndarray | None, timings: dict[str, float]
    ) -> tuple[list[Hit], int]:
        depth = max(q.top_k * 2, 100)
        lists = await asyncio.to_thread(ix.search, q.query, vector, depth, q.filter)
        t1 = time.perf_counter()
        weights = (0.0 if vector is None else q.dense_weight, q.sparse_weight)
        hits = [
            Hit(ix.chunk(f.position), f.score, f.dense_rank, f.sparse_rank, f.dense_score, f.sparse_score)
            for f in weighted_rrf(lists.dense, lists.sparse, *weights, k=q.rrf_k)[: q.top_k]
        ]
        timings["dense_ms"] += lists.dense_ms
        timings["sparse_ms"] += lists.sparse_ms
        timings["fusion_ms"] += (time.perf_counter() - t1) * 1000
        return hits, lists.admitted
