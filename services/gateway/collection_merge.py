"""The hits of several collections' searches as one ranked list: merged by rank, not by score."""
from __future__ import annotations

from ragmesh.types import Hit


def by_rank(ranked: list[list[Hit]]) -> list[Hit]:
    """Every collection's first hit, then every collection's second, and so on, each collection's own
    order kept; within a rank, the higher score first.

    Each search fuses and normalises its own collection's lists (under convex fusion each list's best
    scores 1, under DBSF each list is scaled by its own mean and spread, under RRF a score is ranks), so
    the scores of two collections are not on one scale. Sorted by score, one collection's near-identical
    chunks (a fund's factsheets, one per date, alike but for the date, each close to that list's best)
    take every place the route keeps and the other collection's best passage none; by rank, no
    collection's n-th hit comes before another's first. This is reciprocal-rank fusion of the
    collections' lists, equally weighted: a chunk is in one collection, so its sum has one term and
    orders by rank alone. Within a rank the score still says which hit stands further above the rest of
    its own list (under DBSF, by how many spreads), so it orders the tie."""
    placed = [(rank, hit) for hits in ranked for rank, hit in enumerate(hits)]
    return [hit for _, hit in sorted(placed, key=lambda p: (p[0], -p[1].score))]
