"""BM25Index against rank_bm25 itself, and the analyzer that feeds it."""
from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi

from services.retriever import bm25
from services.retriever.analyzer import Analyzer
from services.retriever.bm25 import BM25Index

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Small vocabularies so terms repeat, appear in most documents (negative idfs) or in none.
vocab_size = st.integers(min_value=1, max_value=8)


def words(size: int) -> st.SearchStrategy[str]:
    return st.integers(min_value=0, max_value=size - 1).map(lambda i: f"w{i}")


@st.composite
def corpus_and_query(draw: st.DrawFn) -> tuple[list[list[str]], list[str]]:
    size = draw(vocab_size)
    doc = st.lists(words(size), max_size=8)  # empty documents included
    corpus = draw(st.lists(doc, min_size=1, max_size=25).filter(any))  # rank_bm25 needs a token
    absent = st.sampled_from(["absent", "w99"])
    query = draw(st.lists(st.one_of(words(size), absent), min_size=1, max_size=6))  # repeats too
    return corpus, query


def reference(corpus: list[list[str]], query: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """rank_bm25's scores, and the ids containing a query term ordered best first, ties by id."""
    scores = BM25Okapi(corpus, k1=1.5, b=0.75, epsilon=0.25).get_scores(query)
    candidates = np.array([i for i, doc in enumerate(corpus) if set(doc) & set(query)], dtype=np.int64)
    if len(candidates) == 0:
        return scores, candidates
    return scores, candidates[np.lexsort((candidates, -scores[candidates]))]


def assert_same_ranking(ids: np.ndarray, ref_scores: np.ndarray, ref_order: np.ndarray) -> None:
    """Same ids in the same order, except where rank_bm25's own scores differ by rounding only.

    When the mean idf is 0 up to rounding, the epsilon floor is float noise whose sign depends
    on summation order; rank_bm25's order among the floored docs is then that noise.
    """
    expected = ref_order[: len(ids)]
    assert len(ids) == min(10, len(ref_order))
    noise_tie = np.abs(ref_scores[ids] - ref_scores[expected]) <= 1e-9
    assert ((ids == expected) | noise_tie).all(), (ids.tolist(), expected.tolist())


def dense_scores(index: BM25Index, query: list[str], size: int) -> np.ndarray:
    ids, scores = index.scores(query)
    dense = np.zeros(size)
    dense[ids] = scores
    return dense


def built(corpus: list[list[str]]) -> BM25Index:
    index = BM25Index()
    index.add_many(range(len(corpus)), corpus)
    return index


# The mean idf here is exactly 0, so the floor (and every score for "w0") is rounding noise.
ZERO_MEAN_IDF = ([["w0", "w1"], ["w0", "w1", "w2", "w3", "w4"], ["w2", "w7"], ["w0", "w1", "w2", "w3"],
                  ["w0", "w1", "w2", "w3", "w4", "w5", "w6"]], ["w0"])


@SETTINGS
@given(corpus_and_query())
@example(ZERO_MEAN_IDF)
def test_scores_and_top10_equal_rank_bm25(case: tuple[list[list[str]], list[str]]) -> None:
    corpus, query = case
    ref_scores, ref_order = reference(corpus, query)
    index = built(corpus)
    np.testing.assert_allclose(dense_scores(index, query, len(corpus)), ref_scores, rtol=0, atol=1e-6)
    ids, scores = index.top_k(query, 10)
    assert_same_ranking(ids, ref_scores, ref_order)
    np.testing.assert_allclose(scores, ref_scores[ids], rtol=0, atol=1e-6)


@SETTINGS
@given(corpus_and_query())
def test_one_by_one_adds_equal_a_batch(case: tuple[list[list[str]], list[str]]) -> None:
    corpus, query = case
    index = BM25Index()
    for doc_id in reversed(range(len(corpus))):  # ids need not arrive in order
        index.add(doc_id, corpus[doc_id])
    ids, scores = index.scores(query)
    batch_ids, batch_scores = built(corpus).scores(query)
    assert ids.tolist() == batch_ids.tolist()
    np.testing.assert_allclose(scores, batch_scores, rtol=0, atol=1e-12)


@st.composite
def edit_history(draw: st.DrawFn) -> tuple[dict[int, list[str]], BM25Index, list[str]]:
    """A random run of adds (fresh and reused ids) and removes, with the surviving docs."""
    size = draw(vocab_size)
    doc = st.lists(words(size), max_size=8)
    index, live, next_id = BM25Index(), {}, 0
    for _ in range(draw(st.integers(min_value=1, max_value=40))):
        removed = [i for i in range(next_id) if i not in live]
        action = draw(st.sampled_from(["add", "add", "reuse", "remove", "remove"]))
        if action == "remove" and live:
            doc_id = draw(st.sampled_from(sorted(live)))
            # Usually the tokens it was added with; else none, or another document's (mismatched
            # tokens, as after an analyzer change): the index must find the right terms anyway.
            given = draw(st.sampled_from(["own", "own", "none", "other"]))
            tokens = {"own": live[doc_id], "none": None, "other": draw(st.sampled_from(list(live.values())))}[given]
            index.remove(doc_id, tokens)
            del live[doc_id]
        else:
            if action == "reuse" and removed:
                doc_id = draw(st.sampled_from(removed))
            else:
                doc_id, next_id = next_id, next_id + 1
            live[doc_id] = draw(doc)
            index.add(doc_id, live[doc_id])
    query = draw(st.lists(st.one_of(words(size), st.just("absent")), min_size=1, max_size=5))
    return live, index, query


@pytest.mark.parametrize("purge_floor", [bm25._PURGE_MIN, 0])
def test_adds_and_removes_equal_a_fresh_build(purge_floor: int) -> None:
    @SETTINGS
    @given(edit_history())
    def check(history: tuple[dict[int, list[str]], BM25Index, list[str]]) -> None:
        live, index, query = history
        survivors = sorted(live)
        corpus = [live[i] for i in survivors]
        assert len(index) == len(survivors)
        for term in {t for doc in corpus for t in doc} | {"absent"}:
            assert index.doc_freq(term) == sum(term in doc for doc in corpus)
        ids, scores = index.scores(query)
        if not any(corpus):
            assert len(ids) == 0
            return
        ref_scores, ref_order = reference(corpus, query)
        position = {doc_id: pos for pos, doc_id in enumerate(survivors)}
        mapped = np.array([position[i] for i in ids.tolist()], dtype=np.int64)
        dense = np.zeros(len(corpus))
        dense[mapped] = scores
        np.testing.assert_allclose(dense, ref_scores, rtol=0, atol=1e-6)
        top_ids, _ = index.top_k(query, 10)
        assert_same_ranking(np.array([position[i] for i in top_ids.tolist()], dtype=np.int64), ref_scores, ref_order)

    with mock.patch.object(bm25, "_PURGE_MIN", purge_floor):
        check()


@SETTINGS
@given(corpus_and_query(), st.data())
def test_allowed_mask_filters_before_taking_k(case: tuple[list[list[str]], list[str]], data: st.DataObject) -> None:
    corpus, query = case
    ref_scores, ref_order = reference(corpus, query)
    mask_len = data.draw(st.integers(min_value=0, max_value=len(corpus) + 2))  # short masks fail closed
    allowed = np.array(data.draw(st.lists(st.booleans(), min_size=mask_len, max_size=mask_len)), dtype=bool)
    k = data.draw(st.integers(min_value=1, max_value=12))
    expected = np.array([i for i in ref_order.tolist() if i < mask_len and allowed[i]][:k], dtype=np.int64)
    ids, scores = built(corpus).top_k(query, k, allowed)
    assert len(ids) == len(expected)
    assert ((ids == expected) | (np.abs(ref_scores[ids] - ref_scores[expected]) <= 1e-9)).all()
    np.testing.assert_allclose(scores, ref_scores[ids], rtol=0, atol=1e-6)


def test_documents_with_a_query_term_are_returned_even_when_they_score_below_zero() -> None:
    # "a" is in every doc: its idf is negative and the floor (epsilon * mean idf) is negative too.
    corpus = [["a"], ["a"], ["a", "b"]]
    index = built(corpus)
    ids, scores = index.top_k(["a"], 10)
    assert ids.tolist() == [2, 0, 1]  # the longer doc is penalised less
    assert (scores < 0).all()
    np.testing.assert_allclose(scores, BM25Okapi(corpus).get_scores(["a"])[ids], atol=1e-12)
    assert index.top_k(["absent"], 10)[0].size == 0
    assert index.top_k(["b"], 0)[0].size == 0


def test_writes_reject_bad_ids() -> None:
    index = BM25Index()
    index.add(3, ["x"])
    with pytest.raises(ValueError):
        index.add(3, ["y"])
    with pytest.raises(ValueError):
        index.add_many([4, 4], [["x"], ["y"]])
    with pytest.raises(ValueError):
        index.add(-1, ["x"])
    with pytest.raises(KeyError):
        index.remove(2, ["x"])
    index.remove(3, ["x"])
    with pytest.raises(KeyError):
        index.remove(3, ["x"])
    assert len(index) == 0 and 3 not in index
    assert index.scores(["x"])[0].size == 0


@pytest.mark.parametrize("given", [["z"], ["y"], ["x", "x"], [], None])
def test_removal_with_tokens_that_do_not_match_finds_the_documents_own_terms(given: list[str] | None) -> None:
    """Tokens of the same shape but another document's, unknown ones, another length, or none."""
    index = BM25Index()
    index.add_many([3, 4, 5], [["x"], ["z"], ["x", "z"]])
    index.remove(3, given)
    assert 3 not in index and len(index) == 2
    assert (index.doc_freq("x"), index.doc_freq("z")) == (1, 2)
    assert sorted(index.scores(["x", "z"])[0].tolist()) == [4, 5]


def test_empty_documents_count_in_n_and_avgdl() -> None:
    corpus = [[], ["x", "y"], [], ["y"]]
    np.testing.assert_allclose(
        dense_scores(built(corpus), ["x", "y"], 4), BM25Okapi(corpus).get_scores(["x", "y"]), atol=1e-12
    )


def test_analyzer_default_stems_and_drops_stopwords_and_short_tokens() -> None:
    analyzer = Analyzer()
    assert analyzer.analyze("The running funds, a 7 x-ray of Q3 studies!") == ["run", "fund", "ray", "q3", "studi"]
    assert analyzer.analyze("") == []


def test_analyzer_options_change_the_output() -> None:
    text = "The Running of the Funds"
    assert Analyzer(stemming=False).analyze(text) == ["running", "funds"]
    assert Analyzer(stopwords=False, stemming=False).analyze(text) == ["the", "running", "of", "the", "funds"]
    assert Analyzer(lowercase=False, stemming=False).analyze(text) == ["Running", "Funds"]
    assert Analyzer(min_token_len=4, stemming=False).analyze("tiny big cat elephant") == ["tiny", "elephant"]


def test_analyzer_options_round_trip() -> None:
    custom = Analyzer(lowercase=False, min_token_len=3, stopwords=False, stemming=False)
    assert Analyzer.from_options(custom.to_options()) == custom
    assert Analyzer.from_options({}) == Analyzer() == Analyzer.from_options(None)
    assert Analyzer().to_options() == {"lowercase": True, "min_token_len": 2, "stopwords": True, "stemming": True}
    with pytest.raises(ValueError):
        Analyzer.from_options({"stemmer": "porter"})
    with pytest.raises(ValueError):
        Analyzer.from_options({"min_token_len": 0})


def test_analyzer_is_safe_across_threads() -> None:
    texts = [f"Running studies {i} of generously funded hedging strategies" for i in range(200)]
    expected = [Analyzer().analyze(t) for t in texts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(Analyzer().analyze, texts * 5)) == expected * 5


def test_pickled_index_scores_the_same() -> None:
    corpus = [["a", "b"], ["b", "c", "c"], [], ["a"]]
    index = built(corpus)
    index.remove(1, corpus[1])
    index.top_k(["a"], 3)  # fills the statistics cache, which the pickle leaves out
    copy = pickle.loads(pickle.dumps(index))
    assert copy._stats_cache is None
    for query in (["a"], ["b", "c"], ["c", "c", "a"]):
        assert [a.tolist() for a in copy.top_k(query, 3)] == [a.tolist() for a in index.top_k(query, 3)]
