import numpy as np
import pytest

from services.retriever.fusion import weighted_rrf


def lists(*positions: list[int]) -> tuple[np.ndarray, np.ndarray]:
    pos = np.array(positions[0], dtype=np.int64)
    return pos, np.linspace(1.0, 0.5, len(pos)).astype(np.float32)


def test_rrf_scores_are_weighted_reciprocal_ranks() -> None:
    fused = weighted_rrf(lists([7, 3]), lists([3, 9]), 0.5, 0.5, k=60)
    by_pos = {f.position: f for f in fused}
    assert by_pos[3].score == pytest.approx(0.5 / 62 + 0.5 / 61)
    assert by_pos[7].score == pytest.approx(0.5 / 61)
    assert by_pos[9].score == pytest.approx(0.5 / 62)
    assert [f.position for f in fused] == [3, 7, 9]
    assert (by_pos[3].dense_rank, by_pos[3].sparse_rank) == (2, 1)
    assert (by_pos[9].dense_rank, by_pos[9].sparse_rank) == (0, 2)


def test_weights_and_k_change_the_order() -> None:
    dense_first = weighted_rrf(lists([1]), lists([2]), 0.9, 0.1, k=60)
    sparse_first = weighted_rrf(lists([1]), lists([2]), 0.1, 0.9, k=60)
    assert dense_first[0].position == 1 and sparse_first[0].position == 2
    assert weighted_rrf(lists([1]), lists([]), 1.0, 1.0, k=1)[0].score == pytest.approx(0.5)
