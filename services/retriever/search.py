"""Hybrid search over one or more collections: every query variant's dense and sparse
lists under one compiled filter, fused (the engine's hybrid fusion, or linear), boosted, thresholded,
and merged across collections on their normalised scores. With the embedder down, the
keyword lists are ranked with recency (keyword_recency) whichever fusion was asked."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from ragmesh import metrics
from ragmesh.errors import InvalidArgument, RagmeshError
from ragmesh.types import Hit, SearchFilter
from ragmesh.validation import (
    MAX_QUERY_CHARS, MAX_VARIANTS, check_list, check_names, check_number, check_text, check_top_k, shown,
)
from services.retriever import filters, keyword_recency, personal
from services.retriever import fusion as ranking
from services.retriever.backend import SearchBackend
from services.retriever.fusion import (
    DEFAULT_FUSION, DEFAULT_RRF_K, HYBRID_WEIGHTS, LINEAR, LINEAR_DEFAULTS, RRF, Boosters, Candidate,
)

log = logging.getLogger(__name__)

EmbedFn = Callable[[list[str], str], Awaitable[np.ndarray]]
MAX_WEIGHT = 100.0  # dense, sparse and recency weights: relative, 0..100
MAX_RRF_K = 10_000


@dataclass
class SearchQuery:
    query: str
    collections: list[str] = field(default_factory=list)
    filter: SearchFilter = field(default_factory=SearchFilter)
    top_k: int = 50
    dense_weight: float | None = None  # default: the hybrid fusion's (HYBRID_WEIGHTS), 0.6 under LINEAR
    sparse_weight: float | None = None  # default: the hybrid fusion's (HYBRID_WEIGHTS), 0.25 under LINEAR
    recency_weight: float | None = None  # LINEAR only, default 0.15
    rrf_k: int = DEFAULT_RRF_K
    vector: np.ndarray | None = None
    variants: list[str] = field(default_factory=list)
    fusion: str = RRF  # RRF: the engine's hybrid fusion (FUSION: rrf, convex or dbsf); LINEAR: the notes contract's
    boosters: Boosters = field(default_factory=Boosters)
    reader: str = ""  # whose conversation memory may be searched ("" nobody's): see personal.reader

    def validate(self, dimensions: int) -> None:
        """Every field within its bounds (the limits live in ragmesh.validation); repeated
        collections and variants are dropped. `dimensions`: what a query_vector must have."""
        check_text("query", self.query, MAX_QUERY_CHARS)
        if not self.query.strip() and self.vector is None:
            raise InvalidArgument("query", "must not be empty")
        check_top_k(self.top_k)
        if self.fusion not in (RRF, LINEAR):
            raise InvalidArgument("fusion", f"must be RRF or LINEAR, got {shown(str(self.fusion))}")
        for name in ("dense_weight", "sparse_weight", "recency_weight"):
            check_number(name, getattr(self, name), 0.0, MAX_WEIGHT)
        check_number("rrf_k", self.rrf_k, 1, MAX_RRF_K)
        self.collections = check_names("collections", self.collections)
        variants = [v for v in self.variants if v.strip() and v != self.query]  # blank or the query: no extra list
        self.variants = check_list("variants", variants, MAX_VARIANTS, MAX_QUERY_CHARS)
        if self.vector is not None:
            if self.vector.ndim != 1 or len(self.vector) != dimensions:
                raise InvalidArgument("query_vector",
                                      f"has {self.vector.size:,} dimensions; the index has {dimensions}")
            if not np.isfinite(self.vector).all():
                raise InvalidArgument("query_vector", "must hold finite numbers (no NaN or infinity)")
        filters.validate(self.filter)
        self.boosters.validate()

    def weights(self, hybrid: str = DEFAULT_FUSION) -> tuple[float, float, float]:
        """Dense, keyword and recency weights: the caller's, else the defaults of the fusion used."""
        vec, kw, rec = LINEAR_DEFAULTS if self.fusion == LINEAR else (*HYBRID_WEIGHTS[hybrid], 0.0)
        pick = lambda given, default: default if given is None else given  # noqa: E731
        weights = pick(self.dense_weight, vec), pick(self.sparse_weight, kw), pick(self.recency_weight, rec)
        if not any(weights):
            raise InvalidArgument("dense_weight", "the weights must not all be 0")
        return weights


@dataclass
class SearchOutcome:
    hits: list[Hit]
    candidate_count: int
    timings: dict[str, float]
    dense_skipped: bool = False
    threshold_layer: int = 0


class SearchEngine:
    def __init__(self, registry: SearchBackend, embed: EmbedFn, fusion: str = DEFAULT_FUSION) -> None:
        """`fusion`: how a search that does not ask for linear fusion is fused (fusion.HYBRID_FUSIONS)."""
        self.registry = registry
        self.embed = embed
        self.fusion = fusion
        self.searches = 0

    async def search(self, q: SearchQuery) -> SearchOutcome:
        q.validate(self.registry.dimensions)
        weights = q.weights(self.fusion)
        self.searches += 1
        started = time.perf_counter()
        names = q.collections or self.registry.names()
        search_filter = q.filter
        start, end = q.boosters.window()
        if start:  # narrow the caller's date range to the window, never widen it
            search_filter = dataclasses.replace(
                search_filter, start_date=max(start, search_filter.start_date),
                end_date=min(end, search_filter.end_date or end),
            )
        scoped = {name: personal.scoped(name, search_filter, q.reader)
                  for name in self.registry.searchable(names, q.filter.tenant)}
        indexes = [name for name, f in scoped.items() if f is not None]
        timings = {"embed_ms": 0.0, "dense_ms": 0.0, "sparse_ms": 0.0, "fusion_ms": 0.0}
        queries = [q.query] + [v for v in dict.fromkeys(q.variants) if v.strip() and v != q.query]
        vectors, dense_skipped = None, False
        embedded = bool(indexes) and weights[0] > 0 and (q.vector is None or len(queries) > 1)
        if indexes and weights[0] > 0:
            t0 = time.perf_counter()
            try:
                vectors = await self._vectors(q, queries)
            except RagmeshError as exc:  # embedder down: keyword search still answers
                log.warning("embedder unavailable, sparse-only search", extra={"error": str(exc)})
                dense_skipped = True
            timings["embed_ms"] = (time.perf_counter() - t0) * 1000

        candidates: list[Candidate] = []
        parents: dict[str, str] = {}
        admitted = 0
        depth = max(q.top_k * 2, 100)
        for name in indexes:
            retrieved = await asyncio.to_thread(
                self.registry.search, name, queries, vectors, depth, scoped[name], q.boosters.expand_parents
            )
            if retrieved is None:  # emptied since it was counted
                continue
            t0 = time.perf_counter()
            dense_weight = weights[0] if vectors is not None else 0.0
            if dense_skipped:
                found = keyword_recency.fuse(retrieved, q.boosters)
            elif q.fusion == LINEAR:
                found = ranking.fuse_linear(retrieved, weights, q.boosters)
            elif self.fusion == RRF:
                found = ranking.fuse_rrf(retrieved, dense_weight, weights[1], q.rrf_k)
            else:
                found = ranking.fuse_scores(retrieved, self.fusion, dense_weight, weights[1])
            ranking.boost(found, q.boosters, " ".join(queries), self.registry.analyzer(name).analyze,
                          linear=q.fusion == LINEAR or dense_skipped)
            candidates += found
            parents |= retrieved.parents
            admitted += retrieved.admitted
            timings["dense_ms"] += retrieved.dense_ms
            timings["sparse_ms"] += retrieved.sparse_ms
            timings["fusion_ms"] += (time.perf_counter() - t0) * 1000
        ranked = ranking.order(candidates, q.boosters.prefer_authoritative)
        kept, layer = ranking.threshold(ranked, q.boosters)
        hits = ranking.expand_parents(kept[: q.top_k], parents)
        timings["total_ms"] = (time.perf_counter() - started) * 1000
        metrics.retrieval_stages(timings, embedded)
        return SearchOutcome(hits, admitted, timings, dense_skipped, layer)

    async def _vectors(self, q: SearchQuery, queries: list[str]) -> np.ndarray:
        """One vector per query variant; the caller's vector, if given, stands for the first."""
        if q.vector is None:
            return await self.embed(queries, "QUERY")
        given = q.vector.reshape(1, -1).astype(np.float32)
        if len(queries) == 1:
            return given
        return np.concatenate([given, await self.embed(queries[1:], "QUERY")])
