"""Ranking when the embedder is down: keyword and recency. With no question vector there is no
similarity to fuse, and BM25 alone ranks a note of two years ago beside last week's when they share
the question's words; so each hit scores keyword x BM25 / best BM25 + recency x exp(-age / half-life)
(the linear fusion with no vector part, at the notes contract's keyword and recency weights). Age is
counted from the newest hit's date, not today: a corpus whose newest note is months old is still
ordered by how recent each note is, instead of every hit's recency being ~0."""
from __future__ import annotations

import dataclasses
import datetime as dt

from services.retriever import fusion as ranking
from services.retriever.backend import Retrieved
from services.retriever.fusion import LINEAR_DEFAULTS, Boosters, Candidate

WEIGHTS = (0.0, *LINEAR_DEFAULTS[1:])  # no vector; keyword 0.25, recency 0.15


def fuse(retrieved: Retrieved, boosters: Boosters) -> list[Candidate]:
    """The hits scored on keyword and recency, recency counted from the newest hit (or today, if sooner)."""
    newest = _newest(retrieved, boosters.today)
    counted_from = dataclasses.replace(boosters, now=newest.isoformat()) if newest else boosters
    found = ranking.fuse_linear(retrieved, WEIGHTS, counted_from)
    for c in found:
        c.boosts.append("keyword + recency (embedder down)")
    return found


def _newest(retrieved: Retrieved, today: dt.date) -> dt.date | None:
    dates = []
    for chunk in retrieved.chunks.values():
        try:
            dates.append(dt.date.fromisoformat(chunk.date))
        except ValueError:  # undated
            continue
    return min(max(dates), today) if dates else None
