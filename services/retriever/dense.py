"""Dense search with FAISS over chunk slots.

Exact inner product (IndexFlatIP) by default; as per-collection options for very large
collections, HNSW (M = 16, efConstruction = 64) or an IVF of 8-bit codes beside the exact
vectors (services.retriever.ivf). Filters and deleted slots arrive as a boolean mask that FAISS
applies as an ID-selector bitmap while it scans, so a filtered result is never outside the
filter, and exact rather than post-filtered from a truncated list.
"""
from __future__ import annotations

import faiss
import numpy as np

from services.retriever import ivf as ivf_codes
from services.retriever.ivf import IVFCodes

FLAT = "flat"
HNSW = "hnsw"
IVF = "ivf"
KINDS = (FLAT, HNSW, IVF)
# Below this share of admitted slots, HNSW's graph walk misses results (measured: recall@10 0.89
# at 10% with efSearch 128): scan them exactly, which at that share is also fast.
HNSW_EXACT_BELOW = 0.2
MAX_EF_SEARCH = 1024


def _empty() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)


class DenseIndex:
    def __init__(self, dimensions: int, kind: str = FLAT, hnsw_m: int = 16, ef_construction: int = 64,
                 ef_search: int = 128, exact_below: int | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"dense index kind must be one of {', '.join(KINDS)}, got {kind!r}")
        self.dimensions = dimensions
        self.kind = kind
        self.ef_search = ef_search
        # ivf: vectors held (and scanned exactly) before the IVF is trained
        self.exact_below = ivf_codes.EXACT_BELOW if exact_below is None else exact_below
        self.ivf: IVFCodes | None = None  # ivf, once trained: searched first, beside self.index (the record)
        if kind == HNSW:
            self.index = faiss.IndexHNSWFlat(dimensions, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            self.index.hnsw.efConstruction = ef_construction
        else:
            self.index = faiss.IndexFlatIP(dimensions)

    def __len__(self) -> int:
        return self.index.ntotal

    def add(self, vectors: np.ndarray) -> None:
        """Appends vectors; the i-th added gets the next slot number."""
        if not len(vectors):
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, self.dimensions)
        self.index.add(vectors)
        if self.ivf is not None:
            self.ivf.add(vectors)
        elif self.kind == IVF and len(self) >= max(self.exact_below, 1):
            self.ivf = IVFCodes.trained(self.vectors())

    def vectors(self) -> np.ndarray:
        """A no-copy view of the stored vectors (slots x dimensions)."""
        flat = faiss.downcast_index(self.index.storage) if self.kind == HNSW else self.index
        n = flat.ntotal
        if n == 0:
            return np.zeros((0, self.dimensions), np.float32)
        return faiss.rev_swig_ptr(flat.get_xb(), n * self.dimensions).reshape(n, self.dimensions)

    def search(self, query: np.ndarray, k: int, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(slots, scores) of the k best admitted slots, best first. `mask` covers every slot."""
        n = len(self)
        admitted = int(np.count_nonzero(mask[:n]))  # a tenth of sum's time on a bool array
        k = min(k, admitted)
        if k == 0:
            return _empty()
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, self.dimensions)
        bitmap = np.packbits(mask[:n], bitorder="little")  # the selector reads it: alive until the search ends
        selector = faiss.IDSelectorBitmap(n, faiss.swig_ptr(bitmap)) if admitted < n else None
        if self.ivf is not None:
            found = self._search_ivf(q, k, selector, admitted / n)
            if found is not None:
                return found
        index, params = self.index, None
        if selector is not None:
            if self.kind == HNSW and admitted >= HNSW_EXACT_BELOW * n:
                # A filter thins the graph: widen the walk in proportion, so recall holds.
                ef = min(MAX_EF_SEARCH, max(k, int(self.ef_search * n / admitted)))
                params = faiss.SearchParametersHNSW(sel=selector, efSearch=ef)
            else:  # flat (ivf's too), or HNSW's flat storage scanned exactly under a narrow filter
                index = faiss.downcast_index(self.index.storage) if self.kind == HNSW else self.index
                params = faiss.SearchParameters(sel=selector)
        elif self.kind == HNSW:
            params = faiss.SearchParametersHNSW(efSearch=max(self.ef_search, k))
        scores, ids = index.search(q, k, params=params)
        keep = ids[0] >= 0
        return ids[0][keep].astype(np.int64), scores[0][keep]

    def _search_ivf(self, q: np.ndarray, k: int, selector: faiss.IDSelector | None,
                    share: float) -> tuple[np.ndarray, np.ndarray] | None:
        """The IVF's candidates re-scored with the exact vectors; None when the exact scan must
        answer (a filter too narrow for the IVF, or fewer than k admitted candidates found)."""
        assert self.ivf is not None
        probes = self.ivf.probes(share)
        if not probes:
            return None
        slots = self.ivf.candidates(q, k, probes, selector)
        if len(slots) < k:
            return None
        scores = self.vectors()[slots] @ q[0]
        best = np.argsort(-scores, kind="stable")[:k]
        return slots[best].astype(np.int64), scores[best]
