"""Fusion and boosters on hand-made ranked lists: every number is checked by hand."""
import math

import numpy as np
import pytest

from ragmesh.types import Chunk
from services.retriever.fusion import (
    CONVEX, DBSF, Boosters, boost, expand_parents, fuse_linear, fuse_rrf, fuse_scores, order, threshold,
)
from services.retriever.index import Retrieved


def ranked(*slots: int) -> tuple[np.ndarray, np.ndarray]:
    return np.array(slots, dtype=np.int64), np.linspace(1.0, 0.5, len(slots)).astype(np.float32)


def chunk(i: int, **meta: str) -> Chunk:
    date = meta.pop("date", "2024-01-01")
    parent = meta.pop("parent", "")
    return Chunk(f"c{i}", f"d{i}", "col", f"text {i}", meta, date, parent_chunk_id=parent)


def retrieved(dense: list, sparse: list, n: int = 12, **kw) -> Retrieved:
    return Retrieved(dense, sparse, n, chunks={i: chunk(i) for i in range(n)}, **kw)


def by_slot(cands) -> dict:
    return {c.slot: c for c in cands}


def test_rrf_is_weighted_reciprocal_rank_normalised_to_one() -> None:
    cands = by_slot(fuse_rrf(retrieved([ranked(7, 3)], [ranked(3, 9)]), 0.5, 0.5, k=60))
    best = 1.0 / 61  # both lists at rank 1
    assert cands[3].fused == pytest.approx((0.5 / 62 + 0.5 / 61) / best)
    assert cands[7].fused == pytest.approx((0.5 / 61) / best)
    assert (cands[3].dense_rank, cands[3].sparse_rank) == (2, 1)
    assert (cands[9].dense_rank, cands[9].sparse_rank) == (0, 2)


def test_query_variants_are_fused_together_keeping_the_best_rank() -> None:
    r = retrieved([ranked(1, 2), ranked(2, 5)], [ranked(2), ranked(5)])
    cands = by_slot(fuse_rrf(r, 0.5, 0.5, k=60))
    assert cands[2].dense_rank == 1 and cands[2].sparse_rank == 1
    assert cands[2].fused > cands[1].fused and cands[5].fused > cands[1].fused


def test_linear_fusion_weighs_vector_keyword_and_recency() -> None:
    r = retrieved([ranked(1, 2)], [ranked(2)], similarity={1: 0.9, 2: 0.4})
    r.chunks[1] = chunk(1, date="2024-01-01")
    r.chunks[2] = chunk(2, date="2024-01-31")
    cands = by_slot(fuse_linear(r, (0.6, 0.25, 0.15), Boosters(half_life_days=30, now="2024-01-31")))
    assert cands[1].fused == pytest.approx(0.6 * 0.9 + 0 + 0.15 * np.exp(-30 / 30))
    assert cands[2].fused == pytest.approx(0.6 * 0.4 + 0.25 * 1.0 + 0.15 * 1.0)


def test_boosters_explain_themselves() -> None:
    r = retrieved([ranked(0, 1, 2, 3)], [])
    r.chunks.update({
        0: chunk(0, date="2020-01-01"),
        1: chunk(1, date="2024-06-28"),
        2: chunk(2, conversation_id="conv-1"),
        3: chunk(3, type="transcript", tags="budget, hiring"),
    })
    cands = fuse_rrf(r, 1.0, 0.0, k=60)
    b = Boosters(half_life_days=10, decay_floor=0.3, recent_boost=0.1, recent_days=7, conversation_id="conv-1",
                 same_conversation_boost=0.2, tag_boost=0.25, now="2024-06-30")
    boost(cands, b, "hiring plan", str.split, linear=False)
    c = by_slot(cands)
    assert c[0].boosts == ["recency x0.30"], "the floor keeps old chunks in play"
    assert "+0.1 recent (2 days)" in c[1].boosts
    assert "+0.2 same conversation" in c[2].boosts
    assert "tags x1.25 (1 matching)" in c[3].boosts
    assert c[2].score == pytest.approx(c[2].fused * 0.3 + 0.2), "decayed to the floor, then boosted"


def test_authoritative_documents_win_near_ties() -> None:
    r = retrieved([ranked(0)], [ranked(1)])
    r.chunks[0] = chunk(0, type="transcript")
    cands = fuse_rrf(r, 0.5, 0.5, k=60)  # equal scores
    assert [c.slot for c in order(cands, prefer_authoritative=True)] == [1, 0]


def test_threshold_layers_fall_back_then_give_any_hits() -> None:
    r = retrieved([ranked(0, 1)], [], similarity={0: 0.45, 1: 0.2})
    cands = fuse_rrf(r, 1.0, 0.0, k=60)
    kept, layer = threshold(cands, Boosters(min_similarity=0.7, fallback_similarity=0.3))
    assert layer == 2 and [c.slot for c in kept] == [0]
    kept, layer = threshold(cands, Boosters(min_similarity=0.7, fallback_similarity=0.5))
    assert layer == 3 and len(kept) == 2
    assert threshold(cands, Boosters())[1] == 0


def test_parent_text_comes_once_per_parent() -> None:
    r = retrieved([ranked(0, 1, 2)], [])
    for i in range(3):
        r.chunks[i] = chunk(i, parent="p1" if i < 2 else "p2")
    hits = expand_parents(order(fuse_rrf(r, 1.0, 0.0, 60), False), {"p1": "PARENT ONE", "p2": "PARENT TWO"})
    assert [h.parent_text for h in hits] == ["PARENT ONE", "", "PARENT TWO"]


def test_time_window_is_a_date_range_ending_now() -> None:
    assert Boosters(time_window="1w", now="2024-03-10").window() == ("2024-03-03", "2024-03-10")
    assert Boosters(time_window="24h", now="2024-03-10").window() == ("2024-03-09", "2024-03-10")
    assert Boosters(time_window="all").window() == ("", "")


def test_the_best_keyword_matches_pass_a_layer_that_similar_passages_reach() -> None:
    """Slot 1 names the question's rare word (the keyword list's first) but sits far in the embedding: it
    passes with slot 0, which is similar; slot 2 is neither. A layer no passage reaches still falls through."""
    r = retrieved([ranked(0, 2, 1)], [ranked(1)], similarity={0: 0.45, 1: 0.2, 2: 0.25})
    cands = fuse_rrf(r, 0.5, 0.5, k=60)
    kept, layer = threshold(cands, Boosters(min_similarity=0.7, fallback_similarity=0.3))
    assert layer == 2 and sorted(c.slot for c in kept) == [0, 1]
    kept, layer = threshold(cands, Boosters(min_similarity=0.7, fallback_similarity=0.5))
    assert layer == 3 and len(kept) == 3


def scored(slots: list[int], scores: list[float]) -> tuple[np.ndarray, np.ndarray]:
    return np.array(slots, dtype=np.int64), np.array(scores, dtype=np.float32)


def test_convex_fusion_is_the_weighted_mean_of_scores_divided_by_each_lists_best() -> None:
    r = retrieved([scored([1, 2, 3], [0.8, 0.6, -0.2])], [scored([3, 4], [12.0, 3.0])])
    cands = by_slot(fuse_scores(r, CONVEX, 0.6, 0.4))
    assert cands[1].fused == pytest.approx(0.6 * 1.0)
    assert cands[2].fused == pytest.approx(0.6 * 0.6 / 0.8)
    assert cands[3].fused == pytest.approx(0.6 * 0.0 + 0.4 * 1.0), "a negative cosine counts as 0"
    assert cands[4].fused == pytest.approx(0.4 * 3.0 / 12.0)
    assert (cands[3].dense_rank, cands[3].sparse_rank, cands[3].sparse_score) == (3, 1, 12.0)


def test_dbsf_scales_each_list_by_its_mean_and_three_standard_deviations() -> None:
    scores = [4.0, 2.0, 1.0, 1.0]
    mean, std = np.mean(scores), np.std(scores)
    r = retrieved([], [scored([0, 1, 2, 3], scores)])
    cands = by_slot(fuse_scores(r, DBSF, 0.5, 0.5))
    for slot, value in enumerate(scores):
        assert cands[slot].fused == pytest.approx((value - (mean - 3 * std)) / (6 * std))
    assert cands[2].fused == cands[3].fused, "equal scores, equal fused scores"


@pytest.mark.parametrize("method", [CONVEX, DBSF])
def test_score_fusion_of_variants_rewards_agreement(method: str) -> None:
    r = retrieved([scored([0, 1], [0.8, 0.3]), scored([1, 2], [0.7, 0.6])],
                  [scored([1, 0], [5.0, 1.0]), scored([1], [2.0])])
    cands = by_slot(fuse_scores(r, method, 0.5, 0.5))
    assert method != CONVEX or all(0.0 <= c.fused <= 1.0 for c in cands.values())
    assert max(cands.values(), key=lambda c: c.fused).slot == 1, "first in three of the four lists"


@pytest.mark.parametrize("method", [CONVEX, DBSF])
def test_score_fusion_of_one_element_or_equal_scores_is_finite(method: str) -> None:
    one = by_slot(fuse_scores(retrieved([scored([5], [0.42])], [scored([5], [7.0])]), method, 0.5, 0.5))
    assert math.isfinite(one[5].fused) and one[5].fused > 0
    ties = by_slot(fuse_scores(retrieved([scored([0, 1, 2], [0.5] * 3)], [scored([0, 1, 2], [3.0] * 3)]),
                               method, 0.5, 0.5))
    assert len({c.fused for c in ties.values()}) == 1 and all(math.isfinite(c.fused) for c in ties.values())


@pytest.mark.parametrize("method", [CONVEX, DBSF])
def test_score_fusion_with_one_list_empty_ranks_by_the_other(method: str) -> None:
    keyword_only = by_slot(fuse_scores(retrieved([scored([], [])], [scored([3, 1, 2], [9.0, 4.0, 1.0])]),
                                       method, 0.5, 0.5))
    assert [s for s, _ in sorted(keyword_only.items(), key=lambda kv: -kv[1].fused)] == [3, 1, 2]
    assert fuse_scores(retrieved([scored([], [])], [scored([], [])]), method, 0.5, 0.5) == []
    embedder_down = by_slot(fuse_scores(retrieved([], [scored([3, 1], [9.0, 4.0])]), method, 0.0, 0.5))
    assert embedder_down[3].fused == pytest.approx(_top(method)), "the keyword list alone reaches the top"


def _top(method: str) -> float:
    return 1.0 if method == CONVEX else (9.0 - (6.5 - 3 * 2.5)) / (6 * 2.5)


def test_dbsf_is_not_clipped_so_the_best_scores_stay_apart() -> None:
    """Two scores far above the rest lie past mean + 3 std: clipped, both would be 1 and tie."""
    r = retrieved([], [scored(list(range(42)), [100.0, 95.0] + [1.0] * 40)], n=42)
    cands = by_slot(fuse_scores(r, DBSF, 0.5, 0.5))
    assert cands[0].fused > cands[1].fused > cands[2].fused
