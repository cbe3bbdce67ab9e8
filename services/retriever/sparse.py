"""BM25 (Okapi, k1 = 1.5, b = 0.75) over a collection, via rank-bm25 in this first cut."""
from __future__ import annotations

import numpy as np
from rank_bm25 import BM25Okapi

from ragmesh.text import tokenize

class SparseIndex:
    def __init__(self, texts: list[str]) -> None:
        self.size = len(texts)
        corpus = [tokenize(t) for t in texts]
        # rank-bm25 divides by the corpus size and average length: give it a placeholder when empty.
        self.bm25 = BM25Okapi(corpus or [["_"]], k1=1.5, b=0.75, epsilon=0.25) if any(corpus) else None

    def search(self, query: str, k: int, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions, scores) of the k best-scoring admitted chunks with a score above zero."""
        tokens = tokenize(query)
        if self.bm25 is None or not tokens or k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        scores = np.asarray(self.bm25.get_scores(tokens), dtype=np.float64)
        scores = np.where(mask & (scores > 0), scores, -np.inf)
        candidates = np.flatnonzero(np.isfinite(scores))
        if len(candidates) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        k = min(k, len(candidates))
        top = candidates[np.argpartition(-scores[candidates], k - 1)[:k]]
        top = top[np.argsort(-scores[top], kind="stable")]
        return top.astype(np.int64), scores[top].astype(np.float32)
