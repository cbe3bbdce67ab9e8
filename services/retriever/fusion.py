"""From ranked lists to explained hits: fusion (weighted RRF, normalised scores or linear), then boosters
and thresholds, in the order the design applies them: time decay, recency and
same-conversation boosts, tag boost, authoritative tie-break, relevance threshold
with fallback layers, parent expansion.

Fused scores are normalised to 0..1 (DBSF's about 0..1) before boosting, so an additive boost such as
"+0.1 for recent" means the same under every fusion."""
from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ragmesh.errors import InvalidArgument
from ragmesh.types import Chunk, Hit
from ragmesh.validation import MAX_ID_CHARS, check_date, check_number, check_text, shown
from services.retriever.backend import Retrieved

RRF, LINEAR = "RRF", "LINEAR"
CONVEX, DBSF = "CONVEX", "DBSF"  # score fusions: each list's scores normalised (`NORMALISE`), then weighted
HYBRID_FUSIONS = (RRF, CONVEX, DBSF)  # what a search that does not ask for linear fusion may be fused by
# Measured on SciFact train (809 queries; docs/benchmarks.md), weights tuned on train alone, every chunk searched
# after its document's title (searched.py), the bench's float32 vectors: RRF 0.5 / 0.5 nDCG@10 0.735, convex
# 0.6 / 0.4 0.742, DBSF 0.6 / 0.4 0.743, the best (over RRF +0.008, no fifth of the queries worse, 84 better / 62
# worse); through the engine's 100-deep lists 0.735. Before titles: RRF 0.727, convex 0.738, DBSF 0.7398 (on int8
# document vectors 0.729, 0.741, 0.7414), and no weight, bound (k), statistics depth or scoring of an entry
# absent from a list lifted DBSF on either (docs/benchmarks.md). DBSF is the default: the planner
# merges the collections' hits by rank (services/gateway/collection_merge.py), so a score fusion's
# per-collection scale no longer lets one collection's near-identical chunks crowd out another's best,
# and the labelled conversations (tests/data/conversations.yaml) keep every fact under it.
DEFAULT_FUSION = DBSF
HYBRID_WEIGHTS = {RRF: (0.5, 0.5), CONVEX: (0.6, 0.4), DBSF: (0.6, 0.4)}  # dense, keyword: each fusion's defaults
TIME_WINDOWS = {"24h": 1, "48h": 2, "1w": 7, "all": 0, "": 0}
LINEAR_DEFAULTS = (0.6, 0.25, 0.15)  # vector, keyword, recency (the notes contract)
DEFAULT_HALF_LIFE_DAYS = 30.0
# RRF's k: how fast a rank's weight falls. 20 rather than the customary 60 weighs the top of each
# list more; measured on SciFact train, hybrid nDCG@10 0.718 -> 0.725, better on each fifth of the
# queries (55 queries better, 20 worse).
DEFAULT_RRF_K = 20
KEYWORD_PASS = 3  # the best keyword matches of each list pass the similarity layers (see `threshold`)
TIE = 1e-4  # scores closer than this are a tie for the authoritative preference
# What each number of the boosters may be (finite, within these bounds).
BOOSTER_RANGES = {
    "half_life_days": (0.0, 36_500.0), "decay_floor": (0.0, 1.0), "recent_boost": (0.0, 10.0),
    "recent_days": (0, 36_500), "same_conversation_boost": (0.0, 10.0), "tag_boost": (0.0, 10.0),
    "min_similarity": (-1.0, 1.0), "fallback_similarity": (-1.0, 1.0),
}
MIN_NOW = dt.date(1000, 1, 1)  # a reference date far enough from date.min for the window arithmetic


@dataclass
class Boosters:
    time_window: str = ""
    half_life_days: float = 0.0
    decay_floor: float = 0.3
    recent_boost: float = 0.0
    recent_days: int = 7
    conversation_id: str = ""
    same_conversation_boost: float = 0.0
    tag_boost: float = 0.0
    prefer_authoritative: bool = False
    min_similarity: float = 0.0
    fallback_similarity: float = 0.0
    expand_parents: bool = False
    now: str = ""

    def validate(self) -> None:
        if self.time_window not in TIME_WINDOWS:
            raise InvalidArgument("boosters.time_window",
                                  f"must be one of 24h, 48h, 1w, all; got {shown(self.time_window)}")
        now = check_date("boosters.now", self.now)
        if now is not None and not MIN_NOW <= now:
            raise InvalidArgument("boosters.now", f"must be {MIN_NOW.isoformat()} or later, got {self.now!r}")
        check_text("boosters.conversation_id", self.conversation_id, MAX_ID_CHARS)
        for name, (low, high) in BOOSTER_RANGES.items():
            check_number(f"boosters.{name}", getattr(self, name), low, high)

    @property
    def today(self) -> dt.date:
        return dt.date.fromisoformat(self.now) if self.now else dt.datetime.now(dt.timezone.utc).date()

    def window(self) -> tuple[str, str]:
        """The time window as (start, end) dates, ("", "") for none: it filters, it does not just rank."""
        days = TIME_WINDOWS[self.time_window]
        if not days:
            return "", ""
        return (self.today - dt.timedelta(days=days)).isoformat(), self.today.isoformat()


@dataclass
class Candidate:
    slot: int
    chunk: Chunk
    dense_rank: int = 0
    dense_score: float = 0.0
    sparse_rank: int = 0
    sparse_score: float = 0.0
    fused: float = 0.0
    score: float = 0.0
    boosts: list[str] = field(default_factory=list)
    similarity: float | None = None  # cosine to the query, for thresholds

    def hit(self, parent_text: str = "") -> Hit:
        return Hit(self.chunk, self.score, self.dense_rank, self.sparse_rank, self.dense_score, self.sparse_score,
                   self.fused, self.boosts, parent_text)


def _candidates(r: Retrieved) -> dict[int, Candidate]:
    """Every slot of every list, with its best rank (and the score there) in each kind of list."""
    out: dict[int, Candidate] = {}
    for kind, lists in (("dense", r.dense), ("sparse", r.sparse)):
        for slots, scores in lists:
            for rank, (slot, score) in enumerate(zip(slots.tolist(), scores.tolist()), start=1):
                c = out.setdefault(slot, Candidate(slot, r.chunks[slot], similarity=r.similarity.get(slot)))
                best = getattr(c, f"{kind}_rank")
                if not best or rank < best:
                    setattr(c, f"{kind}_rank", rank)
                    setattr(c, f"{kind}_score", score)
    return out


def fuse_rrf(r: Retrieved, dense_weight: float, sparse_weight: float, k: int) -> list[Candidate]:
    """Weighted RRF summed over every variant's lists, divided by its maximum possible value."""
    cands = _candidates(r)
    for weight, lists in ((dense_weight, r.dense), (sparse_weight, r.sparse)):
        for slots, _ in lists:
            for rank, slot in enumerate(slots.tolist(), start=1):
                cands[slot].fused += weight / (k + rank)
    best = (dense_weight * len(r.dense) + sparse_weight * len(r.sparse)) / (k + 1) or 1.0
    for c in cands.values():
        c.fused /= best
    return list(cands.values())


def _to_best(scores: np.ndarray) -> np.ndarray:
    """Min-max from the scores' floor, not the list's last: 0 at 0 (cosine and BM25 say nothing below it), 1 at
    the list's best. The list's last depends on how deep the list goes; this does not (SciFact train nDCG@10 at
    0.6 / 0.4: 0.738 and 0.741 over 100- and 1,000-deep lists, min-max from the last 0.735 and 0.739)."""
    best = scores.max()
    return np.clip(scores / best, 0.0, 1.0) if best > 0 else np.zeros_like(scores)


def _distribution(scores: np.ndarray) -> np.ndarray:
    """Distribution-based score fusion's scale (Haystack's joiner's): 0 at mean - 3 std, 1 at mean + 3 std (the
    population std), not clipped: a score beyond 3 std goes past 1, where clipping would tie the best (SciFact
    train 0.597). A list of equal scores says nothing: each 0.5 (the joiner gives 0)."""
    mean, std = scores.mean(), scores.std()
    if std <= 0:
        return np.full_like(scores, 0.5)
    return (scores - (mean - 3 * std)) / (6 * std)


NORMALISE = {CONVEX: _to_best, DBSF: _distribution}


def fuse_scores(r: Retrieved, method: str, dense_weight: float, sparse_weight: float) -> list[Candidate]:
    """Score fusion: each list's scores normalised on their own (`NORMALISE[method]`), then the weighted mean
    over every variant's lists, a list lacking the slot giving it 0: 0..1 as RRF's under CONVEX, about 0..1
    under DBSF (beyond where a score lies past 3 std)."""
    cands = _candidates(r)
    normalise = NORMALISE[method]
    total = 0.0
    for weight, lists in ((dense_weight, r.dense), (sparse_weight, r.sparse)):
        for slots, scores in lists:
            total += weight
            if weight and len(slots):
                for slot, value in zip(slots.tolist(), normalise(scores.astype(np.float64)).tolist()):
                    cands[slot].fused += weight * value
    for c in cands.values():
        c.fused /= total or 1.0
    return list(cands.values())


def _age_days(chunk: Chunk, today: dt.date) -> float | None:
    try:
        return max(0.0, (today - dt.date.fromisoformat(chunk.date)).days)
    except ValueError:
        return None


def fuse_linear(r: Retrieved, weights: tuple[float, float, float], b: Boosters) -> list[Candidate]:
    """vector * cosine + keyword * BM25 / max BM25 + recency * exp(-age / half-life), each part 0..1."""
    cands = _candidates(r)
    w_vec, w_kw, w_rec = weights
    top_kw = max((c.sparse_score for c in cands.values()), default=0.0) or 1.0
    half_life = b.half_life_days or DEFAULT_HALF_LIFE_DAYS
    today = b.today
    for c in cands.values():
        vector = max(0.0, c.similarity if c.similarity is not None else c.dense_score)
        age = _age_days(c.chunk, today)
        recency = math.exp(-age / half_life) if age is not None else 0.0
        c.fused = (w_vec * vector + w_kw * max(0.0, c.sparse_score) / top_kw + w_rec * recency) / (sum(weights) or 1)
    return list(cands.values())


def _tag_overlap(chunk: Chunk, query_tokens: set[str], analyze: Callable[[str], list[str]]) -> int:
    """Transcript tags (comma-separated) that share a term with the query, both analysed alike."""
    if chunk.metadata.get("type") != "transcript":
        return 0
    tags = [set(analyze(t)) for t in chunk.metadata.get("tags", "").split(",")]
    return sum(1 for terms in tags if terms & query_tokens)


def boost(cands: list[Candidate], b: Boosters, query: str, analyze: Callable[[str], list[str]], linear: bool) -> None:
    """Applies the boosters in place, recording each change on the candidate."""
    query_tokens = set(analyze(query))
    today = b.today
    for c in cands:
        c.score = c.fused
        age = _age_days(c.chunk, today)
        if b.half_life_days and not linear and age is not None:  # linear fusion already weighs recency
            factor = max(b.decay_floor, math.exp(-age / b.half_life_days))
            c.score *= factor
            c.boosts.append(f"recency x{factor:.2f}")
        if b.recent_boost and age is not None and age <= b.recent_days:
            c.score += b.recent_boost
            c.boosts.append(f"+{b.recent_boost:g} recent ({age:.0f} days)")
        if b.same_conversation_boost and b.conversation_id and c.chunk.metadata.get("conversation_id") == b.conversation_id:
            c.score += b.same_conversation_boost
            c.boosts.append(f"+{b.same_conversation_boost:g} same conversation")
        overlap = _tag_overlap(c.chunk, query_tokens, analyze) if b.tag_boost else 0
        if overlap:
            factor = 1 + min(1.0, b.tag_boost * overlap)
            c.score *= factor
            c.boosts.append(f"tags x{factor:.2f} ({overlap} matching)")


def order(cands: list[Candidate], prefer_authoritative: bool) -> list[Candidate]:
    """Best first; with the preference, near-ties put documents before transcripts (authoritative tie-break)."""
    def key(c: Candidate) -> tuple:
        transcript = prefer_authoritative and c.chunk.metadata.get("type") == "transcript"
        return (-round(c.score / TIE) if prefer_authoritative else -c.score, transcript, -c.score, c.slot)

    ranked = sorted(cands, key=key)
    if prefer_authoritative:
        for c in ranked:
            if c.chunk.metadata.get("type") != "transcript":
                c.boosts.append("authoritative")
    return ranked


def threshold(cands: list[Candidate], b: Boosters) -> tuple[list[Candidate], int]:
    """The relevance layers: min similarity, then the fallback similarity, then any hits. Returns the layer
    used. A layer some candidate reaches also keeps the best keyword matches (KEYWORD_PASS ranks of a keyword
    list): a passage that names the question's rare words ("Mexico", "M&A") is relevant however far its
    embedding sits, and a similarity floor alone would drop it for passages that only resemble the question."""
    if not b.min_similarity:
        return cands, 0
    for layer, floor in ((1, b.min_similarity), (2, b.fallback_similarity)):
        if floor and any(c.similarity is not None and c.similarity >= floor for c in cands):
            return [c for c in cands if (c.similarity is not None and c.similarity >= floor)
                    or 0 < c.sparse_rank <= KEYWORD_PASS], layer
    return cands, 3


def expand_parents(cands: list[Candidate], parents: dict[str, str]) -> list[Hit]:
    """The first child of each parent carries the parent's text; later children do not repeat it."""
    seen: set[str] = set()
    hits = []
    for c in cands:
        pid = c.chunk.parent_chunk_id
        text = parents.get(pid, "") if pid and pid not in seen else ""
        if text:
            seen.add(pid)
        hits.append(c.hit(text))
    return hits

