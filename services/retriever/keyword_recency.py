"""Ranking when the embedder is down: keyword and recency. With no question vector there is no
similarity to fuse, and BM25 alone ranks a note of last year beside last week's when they share the
question's words; so each hit scores keyword x BM25 / best BM25 + recency x exp(-age / half-life):
the notes contract's linear fusion (0.6 vector + 0.25 keyword + 0.15 recency) without its vector part.
Age counts from today (or the boosters' `now`), as in that fusion: recency orders near-equal keyword
matches among recent notes, and a much better keyword match still comes first."""
from __future__ import annotations

from services.retriever import fusion as ranking
from services.retriever.backend import Retrieved
from services.retriever.fusion import LINEAR_DEFAULTS, Boosters, Candidate

WEIGHTS = (0.0, *LINEAR_DEFAULTS[1:])  # no vector; keyword 0.25, recency 0.15


def fuse(retrieved: Retrieved, boosters: Boosters) -> list[Candidate]:
    """The hits scored on keyword and recency, each saying so."""
    found = ranking.fuse_linear(retrieved, WEIGHTS, boosters)
    for c in found:
        c.boosts.append("keyword + recency (embedder down)")
    return found
