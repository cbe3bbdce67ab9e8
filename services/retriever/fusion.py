"""Weighted Reciprocal Rank Fusion: score = sum over lists of weight / (k + rank), rank from 1.

No score normalisation is needed, and each fused hit keeps its rank and score in
every list so anyone can see why it ranked where it did."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Fused:
    position: int
    score: float
    dense_rank: int = 0
    sparse_rank: int = 0
    dense_score: float = 0.0
    sparse_score: float = 0.0


def weighted_rrf(
    dense: tuple[np.ndarray, np.ndarray],
    sparse: tuple[np.ndarray, np.ndarray],
    dense_weight: float = 0.5,
    sparse_weight: float = 0.5,
    k: int = 60,
) -> list[Fused]:
    """Fuses two ranked lists of positions; best first, ties broken by position."""
    fused: dict[int, Fused] = {}
    for rank, (pos, score) in enumerate(zip(*dense), start=1):
        item = fused.setdefault(int(pos), Fused(int(pos), 0.0))
        item.score += dense_weight / (k + rank)
        item.dense_rank, item.dense_score = rank, float(score)
    for rank, (pos, score) in enumerate(zip(*sparse), start=1):
        item = fused.setdefault(int(pos), Fused(int(pos), 0.0))
        item.score += sparse_weight / (k + rank)
        item.sparse_rank, item.sparse_score = rank, float(score)
    return sorted(fused.values(), key=lambda f: (-f.score, f.position))
