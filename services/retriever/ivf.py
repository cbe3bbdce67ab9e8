"""The approximate dense option (`ivf`) for collections past what an exact scan serves in time.

An exact inner-product scan reads every vector: at 1M chunks of 384 dimensions that is 1.5 GB
a query, about 58 ms on one core, past the 20 ms a hybrid search may take. An inverted file
(IVF) scans only the lists nearest the query. Here its lists hold 4-bit product-quantised codes
(a byte per 8 dimensions: 48 B a 384-dim vector) scanned by FAISS's fast-scan kernels, which
look distances up in SIMD registers 32 codes at a time, on AVX2 as on AVX-512; the float
vectors in the flat index stay the record: they re-score the IVF's candidates exactly (so
scores are the exact cosines and the coarse codes only choose candidates), serve snapshots,
similarity and compaction, and answer whenever the IVF cannot be trusted to. An IVF written by
an earlier version (8-bit scalar codes) reads back and serves as it is until its next rebuild.

Filters stay exact: the filter's bitmap goes into the IVF scan as a FAISS ID selector, so no
slot outside the filter is ever returned. A filter thins every list, so the scan probes more
lists in proportion; when that would be a large share of the lists, or the IVF finds fewer
than k admitted slots, the exact scan over the admitted slots answers instead.

IVF needs training: a collection is scanned exactly until it holds `exact_below` vectors, then
the IVF is trained on its vectors (a one-time pause of its writes and searches) and kept up to
date with every later add. Its list count follows the size at training; a collection that
grows far past it is retrained by a rebuild (ConfigureCollection, compaction, or a restart
without a snapshot).
"""
from __future__ import annotations

import math

import faiss
import numpy as np

# Exact below this many vectors: one core scans 200k in about 12 ms, which with BM25 side by
# side and gRPC keeps a hybrid search within 20 ms (measured: 1M exact 58 ms of a 63 ms p50).
# Past it, at 1M synthetic chunks (1,024 lists trained at 200k), hybrid through gRPC, the same queries
# alternating between two retrievers in one run (AVX-512, 2 cores at load 6): p50 12.0 ms against 16.6 with
# 8-bit codes, 12.7 against 21.3 with the 10% filter; the dense side 1.3 / 2.3 ms of it, BM25 6.5 ms.
EXACT_BELOW = 200_000
LISTS_PER_SQRT = 2  # nlist = 2 * sqrt(n), a power of two: ~1,000 lists at 200k vectors
MIN_LISTS = 16
TRAIN_PER_LIST = 40  # FAISS asks for at least 39 training vectors a list
# Lists probed unfiltered: PROBES_PER_ROOT * sqrt(lists), a shrinking share as lists multiply. Measured
# recall@10 against exact on SciFact's MiniLM vectors (4-bit codes, 400 candidates re-scored) at sqrt(8 * lists)
# probes: 0.965 (title and abstract, 5,183 in 128 lists), 0.965 / 0.964 / 0.961 (44,757 sentences in 256 / 512 /
# 1,024 lists); a fixed 1/8 of the lists gave 0.92 at 128 lists. 3.5 (sqrt(12 * lists)) leaves a margin: 112 of
# 1,024 lists. The synthetic corpus's clusters: recall 1.0 from 8 of 1,024 lists.
PROBES_PER_ROOT = 3.5
MIN_PROBES = 8
# A filter thins every list, so it widens the probe by share ** -FILTER_WIDENING: its top k lies among the
# unfiltered top k / share, which crowd into the nearest lists. Measured on the same SciFact vectors with a
# 10% filter (x 1.78): 0.963 from 162 of 1,024 lists, 0.98 from 57 of 128; 1 / sqrt(share) probed 102 of 128 for 0.999.
FILTER_WIDENING = 0.25
# Past this share of lists, a filtered search scans exactly. The selector skips the codes outside the
# filter after their distances are looked up, so a filtered probe costs what an unfiltered one of as many
# lists does. Measured with a 10% filter at 1M synthetic chunks (1,024 lists, one thread): 4.0 ms of CPU
# for 405 lists against 11.4 ms with 8-bit codes and 21.5 ms exact.
MAX_FILTERED_SHARE = 0.5
REFINE = 4  # IVF candidates re-scored exactly per result wanted
# At least this many: 4-bit codes order near neighbours coarsely, so a short list of candidates misses some.
# Measured at 200k synthetic vectors (1,024 lists, 128 probed): recall@10 0.80 from 40 candidates, 1.0 from
# 400; re-scoring 400 costs about 0.3 ms. Against 8-bit scalar codes, one thread, the same probes: 0.37
# against 1.34 ms a scan unfiltered, 1.19 against 2.69 with the 10% filter (FAISS's AVX2 kernels: 0.36
# against 1.67, 1.12 against 2.89).
MIN_CANDIDATES = 400
DIMENSIONS_PER_CODE = 4  # dimensions a 4-bit sub-quantiser codes: 384 dimensions in 96 codes
MIN_CODES = 32  # short vectors get a code per dimension up to this many: 16 dimensions in 4 codes rank too coarsely


def list_count(n: int) -> int:
    """Lists for an IVF trained on n vectors: a power of two near 2 * sqrt(n), enough
    vectors each to train (at least TRAIN_PER_LIST)."""
    wanted = max(MIN_LISTS, LISTS_PER_SQRT * math.sqrt(n))
    nlist = 2 ** round(math.log2(wanted))
    while nlist > MIN_LISTS and nlist * TRAIN_PER_LIST > n:
        nlist //= 2
    return nlist


def subquantizers(dimensions: int) -> int:
    """4-bit sub-quantisers for a vector: one per DIMENSIONS_PER_CODE dimensions, a divisor of the dimensions."""
    m = max(1, dimensions // DIMENSIONS_PER_CODE, min(dimensions, MIN_CODES))
    while dimensions % m:
        m -= 1
    return m


class IVFCodes:
    """An IVF of 4-bit PQ codes over the same slots as the flat index (slot i = the i-th vector added)."""

    def __init__(self, index: faiss.IndexIVF) -> None:
        self.index = index

    @classmethod
    def trained(cls, vectors: np.ndarray, seed: int = 1234) -> "IVFCodes":
        """An IVF trained on (a sample of) these vectors, holding all of them."""
        n, dimensions = vectors.shape
        nlist = list_count(n)
        quantizer = faiss.IndexFlatIP(dimensions)
        index = faiss.IndexIVFPQFastScan(quantizer, dimensions, nlist, subquantizers(dimensions), 4,
                                         faiss.METRIC_INNER_PRODUCT)
        quantizer.this.disown()  # the IVF owns and frees its quantizer, as one read back from a snapshot does
        index.own_fields = True
        sample = min(n, nlist * 64)
        rows = np.sort(np.random.default_rng(seed).choice(n, sample, replace=False)) if sample < n else slice(None)
        index.train(np.ascontiguousarray(vectors[rows]))
        codes = cls(index)
        codes.add(vectors)
        return codes

    def __len__(self) -> int:
        return self.index.ntotal

    @property
    def nlist(self) -> int:
        return self.index.nlist

    def add(self, vectors: np.ndarray) -> None:
        self.index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def probes(self, share: float) -> int:
        """Lists to probe when `share` of the slots are admitted: more as a filter thins them
        (by share ** -FILTER_WIDENING); 0 = scan exactly instead."""
        base = max(MIN_PROBES, math.ceil(PROBES_PER_ROOT * math.sqrt(self.nlist)))
        wanted = math.ceil(base * share ** -FILTER_WIDENING)
        if share < 1 and wanted > MAX_FILTERED_SHARE * self.nlist:
            return 0
        return min(self.nlist, wanted)

    def candidates(self, query: np.ndarray, k: int, probes: int, selector: faiss.IDSelector | None) -> np.ndarray:
        """Slots of up to max(REFINE * k, MIN_CANDIDATES) approximate best matches among the admitted slots."""
        params = faiss.SearchParametersIVF(nprobe=probes, sel=selector) if selector is not None \
            else faiss.SearchParametersIVF(nprobe=probes)
        _, ids = self.index.search(query, max(REFINE * k, MIN_CANDIDATES), params=params)
        return ids[0][ids[0] >= 0]
