"""BM25Index against rank_bm25 on a synthetic corpus: speed, top-10 agreement, build, memory.

The corpus stands in for 100k chunks of ~120 tokens: Zipfian term draws (s = 1.0) over a
50k-term vocabulary, fixed seed. Queries are 2-6 tokens drawn from the same distribution,
so they include very common terms (long posting lists): a harder case than real queries
after stopword removal. rank_bm25 scores every document per query, so it only runs a handful.

Then the pruned `top_k` at the retriever's depth (100) against scoring every posting
(`scores`, then the same selection), query by query in turn, without and with a filter
admitting a random 10% of the docs: latency and how many results are identical (ids, order
and score bits). `--docs 1000000 --ref-queries 0` measures it at 1M (about a minute to
build, 5 GB).
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np
from rank_bm25 import BM25Okapi

from services.retriever.bm25 import BM25Index

SEED = 20240601
VOCAB_SIZE = 50_000
MEAN_DOC_LEN = 120
ZIPF_S = 1.0
BUILD_BATCH = 10_000  # docs per add_many call, like an ingest stream
PRUNE_DEPTH = 100  # the retriever asks BM25 for max(2 * top_k, 100)
FILTER_SHARE = 0.1  # the filtered search admits this share of the docs


def make_corpus(n_docs: int, rng: np.random.Generator) -> tuple[list[list[str]], np.ndarray, list[str]]:
    """Token lists, the Zipf term probabilities and the term strings."""
    words = [f"t{i}" for i in range(VOCAB_SIZE)]
    probs = 1.0 / np.arange(1, VOCAB_SIZE + 1) ** ZIPF_S
    probs /= probs.sum()
    lengths = np.clip(rng.normal(MEAN_DOC_LEN, 25, n_docs).round().astype(np.int64), 10, None)
    draws = np.asarray(words, dtype=object)[rng.choice(VOCAB_SIZE, size=int(lengths.sum()), p=probs)]
    corpus = [chunk.tolist() for chunk in np.split(draws, np.cumsum(lengths)[:-1])]
    return corpus, probs, words


def make_queries(n: int, probs: np.ndarray, words: list[str], rng: np.random.Generator) -> list[list[str]]:
    return [[words[i] for i in rng.choice(VOCAB_SIZE, size=rng.integers(2, 7), p=probs)] for _ in range(n)]


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def build_index(corpus: list[list[str]]) -> tuple[BM25Index, float, int]:
    """The index, its build time in seconds and the RSS it added."""
    before = rss_bytes()
    start = time.perf_counter()
    index = BM25Index()
    for lo in range(0, len(corpus), BUILD_BATCH):
        index.add_many(range(lo, min(lo + BUILD_BATCH, len(corpus))), corpus[lo : lo + BUILD_BATCH])
    return index, time.perf_counter() - start, rss_bytes() - before


def reference_top10(bm25: BM25Okapi, query: list[str], scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """rank_bm25's top 10 under BM25Index's definition: docs with a query term, ties by id."""
    terms = set(query)
    candidates = np.array([i for i, freqs in enumerate(bm25.doc_freqs) if not terms.isdisjoint(freqs)])
    top = candidates[np.lexsort((candidates, -scores[candidates]))][:10]
    return top, scores[top]


def timed_ms(fn: Any, *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn(*args)
    return result, (time.perf_counter() - start) * 1000


def measure_index(
    index: BM25Index, corpus: list[list[str]], queries: list[list[str]]
) -> tuple[dict[str, Any], np.ndarray]:
    """Query latencies of the built index (ms), including the first query after a write."""
    _, first_ms = timed_ms(index.top_k, queries[0], 10)  # pays the per-write statistics refresh
    index_ms = np.array([timed_ms(index.top_k, q, 10)[1] for q in queries])
    extra_id = len(corpus)
    index.add(extra_id, corpus[0])
    _, after_write_ms = timed_ms(index.top_k, queries[0], 10)
    index.remove(extra_id, corpus[0])  # back to the corpus rank_bm25 will hold
    figures = {
        "index_p50_ms": float(np.percentile(index_ms, 50)),
        "index_p99_ms": float(np.percentile(index_ms, 99)),
        "index_first_query_ms": first_ms,
        "index_query_after_write_ms": after_write_ms,
    }
    return figures, index_ms


def compare_reference(
    index: BM25Index, corpus: list[list[str]], queries: list[list[str]], index_ms: np.ndarray
) -> dict[str, Any]:
    """rank_bm25 on the first queries: its latency, the speedup and top-10 agreement."""
    build_start = time.perf_counter()
    reference = BM25Okapi(corpus, k1=1.5, b=0.75, epsilon=0.25)
    build_s = time.perf_counter() - build_start
    ref_ms, agree, max_diff = [], 0, 0.0
    for query in queries:
        all_scores, ms = timed_ms(reference.get_scores, query)
        ref_ms.append(ms)
        ref_ids, ref_scores = reference_top10(reference, query, all_scores)
        ids, scores = index.top_k(query, 10)
        agree += ids.tolist() == ref_ids.tolist()
        max_diff = max(max_diff, float(np.abs(scores - ref_scores).max()) if len(ids) == len(ref_ids) else np.inf)
    return {
        "rank_bm25_queries": len(queries),
        "rank_bm25_p50_ms": float(np.median(ref_ms)),
        "speedup_same_queries": float(np.median(ref_ms) / np.median(index_ms[: len(queries)])),
        "top10_identical": f"{agree}/{len(queries)}",
        "top10_max_score_diff": max_diff,
        "rank_bm25_build_s": build_s,
    }


def full_top_k(
    index: BM25Index, query: list[str], k: int, allowed: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The reference for the pruned top k: every posting scored, the best allowed docs, ties by
    id (selected as top_k did before pruning: a partition, then a sort of the few kept)."""
    ids, scores = index.scores(query)
    if allowed is not None:
        inside = ids < len(allowed)
        inside[inside] = allowed[ids[inside]]
        ids, scores = ids[inside], scores[inside]
    if len(ids) > k:
        keep = scores >= np.partition(scores, len(scores) - k)[len(scores) - k]
        ids, scores = ids[keep], scores[keep]
    order = np.lexsort((ids, -scores))[:k]
    return ids[order], scores[order]


def compare_pruning(index: BM25Index, n_docs: int, queries: list[list[str]], depth: int) -> dict[str, Any]:
    """Pruned top_k against full scoring, alternating per query so load falls on both alike."""
    masks = {"": None, "filtered_": np.random.default_rng([SEED, 2]).random(n_docs) < FILTER_SHARE}
    result: dict[str, Any] = {}
    for name, mask in masks.items():
        pruned_ms, full_ms, identical = [], [], 0
        for query in queries:
            (ids, scores), ms = timed_ms(index.top_k, query, depth, mask)
            pruned_ms.append(ms)
            (ref_ids, ref_scores), ms = timed_ms(full_top_k, index, query, depth, mask)
            full_ms.append(ms)
            identical += ids.tolist() == ref_ids.tolist() and scores.tobytes() == ref_scores.tobytes()
        prefix = f"top{depth}_{name}"
        result |= {
            f"{prefix}pruned_p50_ms": float(np.percentile(pruned_ms, 50)),
            f"{prefix}pruned_p99_ms": float(np.percentile(pruned_ms, 99)),
            f"{prefix}full_p50_ms": float(np.percentile(full_ms, 50)),
            f"{prefix}full_p99_ms": float(np.percentile(full_ms, 99)),
            f"{prefix}speedup_p50": float(np.percentile(full_ms, 50) / np.percentile(pruned_ms, 50)),
            f"{prefix}identical": f"{identical}/{len(queries)}",
        }
    return result | {"load_average_1m": os.getloadavg()[0]}


def run(
    n_docs: int = 100_000, n_queries: int = 300, n_ref_queries: int = 20, depth: int = PRUNE_DEPTH
) -> dict[str, Any]:
    """Measure the index, and rank_bm25 unless n_ref_queries is 0 (times in ms, memory in MB)."""
    rng = np.random.default_rng(SEED)
    corpus, probs, words = make_corpus(n_docs, rng)
    queries = make_queries(max(n_queries, n_ref_queries), probs, words, rng)
    index, build_s, rss_delta = build_index(corpus)
    result: dict[str, Any] = {
        "docs": n_docs,
        "postings": sum(len(set(doc)) for doc in corpus),
        "queries": len(queries),
        "mean_query_tokens": float(np.mean([len(q) for q in queries])),
    }
    figures, index_ms = measure_index(index, corpus, queries)
    result |= figures
    if n_ref_queries:
        result |= compare_reference(index, corpus, queries[:n_ref_queries], index_ms)
    result |= compare_pruning(index, n_docs, queries[:n_queries], depth)
    return result | {
        "index_build_s": build_s,
        "index_mb": index.nbytes() / 2**20,
        "index_rss_delta_mb": rss_delta / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--ref-queries", type=int, default=20, help="0 skips rank_bm25")
    parser.add_argument("--depth", type=int, default=PRUNE_DEPTH, help="k of the pruned vs full top-k comparison")
    args = parser.parse_args()
    result = run(args.docs, args.queries, args.ref_queries, args.depth)
    print(f"{'BM25 benchmark':<32} value")
    for name, value in result.items():
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        print(f"{name:<32} {shown}")


if __name__ == "__main__":
    main()
