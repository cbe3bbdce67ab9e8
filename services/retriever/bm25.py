"""BM25 Okapi served from an incremental inverted index, scoring exactly like rank_bm25.

`rank_bm25.BM25Okapi` scores every document in Python for every query (about 0.5 s at
100k chunks). This index keeps, per term, numpy postings (doc ids + term frequencies) and
scores a query by gathering only the postings of its terms, so the cost follows the
postings touched, not the corpus size.

Exactness. For the same token lists the scores equal
`BM25Okapi(corpus, k1, b, epsilon).get_scores(query)` built on the live documents:
- N counts every live document, empty ones too; avgdl = total live tokens / N.
- idf(t) = log(N - n_t + 0.5) - log(n_t + 0.5) over the live document frequency n_t.
  The mean of those raw idfs over the whole live vocabulary (negative ones included) is
  taken first; then every term with idf < 0 gets epsilon * that mean instead.
- Each query token adds idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)),
  repeated tokens adding again; tokens absent from the live vocabulary add nothing.
The per-posting arithmetic is the same float64 expression in the same order, and each
document sums its contributions in query order, so scores match rank_bm25 bit for bit
except the epsilon floor: its mean is summed in another order with numpy's log (1e-15
relative). Rankings are therefore identical except among docs whose rank_bm25 scores
differ by rounding only, e.g. when the mean idf is 0 up to rounding and the floor is noise.

Because the floor can make idf negative (epsilon * a negative mean) and an idf can be
exactly 0, a document containing a query term can score <= 0. Every document that
contains no query term scores exactly 0 in rank_bm25; those are never returned.

Pruned top k. `scores` scores every posting of every query term; at 1M chunks a query with
common terms touches millions of postings. `top_k` returns exactly the same k (same ids, same
order, the same float64 bits) while scoring far fewer, MaxScore-style, vectorised:
- Bounds. Per term the index keeps the highest tf and the shortest document length in its
  postings (raised on add, recomputed on compaction; after a removal a stale value still
  bounds the live postings). Since tf / (tf + norm) grows with tf and shrinks with norm, no
  doc gets more than bound(t) = repeats * max(idf, 0) * (k1 + 1) * tf_max / (tf_max + norm_min)
  from term t (0 for idf <= 0: such a term never raises a score).
- Threshold. A few thousand allowed docs likely to score high (the rarest terms' postings,
  a long list's highest tfs) are scored exactly; theta, their k-th best score, is at most
  the true k-th best, so every doc of the true top k scores >= theta.
- Candidates. With the rarest lists taken whole, a doc outside them scores at most its
  contribution from one remaining term plus the others' bounds: if all remaining bounds
  sum below theta no such doc qualifies; otherwise a remaining term whose share must be
  positive admits only docs that reach it (a tf test, then norm <= a limit per tf). A cost
  model picks how many lists to take whole, or scores every posting when nothing pays
  (then only docs reaching theta are ranked).
- Scoring. Candidates are looked up in every term's doc-sorted postings (binary search, or
  one pass when they are many), largest bound first, dropping a doc once its known
  contributions plus the remaining bounds fall below theta; the survivors' scores are then
  summed from 0 in query order with the same per-posting expression as `scores` (a term
  a doc lacks adds 0.0, which keeps the bits), and ranked like `scores`' (ties by id).
Every comparison against theta keeps a margin of 1e-9 of the scores' magnitude, far above
float64 rounding (1e-16 per operation), so a doc is dropped only if its exact score is below
theta: the result is the full scoring's. Postings are kept sorted by doc id for the lookups
(ids reused or added out of order are merged in by the writer, never by readers).
A term listed for at least 1 in _COLUMN_SHARE doc ids is looked up in a dense column instead:
its term frequency per doc id, built from its postings by the first reader that needs it and
kept current by the writes that change them. A byte per doc id is at most what its postings take
(8 bytes each), and a gather from it costs a fraction of a binary search through that list
(at 1M docs: 42 columns, 46 MB, for the benchmark's queries; BM25 top 100 about 0.75x the time).

Writes. `add` appends to per-term growable buffers (amortised, 25% headroom). `remove` marks a
tombstone: N, document frequencies and total length change at once, dead postings are
left out at query time and a term's postings are compacted when more than a quarter are
dead. The caller hands `remove` the document's tokens again (the retriever re-analyses the
chunk's text, which it keeps anyway), so removal touches only the removed document's terms
without a forward list per live document: that list cost as much as a third of the index.
The document's length and an 8-byte signature (a hash of its distinct term ids) check those
tokens; tokens that do not match (an analyzer that changed) fall back to finding the
document's terms by scanning the postings: slow, but never wrong. Only removed documents
keep their term ids, until their dead postings are purged.

Concurrency: one writer at a time, and readers must not run during a write (buffers are
reallocated and compacted in place). Readers may run concurrently with each other.
"""
from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

log = logging.getLogger(__name__)

_MAX_DOC_ID = 2**31 - 1  # postings store doc ids as int32
_DEAD_SHARE = 0.25  # compact a term's postings once this share of them is tombstoned
_PURGE_MIN = 1 << 16  # removed documents' term ids kept below this many before a full purge
_EMPTY_POSTINGS = np.zeros((2, 0), dtype=np.int32)
_NO_IDS = np.zeros(0, dtype=np.int64)
_NO_SCORES = np.zeros(0, dtype=np.float64)
# Pruned top k (see module doc).
_SEEDS = 2048  # docs scored first for the threshold (at least 8 * k)
_TF_SAMPLE = 4096  # term frequencies sampled to pick a long list's seeds
_MARGIN = 1e-9  # bounds must clear the threshold by this share of the scores' magnitude
_UNION_MARKED = 8  # a union of more than 1 in this many doc ids marks them (_union)
_COLUMN_SHARE = 8  # a term listed for at least 1 in this many doc ids is looked up in a dense tf column
# Rough cost per unit, in ns on one core at 1M docs: scoring every posting, scoring a
# candidate's term once found (scattered, summed, compared), a step of a lookup (see
# _lookup_steps), testing a posting's term frequency, testing it against its doc's length.
_FULL_COST, _CANDIDATE_COST, _LOOKUP_COST, _SCAN_COST, _FILTER_COST = 15.0, 30.0, 2.0, 0.5, 12.0


@dataclass(frozen=True)
class _Stats:
    """Corpus statistics for one index version, shared by queries until the next write."""

    version: int
    n_docs: int
    floor: float  # epsilon * mean raw idf, replaces negative idfs
    norm: np.ndarray  # per doc id: k1 * (1 - b + b * dl / avgdl)
    avgdl: float


@dataclass(frozen=True)
class _Query:
    """A query's distinct live terms, rarest first, with what pruning needs of each."""

    terms: list[int]
    idf: list[float]
    repeats: np.ndarray  # times the term occurs in the query
    bound: np.ndarray  # >= the term's contribution to any doc's score, repeats included
    df: np.ndarray
    magnitude: float  # >= the sum of |contributions| of any doc: the scale of rounding
    norm_min: np.ndarray  # <= the norm of every doc in the term's postings
    sequence: list[int]  # index into terms of each query token, in query order


def _lookup_steps(n_docs: float, listed: float, n_ids: int) -> tuple[float, float]:
    """Steps to find n_docs docs in a term's `listed` postings: by binary search, or by one
    pass over the postings and a position per doc id (`_lookup` takes the fewer); one a doc
    for a term listed for 1 in _COLUMN_SHARE doc ids, looked up in its tf column."""
    if listed * _COLUMN_SHARE >= n_ids:
        return n_docs, n_docs
    return n_docs * math.log2(listed + 2), listed + n_ids / 4


def _plan(
    query: _Query, floor: float, reaching: Callable[[int, float], tuple[float, float]], n_ids: int
) -> tuple[int, int | None, float] | None:
    """How to gather a superset of the docs scoring >= floor (the threshold less its
    margin), or None if scoring every posting is cheaper: (the number of rarest terms whose
    postings are taken whole, the term whose other postings are filtered by contribution or
    None, the contribution needed).

    A doc outside the whole lists scores at most its contribution from one remaining term
    plus the bounds of the others; if even the bounds of all remaining terms stay below
    floor, no such doc qualifies. Costs count every candidate looked up in every term.
    """
    n_terms = len(query.terms)
    best_cost, best = _FULL_COST * float(query.df.sum()), None
    for whole in range(n_terms + 1):
        cost, candidates = 0.0, float(query.df[:whole].sum())
        rest = query.bound[whole:]
        others = float(rest.sum()) - rest  # per remaining term: the bounds of the others
        if float(rest.sum()) < floor:
            plan = (whole, None, 0.0)
        else:
            usable = np.flatnonzero(floor - others > 0)
            if len(usable) == 0:
                continue
            driver = whole + int(usable[0])  # the shortest list: terms are rarest first
            plan = (whole, driver, floor - float(others[usable[0]]))
            tested, kept = reaching(driver, plan[2])
            cost += _SCAN_COST * float(query.df[driver]) + _FILTER_COST * tested
            candidates += kept
        cost += _CANDIDATE_COST * candidates * n_terms
        cost += _LOOKUP_COST * sum(min(_lookup_steps(candidates, float(df), n_ids)) for df in query.df)
        if cost < best_cost:
            best_cost, best = cost, plan
    return best


def _union(parts: list[np.ndarray], size: int) -> np.ndarray:
    """The distinct doc ids of `parts`, ascending: sorted when few, else marked per doc id
    (np.unique hashes first, several times slower on these small integer arrays). The parts
    are mostly runs already ascending (postings), which a stable sort (timsort) merges: at
    1M doc ids about 4x faster than the default sort for 30k ids, and than marking up to 100k."""
    if sum(len(p) for p in parts) < size // _UNION_MARKED:
        ids = np.sort(np.concatenate(parts), kind="stable")
        return ids[np.r_[True, ids[1:] != ids[:-1]]] if len(ids) else ids
    marked = np.zeros(size, dtype=bool)
    for part in parts:
        marked[part] = True
    return np.flatnonzero(marked).astype(np.int32)


def _best(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of (ids ascending, scores), best first, ties by lower id."""
    if len(ids) == 0:
        return _NO_IDS, _NO_SCORES
    if len(ids) > k:
        # Keep everything tied with the k-th score so ties resolve by id, not by partition order.
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= kth
        ids, scores = ids[keep], scores[keep]
    order = np.argsort(-scores, kind="stable")[:k]  # ids are ascending: stable = lower id first
    return ids[order].astype(np.int64), scores[order]


def _mixed(terms: np.ndarray) -> np.ndarray:
    """splitmix64 of each term id (+1, so no term mixes to 0): summed over a document's
    distinct terms, its signature."""
    x = (terms.astype(np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    """`array` with room for `size` entries along axis -1, new entries zero.

    Growing by a quarter keeps appends amortised O(1) (about 4 copies per entry) while
    capping the unused tail at 25% of the postings, the index's main memory.
    """
    capacity = array.shape[-1]
    if size <= capacity:
        return array
    new = np.zeros(array.shape[:-1] + (max(size, capacity + capacity // 4, 8),), dtype=array.dtype)
    new[..., :capacity] = array
    return new


class BM25Index:
    """Inverted BM25 index over caller-chosen integer doc ids (e.g. chunk positions)."""

    def __init__(self, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25) -> None:
        self.k1, self.b, self.epsilon = k1, b, epsilon
        self._vocab: dict[str, int] = {}
        # Per term id: postings as int32 (2, capacity) = (doc ids, term freqs) and counters.
        self._postings: list[np.ndarray] = []
        self._used = np.zeros(0, dtype=np.int64)  # postings slots in use, dead included
        self._df = np.zeros(0, dtype=np.int64)  # live documents containing the term
        self._dead = np.zeros(0, dtype=np.int64)  # tombstoned postings still stored
        # Bounds of a term's contribution: the highest tf and the shortest doc in its postings
        # since its last compaction (after removals, still bounds of the live ones).
        self._tf_max = np.zeros(0, dtype=np.int32)
        self._len_min = np.zeros(0, dtype=np.int64)
        # Per doc id.
        self._alive = np.zeros(0, dtype=bool)
        self._doc_len = np.zeros(0, dtype=np.int64)
        self._doc_sig = np.zeros(0, dtype=np.uint64)  # sum of _mixed(distinct terms): checks remove's tokens
        # Removed docs whose postings may still be stored: their term ids, so reusing the id
        # purges them first.
        self._removed: dict[int, np.ndarray] = {}
        self._removed_pairs = 0  # term ids held in _removed
        self._live_pairs = 0  # postings of live docs
        self._n_docs = 0
        self._total_len = 0
        self._version = 0
        self._stats_cache: _Stats | None = None
        self._tf_columns: dict[int, np.ndarray] = {}  # per common term: tf per doc id (_tf_column)

    def __len__(self) -> int:
        return self._n_docs

    def __contains__(self, doc_id: int) -> bool:
        return 0 <= doc_id < len(self._alive) and bool(self._alive[doc_id])

    def __getstate__(self) -> dict:
        """Pickle without the statistics cache and tf columns: they are derived and as large as the doc ids."""
        return {**self.__dict__, "_stats_cache": None, "_tf_columns": {}}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_tf_columns", {})  # pickled before the columns existed

    def doc_freq(self, term: str) -> int:
        """Live documents containing `term` (the n in its idf)."""
        term_id = self._vocab.get(term)
        return 0 if term_id is None else int(self._df[term_id])

    # ---------------------------------------------------------------- writes

    def add(self, doc_id: int, tokens: Sequence[str]) -> None:
        """Index one document; `doc_id` must not be live (remove it first to replace)."""
        self.add_many([doc_id], [tokens])

    def add_many(self, doc_ids: Iterable[int], token_lists: Iterable[Sequence[str]]) -> None:
        """Index a batch in one pass: vectorised, so bulk loads are not Python per posting."""
        ids = np.fromiter((int(d) for d in doc_ids), dtype=np.int64)
        token_lists = list(token_lists)
        if len(ids) != len(token_lists):
            raise ValueError("doc_ids and token_lists differ in length")
        if len(ids) == 0:
            return
        self._check_new_ids(ids)
        lengths = np.fromiter((len(t) for t in token_lists), dtype=np.int64, count=len(ids))
        term_ids = self._term_ids(token_lists, int(lengths.sum()))
        self._ensure_docs(int(ids.max()) + 1)
        self._purge_stale(ids)

        # Unique (term, doc id rank) pairs, sorted by term then doc id, with their term frequency.
        by_id = np.argsort(ids, kind="stable")
        rank = np.empty(len(ids), dtype=np.int64)
        rank[by_id] = np.arange(len(ids), dtype=np.int64)
        owner = np.repeat(rank, lengths)
        pairs, tfs = np.unique((term_ids << 32) | owner, return_counts=True)
        pair_terms, pair_owner = pairs >> 32, by_id[pairs & 0xFFFFFFFF]
        self._append_postings(pair_terms, ids[pair_owner].astype(np.int32), tfs.astype(np.int32), lengths[pair_owner])
        signatures = np.zeros(len(ids), dtype=np.uint64)
        np.add.at(signatures, pair_owner, _mixed(pair_terms))  # wraps modulo 2**64, order-free
        self._doc_sig[ids] = signatures

        self._alive[ids] = True
        self._doc_len[ids] = lengths
        self._n_docs += len(ids)
        self._total_len += int(lengths.sum())
        self._live_pairs += len(pairs)
        self._version += 1

    def remove(self, doc_id: int, tokens: Sequence[str] | None = None) -> None:
        """Tombstone a live document; its statistics leave the index immediately. Given the
        tokens it was added with, this touches only its terms; otherwise it scans."""
        if doc_id not in self:
            raise KeyError(f"doc id {doc_id} is not in the index")
        terms = self._terms_given(doc_id, tokens) if tokens is not None else None
        if terms is None:
            if tokens is not None:
                log.warning("BM25 removal scans the postings: the tokens given differ from those the "
                            "document was added with (did the analyzer change?)", extra={"doc_id": doc_id})
            terms = self._terms_scanned(doc_id)
        self._alive[doc_id] = False
        self._n_docs -= 1
        self._total_len -= int(self._doc_len[doc_id])
        self._doc_len[doc_id] = 0
        self._df[terms] -= 1
        self._dead[terms] += 1
        self._live_pairs -= len(terms)
        for term in terms[self._dead[terms] > _DEAD_SHARE * self._used[terms]]:
            self._compact_term(int(term))
        self._removed[doc_id] = terms.astype(np.int32)
        self._removed_pairs += len(terms)
        if self._removed_pairs > max(self._live_pairs, _PURGE_MIN):
            self._purge_all()
        self._version += 1

    def _terms_given(self, doc_id: int, tokens: Sequence[str]) -> np.ndarray | None:
        """The document's distinct term ids from its tokens, or None if they do not match it."""
        if len(tokens) != self._doc_len[doc_id]:
            return None
        try:
            terms = np.unique(np.fromiter(map(self._vocab.__getitem__, tokens), dtype=np.int64, count=len(tokens)))
        except KeyError:
            return None
        return terms if _mixed(terms).sum(dtype=np.uint64) == self._doc_sig[doc_id] else None

    def _terms_scanned(self, doc_id: int) -> np.ndarray:
        """The document's distinct term ids, found in the postings (a reused id's old postings
        were purged when it came back, so every stored posting of a live id is its own)."""
        found = [term for term, postings in enumerate(self._postings)
                 if self._used[term] and (postings[0, : self._used[term]] == doc_id).any()]
        return np.array(found, dtype=np.int64)

    def _check_new_ids(self, ids: np.ndarray) -> None:
        if ids.min() < 0 or ids.max() > _MAX_DOC_ID:
            raise ValueError(f"doc ids must be in 0..{_MAX_DOC_ID}")
        if len(np.unique(ids)) != len(ids):
            raise ValueError("duplicate doc ids in one batch")
        known = ids[ids < len(self._alive)]
        if self._alive[known].any():
            raise ValueError(f"doc id {int(known[self._alive[known]][0])} is already indexed")

    def _term_ids(self, token_lists: list[Sequence[str]], total: int) -> np.ndarray:
        """Term ids of every token in order, new terms getting the next ids."""
        vocab = self._vocab
        # New terms get ids in first-seen order (deterministic); Python steps per distinct token only.
        for token in dict.fromkeys(chain.from_iterable(token_lists)):
            vocab.setdefault(token, len(vocab))
        term_ids = np.fromiter(map(vocab.__getitem__, chain.from_iterable(token_lists)), dtype=np.int64, count=total)
        n_terms = len(vocab)
        self._used = _grown(self._used, n_terms)
        self._df = _grown(self._df, n_terms)
        self._dead = _grown(self._dead, n_terms)
        self._tf_max = _grown(self._tf_max, n_terms)
        self._len_min = _grown(self._len_min, n_terms)
        self._postings.extend([_EMPTY_POSTINGS] * (n_terms - len(self._postings)))
        return term_ids

    def _ensure_docs(self, size: int) -> None:
        self._alive = _grown(self._alive, size)
        self._doc_len = _grown(self._doc_len, size)
        self._doc_sig = _grown(self._doc_sig, size)

    def _purge_stale(self, ids: np.ndarray) -> None:
        """Drop the dead postings of reused ids, so a stored posting of a live id is current."""
        if not self._removed:
            return
        for doc_id in ids.tolist():
            terms = self._removed.pop(doc_id, None)
            if terms is not None:
                self._removed_pairs -= len(terms)
                for term in terms[self._dead[terms] > 0]:
                    self._compact_term(int(term))

    def _purge_all(self) -> None:
        """Compact every term with dead postings; removed docs' term ids are then not needed."""
        for term in np.flatnonzero(self._dead):
            self._compact_term(int(term))
        self._removed.clear()
        self._removed_pairs = 0

    def _append_postings(self, terms: np.ndarray, docs: np.ndarray, tfs: np.ndarray, lengths: np.ndarray) -> None:
        """Append runs of postings (sorted by term, then doc id); one Python step per distinct term.

        A term's postings stay sorted by doc id, which top_k's lookups rely on: a run that
        does not start past the stored ids (reused ids, batches out of id order, both rare:
        the retriever appends fresh slots) is merged in, O(postings) for that term.
        """
        if len(terms) == 0:
            return
        starts = np.flatnonzero(np.r_[True, terms[1:] != terms[:-1]])
        ends = np.r_[starts[1:], len(terms)]
        run_terms = terms[starts]
        for term, start, end in zip(run_terms.tolist(), starts.tolist(), ends.tolist()):
            self._set_in_column(term, docs[start:end], tfs[start:end])
            used = int(self._used[term])
            buf = _grown(self._postings[term], used + end - start)
            if used and buf[0, used - 1] > docs[start]:
                at = np.searchsorted(buf[0, :used], docs[start:end])
                buf[:, : used + end - start] = np.insert(buf[:, :used], at, (docs[start:end], tfs[start:end]), axis=1)
            else:
                buf[0, used : used + end - start] = docs[start:end]
                buf[1, used : used + end - start] = tfs[start:end]
            self._postings[term] = buf
        sizes = ends - starts
        shortest = np.minimum.reduceat(lengths, starts)
        known = np.where(self._used[run_terms] > 0, self._len_min[run_terms], shortest)
        self._len_min[run_terms] = np.minimum(known, shortest)
        self._used[run_terms] += sizes
        self._df[run_terms] += sizes
        self._tf_max[run_terms] = np.maximum(self._tf_max[run_terms], np.maximum.reduceat(tfs, starts))

    def _compact_term(self, term: int) -> None:
        used = int(self._used[term])
        postings = self._postings[term][:, :used]
        live = self._alive[postings[0]]
        self._set_in_column(term, postings[0, ~live], 0)  # a dead doc's id may come back without the term
        kept = postings[:, live]
        self._postings[term] = np.ascontiguousarray(kept) if kept.shape[1] else _EMPTY_POSTINGS
        self._used[term] = kept.shape[1]
        self._dead[term] = 0
        self._tf_max[term] = kept[1].max(initial=0)
        if kept.shape[1]:  # else the next append sets it
            self._len_min[term] = self._doc_len[kept[0]].min()

    # ----------------------------------------------------------------- reads

    def scores(self, query_tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(doc ids ascending, scores) of every live doc containing a query term.

        Docs not returned score exactly 0; returned ones may score <= 0 (see module doc).
        """
        terms = self._query_terms(query_tokens)
        if not terms:
            return _NO_IDS, _NO_SCORES
        totals, present = self._scored_all(terms, self._stats())
        ids = np.flatnonzero(present & self._alive)
        return ids, totals[ids]

    def top_k(
        self, query_tokens: Sequence[str], k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The k highest-scoring allowed docs among those containing a query term.

        Best first, ties by lower doc id. `allowed` is a bool mask over doc ids; ids past
        its end are not allowed (fail closed). Scores may be <= 0 (see module doc).
        Exactly the selection over `scores`, usually without scoring most postings.
        """
        terms = self._query_terms(query_tokens)
        if k <= 0 or not terms:
            return _NO_IDS, _NO_SCORES
        stats = self._stats()
        ok = self._alive
        if allowed is not None:
            allowed = np.asarray(allowed, dtype=bool)[: len(ok)]
            ok = ok.copy()
            ok[: len(allowed)] &= allowed
            ok[len(allowed) :] = False
        found, floor = self._pruned(self._query(terms, stats), k, ok, stats)
        if found is None:
            totals, keep = self._scored_all(terms, stats)
            keep &= ok
            if floor > -math.inf:  # only docs reaching the threshold, so few are ranked
                keep &= totals >= floor
            ids = np.flatnonzero(keep)
            found = ids, totals[ids]
        return _best(*found, k)

    def _query_terms(self, query_tokens: Sequence[str]) -> list[int]:
        """Term ids of the query tokens with live postings, in query order, repeats included."""
        return [t for t in (self._vocab.get(q) for q in query_tokens) if t is not None and self._df[t] > 0]

    def _scored_all(self, terms: list[int], stats: _Stats) -> tuple[np.ndarray, np.ndarray]:
        """Every posting of every query term scored, the reference `top_k` prunes towards:
        per doc id, its score and whether it holds a query term. Tombstoned postings are
        scored too (cheaper than skipping them): callers keep live ids only."""
        totals = np.zeros(len(self._alive))
        present = np.zeros(len(self._alive), dtype=bool)
        per_term: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for term in terms:  # in query order, repeats included, so sums round like rank_bm25's
            if term not in per_term:
                per_term[term] = self._term_contributions(term, stats)
                present[per_term[term][0]] = True
            docs, contributions = per_term[term]
            totals[docs] += contributions  # a term lists a doc once: no lost updates
        return totals, present

    def _stats(self) -> _Stats:
        """Corpus statistics, recomputed once per write burst (O(vocabulary + doc ids))."""
        cached = self._stats_cache
        if cached is not None and cached.version == self._version:
            return cached
        n_docs = self._n_docs
        df = self._df[: len(self._vocab)]
        df = df[df > 0]
        raw_idf = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
        floor = self.epsilon * (float(raw_idf.sum()) / len(df))  # eps * average_idf, as rank_bm25
        avgdl = self._total_len / n_docs
        # Same expression and evaluation order as rank_bm25, so denominators match bit for bit.
        norm = self.k1 * (1 - self.b + self.b * self._doc_len / avgdl)
        cached = _Stats(self._version, n_docs, floor, norm, avgdl)
        self._stats_cache = cached
        return cached

    def _idf(self, term: int, stats: _Stats) -> float:
        n = int(self._df[term])
        idf = math.log(stats.n_docs - n + 0.5) - math.log(n + 0.5)
        return stats.floor if idf < 0 else idf

    def _term_contributions(self, term: int, stats: _Stats) -> tuple[np.ndarray, np.ndarray]:
        """(doc ids, idf * tf part) over the term's stored postings, dead ones included."""
        docs, tfs = self._postings[term][0, : self._used[term]], self._postings[term][1, : self._used[term]]
        return docs, self._idf(term, stats) * (tfs * (self.k1 + 1) / (tfs + stats.norm[docs]))

    # ------------------------------------------------------ pruned top k

    def _query(self, terms: list[int], stats: _Stats) -> _Query:
        distinct = sorted(set(terms), key=lambda t: (int(self._df[t]), t))
        idf = [self._idf(t, stats) for t in distinct]
        repeats = np.array([terms.count(t) for t in distinct], dtype=np.float64)
        tf_max = self._tf_max[distinct].astype(np.float64)
        # The norm expression of `_stats` on each term's shortest doc: no live posting's is lower.
        norm_min = self.k1 * (1 - self.b + self.b * self._len_min[distinct] / stats.avgdl)
        saturation = (self.k1 + 1) * tf_max / (tf_max + norm_min)
        return _Query(
            terms=distinct,
            idf=idf,
            repeats=repeats,
            bound=repeats * np.maximum(idf, 0.0) * saturation,
            df=self._df[distinct].copy(),
            magnitude=float(repeats @ np.abs(idf)) * (self.k1 + 1),
            norm_min=norm_min,
            sequence=[distinct.index(t) for t in terms],
        )

    def _pruned(
        self, query: _Query, k: int, ok: np.ndarray, stats: _Stats
    ) -> tuple[tuple[np.ndarray, np.ndarray] | None, float]:
        """((doc ids ascending, scores) of allowed docs including the top k, or None when
        pruning would not pay and everything must be scored; a score every doc of the top k
        reaches, or -inf)."""
        wanted = max(_SEEDS, 8 * k)
        seeding = _CANDIDATE_COST * wanted * len(query.terms)
        seeding += _LOOKUP_COST * sum(min(_lookup_steps(wanted, float(df), len(ok))) for df in query.df)
        if seeding > _FULL_COST * float(query.df.sum()):
            return None, -math.inf  # a small corpus: a threshold would cost more than scoring everything
        seeds = self._seeds(query, ok, wanted)
        if len(seeds) < k:
            return None, -math.inf
        _, seed_scores = self._scored(seeds, query, stats)
        theta = float(np.partition(seed_scores, len(seeds) - k)[len(seeds) - k])
        floor = theta - _MARGIN * (abs(theta) + query.magnitude)
        plan = _plan(query, floor, lambda i, need: self._reaching_estimate(query, i, need, ok, stats), len(ok))
        if plan is None:
            return None, floor
        whole, driver, need = plan
        parts = [self._postings[t][0, : self._used[t]] for t in query.terms[:whole]]
        parts = [docs[ok[docs]] for docs in parts]
        if driver is not None:
            parts.append(self._reaching(query, driver, need, ok, stats)[0])
        return self._scored(_union(parts, len(ok)), query, stats, floor), floor

    def _seeds(self, query: _Query, ok: np.ndarray, wanted: int) -> np.ndarray:
        """Up to `wanted` allowed live docs likely to score high, to set the threshold: the
        rarest terms' postings, and from a long list only its highest term frequencies."""
        chosen, total = [], 0
        for term in query.terms:
            postings = self._postings[term][:, : self._used[term]]
            room = wanted - total
            if postings.shape[1] > room:
                tfs = postings[1]
                sample = tfs[:: max(1, len(tfs) // _TF_SAMPLE)]
                cut = len(sample) - max(1, len(sample) * room // len(tfs))
                postings = postings[:, np.flatnonzero(tfs >= np.partition(sample, cut)[cut])[: 4 * room]]
            postings = postings[:, ok[postings[0]]]
            if postings.shape[1] > room:
                postings = postings[:, np.argpartition(postings[1], -room)[-room:]]
            chosen.append(postings[0])
            total += postings.shape[1]
            if total >= wanted:
                break
        return _union(chosen, len(ok))

    def _reaching(
        self, query: _Query, i: int, need: float, ok: np.ndarray, stats: _Stats, step: int = 1
    ) -> tuple[np.ndarray, int]:
        """Allowed live docs among every `step`-th posting of term `i` whose contribution
        (repeats included) may reach `need` > 0, and how many postings passed the cheap
        first test (a term frequency high enough whatever the doc's length).

        idf * tf * (k1 + 1) / (tf + norm) >= need  <=>  norm <= tf * (k1 + 1 - x) / x with
        x = need / idf: one limit per term frequency. `need` has the threshold's margin taken
        off already, so rounding in the limits cannot exclude a doc that reaches the threshold.
        """
        term, used = query.terms[i], int(self._used[query.terms[i]])
        docs, tfs = self._postings[term][0, :used:step], self._postings[term][1, :used:step]
        levels = np.arange(int(self._tf_max[term]) + 1, dtype=np.float64)
        if query.idf[i] <= 0:  # contributions <= 0 < need
            return np.zeros(0, dtype=np.int32), 0
        x = need / (query.repeats[i] * query.idf[i])
        limits = levels * (self.k1 + 1 - x) / x
        if limits[-1] < query.norm_min[i]:
            return np.zeros(0, dtype=np.int32), 0
        low = int(np.argmax(limits >= query.norm_min[i]))  # limits grow with the term frequency
        if low > 1:
            at = np.flatnonzero(tfs >= low)
            docs, tfs = docs[at], tfs[at]
        passed = len(docs)
        at = np.flatnonzero(ok[docs])  # allowed first: a byte per doc id, where norms take eight
        docs, tfs = docs[at], tfs[at]
        return docs[stats.norm[docs] <= limits[tfs]], passed

    def _reaching_estimate(
        self, query: _Query, i: int, need: float, ok: np.ndarray, stats: _Stats
    ) -> tuple[float, float]:
        """`_reaching`'s (postings past the first test, docs kept), from a sample of the postings."""
        step = max(1, int(self._used[query.terms[i]]) // _TF_SAMPLE)
        docs, passed = self._reaching(query, i, need, ok, stats, step)
        return float(passed * step), float(len(docs) * step)

    def _scored(
        self, docs: np.ndarray, query: _Query, stats: _Stats, floor: float = -math.inf
    ) -> tuple[np.ndarray, np.ndarray]:
        """(docs kept, their scores) for live docs (int32 ascending).

        Scores are bit for bit `_scored_all`'s: the same per-posting expression, summed from
        0 in query order (an absent term adds 0.0, which keeps the bits). Terms are looked up
        largest bound first and a doc is dropped once its known contributions plus the bounds
        of the terms still to look up fall below `floor` (the threshold less its margin).
        """
        contributions: list[np.ndarray] = [_NO_SCORES] * len(query.terms)
        known = np.zeros(len(docs))
        rest = float(query.bound.sum())
        for i in np.argsort(-query.bound, kind="stable").tolist():
            at, tfs = self._lookup(query.terms[i], docs)
            values = np.zeros(len(docs))
            values[at] = query.idf[i] * (tfs * (self.k1 + 1) / (tfs + stats.norm[docs[at]]))
            contributions[i] = values
            known += query.repeats[i] * values
            rest -= float(query.bound[i])
            keep = np.flatnonzero(known >= floor - rest)
            if len(keep) < len(docs):
                docs, known = docs[keep], known[keep]
                contributions = [c[keep] if len(c) else c for c in contributions]
        totals = np.zeros(len(docs))
        for i in query.sequence:
            totals += contributions[i]
        return docs, totals

    def _lookup(self, term: int, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in `docs` the term's postings hold, their term frequencies).

        Binary search per doc when docs are few against the postings, else one pass over
        the postings through each doc id's position; docs are live, so hits are live postings.
        """
        column = self._tf_column(term)
        if column is not None:
            tfs = column[docs]
            at = np.flatnonzero(tfs)
            return at, tfs[at].astype(np.int32)
        postings = self._postings[term][:, : self._used[term]]
        listed = postings.shape[1]
        search, scan = _lookup_steps(len(docs), listed, len(self._alive))
        if search < scan:
            at = np.minimum(np.searchsorted(postings[0], docs), listed - 1)
            hit = postings[0, at] == docs
            return np.flatnonzero(hit), postings[1, at[hit]]
        position = np.full(len(self._alive), -1, dtype=np.int32)
        position[docs] = np.arange(len(docs), dtype=np.int32)
        at = position[postings[0]]
        found = np.flatnonzero(at >= 0)
        return at[found], postings[1, found]

    def _set_in_column(self, term: int, docs: np.ndarray, tfs: np.ndarray | int) -> None:
        """Writes the term's new tfs into its column, if it has one; drops a column the doc ids grew
        past or whose type cannot hold the tfs (the next reader builds it again)."""
        column = self._tf_columns.get(term)
        if column is None or not len(docs):
            return
        if len(column) == len(self._alive) and np.max(tfs) <= np.iinfo(column.dtype).max:
            column[docs] = tfs
        else:
            del self._tf_columns[term]

    def _tf_column(self, term: int) -> np.ndarray | None:
        """The term's tf per doc id (0: not listed) if it is listed for at least 1 in _COLUMN_SHARE
        doc ids, else None. Built from the postings on first use and kept current by the writes
        (`_set_in_column`); one shorter than the doc ids (grown since) is built again. Tombstoned
        docs keep their tf until their postings are compacted, as in the postings: lookups are
        for live docs only."""
        used = int(self._used[term])
        if used * _COLUMN_SHARE < len(self._alive):
            self._tf_columns.pop(term, None)  # the doc ids grew past it: not worth its memory
            return None
        column = self._tf_columns.get(term)
        if column is None or len(column) != len(self._alive):
            postings = self._postings[term]
            column = np.zeros(len(self._alive), dtype=np.uint8 if self._tf_max[term] <= 255 else np.int32)
            column[postings[0, :used]] = postings[1, :used]
            self._tf_columns[term] = column  # readers racing here build the same column
        return column

    def nbytes(self) -> int:
        """Approximate memory held: numpy buffers plus the vocabulary dict and its keys."""
        postings = sum(sys.getsizeof(p) for p in self._postings if p is not _EMPTY_POSTINGS)
        columns = (self._used, self._df, self._dead, self._tf_max, self._len_min, self._alive, self._doc_len,
                   self._doc_sig, *self._removed.values())
        columns += tuple(self._tf_columns.values())
        vocab = sys.getsizeof(self._vocab) + sum(sys.getsizeof(t) for t in self._vocab)
        return postings + sys.getsizeof(self._postings) + sum(a.nbytes for a in columns) + vocab
