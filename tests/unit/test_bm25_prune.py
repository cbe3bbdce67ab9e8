"""BM25Index.top_k prunes, yet returns exactly what scoring every posting returns."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.retriever import bm25
from services.retriever.bm25 import BM25Index

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A few common words (in most docs: negative or zero idfs, a floored epsilon) and rarer ones.
COMMON = ["c0", "c1", "c2"]

# Cost settings that steer the plan, so small corpora take every path.
FREE = {"_CANDIDATE_COST": 0.0, "_LOOKUP_COST": 0.0, "_SCAN_COST": 0.0, "_FILTER_COST": 0.0}
COSTS = [
    {},  # the defaults
    {"_FULL_COST": 1e30},  # the default plans, scoring everything ruled out
    {"_FULL_COST": 1e30, "_CANDIDATE_COST": 0.0, "_LOOKUP_COST": 0.0},  # fewest lists whole, none filtered
    {"_FULL_COST": 1e30, "_CANDIDATE_COST": 1e6, "_SCAN_COST": 0.0, "_FILTER_COST": 0.0},  # filtered lists
    {"_FULL_COST": 0.0, **FREE},  # a threshold, then every posting scored (no plan costs less)
]


@st.composite
def histories(draw: st.DrawFn) -> tuple[BM25Index, int]:
    """An index after batches of adds (ids out of order, removed ids reused) and removals;
    returns it with the number of doc ids used."""
    rare = [f"r{i}" for i in range(draw(st.integers(min_value=1, max_value=10)))]
    word = st.one_of(st.sampled_from(COMMON), st.sampled_from(rare))
    doc = st.lists(word, max_size=12)  # repeated words give term frequencies above 1
    index, live, next_id = BM25Index(), {}, 0
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        removed = [i for i in range(next_id) if i not in live]
        if live and draw(st.booleans()):
            for doc_id in draw(st.lists(st.sampled_from(sorted(live)), unique=True, max_size=len(live))):
                index.remove(doc_id, live.pop(doc_id))
            continue
        reused = draw(st.lists(st.sampled_from(removed), unique=True)) if removed else []
        fresh = list(range(next_id, next_id + draw(st.integers(min_value=1, max_value=40))))
        next_id += len(fresh)
        ids = draw(st.permutations(reused + fresh))
        docs = [draw(doc) for _ in ids]
        index.add_many(ids, docs)
        live.update(zip(ids, docs))
    return index, next_id


def reference(index: BM25Index, query: list[str], k: int, allowed: np.ndarray | None) -> tuple[list, bytes]:
    """Every posting scored (`scores`), then allowed docs best first, ties by lower id."""
    ids, scores = index.scores(query)
    if allowed is not None:
        inside = ids < len(allowed)
        inside[inside] = allowed[ids[inside]]
        ids, scores = ids[inside], scores[inside]
    order = np.lexsort((ids, -scores))[:k]
    return ids[order].tolist(), scores[order].tobytes()


@SETTINGS
@given(histories(), st.data())
def test_pruned_top_k_equals_scoring_every_posting(history: tuple[BM25Index, int], data: st.DataObject) -> None:
    index, n_ids = history
    vocabulary = COMMON + [t for t in index._vocab if t.startswith("r")] + ["absent"]
    query = data.draw(st.lists(st.sampled_from(vocabulary), min_size=1, max_size=6))  # repeats too
    k = data.draw(st.integers(min_value=1, max_value=n_ids + 2))
    allowed = None
    if data.draw(st.booleans()):
        mask_len = data.draw(st.integers(min_value=0, max_value=n_ids + 2))  # a short mask fails closed
        allowed = np.array(data.draw(st.lists(st.booleans(), min_size=mask_len, max_size=mask_len)), dtype=bool)
    # Few seeds, so long lists are sampled; and often scoring everything made to cost more than
    # any pruning plan, so small corpora take the pruned path with every kind of plan.
    seeds = data.draw(st.sampled_from([1, 4, bm25._SEEDS]))
    costs = data.draw(st.sampled_from(COSTS))
    with mock.patch.multiple(bm25, _SEEDS=seeds, _TF_SAMPLE=2, **costs):
        ids, scores = index.top_k(query, k, allowed)
    expected_ids, expected_scores = reference(index, query, k, allowed)
    assert ids.tolist() == expected_ids
    assert scores.tobytes() == expected_scores  # bit for bit
    assert ids.dtype == np.int64


@pytest.mark.parametrize("seed", range(8))
def test_pruned_top_k_equals_scoring_every_posting_on_zipf_corpora(seed: int) -> None:
    """Hundreds of docs of varied lengths, many very short (a term's bound is reached only by
    a doc with both its highest tf and its shortest length), so the threshold, the filters
    and the bounds all decide; queries of Zipfian words (single words with a small k reach
    the bounds), masks, any k."""
    rng = np.random.default_rng(seed)
    probs = 1.0 / np.arange(1, 61)
    probs /= probs.sum()

    def doc() -> list[str]:
        if rng.random() < 0.1:  # one word repeated: its tf and length may both be the term's extremes
            return [f"t{rng.choice(60, p=probs)}"] * int(rng.integers(1, 6))
        size = rng.integers(0, 4) if rng.random() < 0.4 else rng.integers(4, 40)
        return [f"t{i}" for i in rng.choice(60, size=size, p=probs)]

    index, live = BM25Index(), {}
    for batch in np.array_split(rng.permutation(500), 4):
        docs = [doc() for _ in batch]
        index.add_many(batch.tolist(), docs)
        live.update(zip(batch.tolist(), docs))
        for doc_id in rng.choice(sorted(live), size=30, replace=False).tolist():
            index.remove(doc_id, live.pop(doc_id))
    reused = [i for i in range(500) if i not in live][:40]
    index.add_many(reused[::-1], [doc() for _ in reused])
    for n in range(300):
        query = [f"t{i}" for i in rng.choice(60, size=rng.integers(1, 6), p=probs)]
        k = int(rng.integers(1, 4) if n % 5 == 0 else rng.integers(1, 60))
        density = (None, 0.1, 0.6)[n % 3]
        allowed = None if density is None else rng.random(int(rng.integers(400, 520))) < density
        with mock.patch.multiple(bm25, _SEEDS=int(rng.choice([1, 64])), **COSTS[n % len(COSTS)]):
            ids, scores = index.top_k(query, k, allowed)
        assert (ids.tolist(), scores.tobytes()) == reference(index, query, k, allowed), (n, query, k)


def zipf_index(n_docs: int = 3000) -> BM25Index:
    """A corpus like the benchmark's: Zipfian words, ~60 per doc, ids added out of order."""
    rng = np.random.default_rng(7)
    probs = 1.0 / np.arange(1, 2001)
    probs /= probs.sum()
    docs = [[f"t{i}" for i in rng.choice(2000, size=rng.integers(20, 100), p=probs)] for _ in range(n_docs)]
    index = BM25Index()
    order = rng.permutation(n_docs)
    for batch in np.array_split(order, 7):
        index.add_many(batch.tolist(), [docs[i] for i in batch])
    return index


@pytest.mark.parametrize("query", [["t300", "t0", "t1"], ["t1500", "t2", "t7", "t7"], ["t900", "t5"]])
def test_a_query_with_a_rare_term_scores_only_a_few_docs(query: list[str]) -> None:
    index = zipf_index()
    matching = len(index.scores(query)[0])
    expected = reference(index, query, 10, None)
    scored: list[int] = []
    real_scored = BM25Index._scored

    def counting(self: BM25Index, docs: np.ndarray, *args: object) -> tuple[np.ndarray, np.ndarray]:
        scored.append(len(docs))
        return real_scored(self, docs, *args)

    with (mock.patch.object(BM25Index, "_scored_all", side_effect=AssertionError("scored every posting")),
          mock.patch.object(BM25Index, "_scored", counting), mock.patch.object(bm25, "_SEEDS", 64)):
        ids, scores = index.top_k(query, 10)
    assert (ids.tolist(), scores.tobytes()) == expected
    assert sum(scored) < matching / 4, (scored, matching)  # seeds, then candidates


def test_postings_stay_sorted_by_doc_id_through_reuse_and_unsorted_batches() -> None:
    index = BM25Index()
    index.add_many([5, 1, 9], [["a", "b"], ["a"], ["a", "a"]])
    index.add_many([3, 0], [["a"], ["b"]])
    index.remove(1, ["a"])
    index.add_many([1, 7], [["a", "a", "a"], ["a"]])
    postings = index._postings[index._vocab["a"]][:, : index._used[index._vocab["a"]]]
    assert postings[0].tolist() == sorted(postings[0].tolist())
    assert dict(zip(postings[0].tolist(), postings[1].tolist())) == {1: 3, 3: 1, 5: 1, 7: 1, 9: 2}
    assert index._tf_max[index._vocab["a"]] == 3
    assert index._len_min[index._vocab["a"]] == 1  # doc 3
    index.remove(3, ["a"])
    index.add(11, ["a"] + ["b"] * 20)  # a compaction, then a longer doc: the bounds follow
    index.remove(9, ["a", "a"])
    index.remove(1, ["a", "a", "a"])
    index.remove(7, ["a"])
    index._compact_term(index._vocab["a"])
    assert (index._tf_max[index._vocab["a"]], index._len_min[index._vocab["a"]]) == (1, 2)  # docs 5 and 11


def test_common_terms_are_looked_up_in_tf_columns_that_follow_every_write() -> None:
    """A term in most docs is looked up in a dense tf column built by a query; each later write
    that changes its postings (an append, a reused id, a compaction) or grows the doc ids must
    show in the next query's scores, bit for bit the scoring of every posting."""
    rng = np.random.default_rng(3)
    live = {i: ["c0"] * int(rng.integers(1, 4)) + [f"r{rng.integers(40)}" for _ in range(int(rng.integers(1, 8)))]
            for i in range(400)}
    live[999] = ["r3"]  # doc ids up to 999 from the start: appends below do not grow them
    index = BM25Index()
    index.add_many(list(live), list(live.values()))

    def check(query: list[str]) -> None:
        with mock.patch.multiple(bm25, _SEEDS=8, _FULL_COST=1e30):  # pruned, so candidates are looked up
            ids, scores = index.top_k(query, 5)
        assert (ids.tolist(), scores.tobytes()) == reference(index, query, 5, None)

    query = ["c0", "r1", "r2", "z"]
    check(query)
    assert index._vocab["c0"] in index._tf_columns
    writes = [
        lambda: index.add(400, ["c0"] * 9 + ["z"]),  # appended: the best doc, with c0's highest tf
        lambda: index.remove(400, ["c0"] * 9 + ["z"]),
        lambda: index.add(400, ["r1", "r2"]),  # a reused id without c0: its old tf must not stay
        lambda: index.add(2000, ["r1", "r2"]),  # the doc ids grow past the column, c0's postings unchanged
        lambda: index.add(3000, ["c0", "r1"]),  # they grow again, with c0
        lambda: index.add(401, ["c0"] * 300 + ["z"] * 100),  # a tf past a byte, in the best doc
    ]
    for doc_id in range(0, 200, 2):  # enough dead postings for compactions
        writes.append(lambda doc_id=doc_id: index.remove(doc_id, live.pop(doc_id)))
    for write in writes:
        write()
        check(query)


def test_tf_columns_are_not_pickled_and_old_pickles_load() -> None:
    index = zipf_index(300)
    index.top_k(["t0", "t1", "t250"], 10)
    state = index.__getstate__()
    assert state["_tf_columns"] == {}
    del state["_tf_columns"]  # as pickled before the columns existed
    restored = BM25Index.__new__(BM25Index)
    restored.__setstate__(state)
    assert restored.top_k(["t0", "t1", "t250"], 10)[0].tolist() == index.top_k(["t0", "t1", "t250"], 10)[0].tolist()
