"""Exact inner-product search with FAISS; filters go in as an ID selector so the
filtered result is exact rather than post-filtered from a truncated list."""
from __future__ import annotations

import faiss
import numpy as np


class DenseIndex:
    def __init__(self, vectors: np.ndarray, dimensions: int) -> None:
        self.dimensions = dimensions
        self.index = faiss.IndexFlatIP(dimensions)
        if len(vectors):
            self.index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def __len__(self) -> int:
        return self.index.ntotal

    def search(self, query: np.ndarray, k: int, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions, scores) of the k best chunks the mask admits, best first."""
        allowed = np.flatnonzero(mask)
        k = min(k, len(allowed))
        if k == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        params = None
        if len(allowed) < len(self):
            params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(allowed.astype(np.int64)))
        scores, ids = self.index.search(query.reshape(1, -1).astype(np.float32), k, params=params)
        keep = ids[0] >= 0
        return ids[0][keep].astype(np.int64), scores[0][keep]
