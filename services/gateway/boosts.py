"""What the gateway asks of the retriever's ranking for one collection: the route's
relevance thresholds, the time window, and the boosters that belong to each source, so a
question reaches every booster the design describes:

- every collection: the route's minimum similarity (0.7 specific, 0.5 general, 0.6 deep)
  with the fallback layer at 0.3, then any hits; parents expanded; the time window;
- the conversation memory: the conversation boosters, +0.1 for messages of the last 7 days and +0.2 for
  messages of the conversation being asked in;
- documents, where transcripts live beside uploaded files: the transcript tag boost
  and the authoritative tie-break (documents before transcripts on near-ties);
- the notes contract: linear fusion 0.6 vector + 0.25 keyword + 0.15 recency;
- a question asking for the latest: the time decay, score x max(floor, exp(-age / half-life));
- a question about a whole year's result ("2025 full-year return"): the same decay counted from the
  year's end, so what reports on the year ranks before what reports within it.
"""
from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, replace
from typing import Any

from ragmesh.types import MEMORY_COLLECTION
from services.gateway.query_analysis import DateRange
from services.gateway.request import SOURCE_COLLECTIONS
from services.gateway.router import FALLBACK_SIMILARITY

RECENT_BOOST, RECENT_DAYS = 0.1, 7  # conversation boosters: recent results get +0.1
SAME_CONVERSATION_BOOST = 0.2  # conversation boosters: results from the same conversation get +0.2
TAG_BOOST = 0.1  # transcript tag boost: x (1 + 0.1 per transcript tag sharing a term with the question), at most x2
TRANSCRIPT_COLLECTIONS = frozenset({"documents"})  # transcripts are indexed with the documents
LINEAR_WEIGHTS = (0.6, 0.25, 0.15)  # notes contract: vector, keyword, recency
# A whole year asked about: the time decay counts from the year's end, so its year-end report leads a
# mid-year one (six months older: x0.25) and earlier years' reports sit at the floor.
PERIOD_HALF_LIFE_DAYS, PERIOD_FLOOR = 90.0, 0.2


@dataclass(frozen=True)
class Ranking:
    """What one Ask wants of every search it makes (the per-collection part is added by `options`)."""

    min_similarity: float
    conversation_id: str
    time_window: str = ""  # 24h | 48h | 1w; "" or "all": no window
    now: str = ""  # YYYY-MM-DD the window and recency count from (the gateway's today)
    linear: bool = False  # the notes contract
    half_life_days: float = 0.0  # > 0: the time decay (recency asked for, or a whole year's end)
    decay_floor: float = 0.3

    def flat_for(self, newest: str) -> bool:
        """Whether the decay, counted from `now`, is at its floor for every hit (the newest is older
        than half-life x ln(1 / floor)): it then orders nothing, so it is counted from the newest instead."""
        if not self.half_life_days or not self.now or not 0 < self.decay_floor < 1:
            return False
        try:
            age = (dt.date.fromisoformat(self.now) - dt.date.fromisoformat(newest)).days
        except ValueError:  # undated hits: nothing to count from
            return False
        return age > self.half_life_days * math.log(1 / self.decay_floor)


def toward_period(r: Ranking, period: DateRange | None) -> tuple[Ranking, str]:
    """The ranking for a question about a whole year's result (`period`, read from "2025 full-year return":
    query_analysis.reported_period), and what the
    strategy event says of it: the time decay counted from the year's end, since what reports on a year is
    dated at its end or after. Words asking for the latest (a decay from today) and a time window win."""
    if r.half_life_days or r.time_window not in ("", "all") or period is None:
        return r, ""
    note = (f"; {period.phrase!r} is reported at {period.end} and after: time decay counted from {period.end}, "
            f"half-life {PERIOD_HALF_LIFE_DAYS:g} days, floor {PERIOD_FLOOR:g}")
    return replace(r, now=period.end, half_life_days=PERIOD_HALF_LIFE_DAYS, decay_floor=PERIOD_FLOOR), note


def options(collection: str, r: Ranking) -> dict[str, Any]:
    """Keyword arguments of RetrieverClient.search for one collection."""
    boosters: dict[str, Any] = {"min_similarity": r.min_similarity, "fallback_similarity": FALLBACK_SIMILARITY,
                                "expand_parents": True, "now": r.now}
    if r.time_window not in ("", "all"):
        boosters["time_window"] = r.time_window
    if r.half_life_days:
        boosters |= {"half_life_days": r.half_life_days, "decay_floor": r.decay_floor}
    if collection == MEMORY_COLLECTION:
        boosters |= {"recent_boost": RECENT_BOOST, "recent_days": RECENT_DAYS,
                     "conversation_id": r.conversation_id, "same_conversation_boost": SAME_CONVERSATION_BOOST}
    if collection in TRANSCRIPT_COLLECTIONS:
        boosters |= {"tag_boost": TAG_BOOST, "prefer_authoritative": True}
    if r.linear:
        return {"boosters": boosters, "fusion": "LINEAR", "weights": LINEAR_WEIGHTS}
    return {"boosters": boosters}


def default_windows(spec: str) -> dict[str, int]:
    """DEFAULT_WINDOW_DAYS ("Conversation memory=90, Meeting Notes=90") as collection -> days; a
    malformed entry raises ValueError naming the variable."""
    windows: dict[str, int] = {}
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        source, _, days = entry.rpartition("=")
        collection = SOURCE_COLLECTIONS.get(source.strip())
        if collection is None or not days.strip().isdigit():
            raise ValueError(f"DEFAULT_WINDOW_DAYS: {entry!r} must be 'Data Source=days' with one of "
                             f"{', '.join(SOURCE_COLLECTIONS)}")
        if int(days):
            windows[collection] = int(days)
    return windows
