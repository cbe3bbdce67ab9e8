"""The notes contract (the notes assistant's chat response), for clients built on it: POST /api/chat/ask
with `"format": "notes"`, or Gateway.AskNotes. The answer cites [N1], [N2] (ragmesh's [1], [2]); each citation is
{cid, noteId, chunkId, createdAt, snippet, score}; meta is {model, retrieval: {k, strategy,
candidateCount, rerankCount, timeMs}}. Only the shape differs: the answer, its sources and how it was
found are those of ragmesh's own format."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from services.gateway.router import SUMMARY
from services.gateway.planner import NO_RETRIEVAL
from services.gateway.strategy import Strategy
from services.gateway.whole_answer import WholeAnswer

_MARKER = re.compile(r"\[(\d+)\]")


def cid(index: int) -> str:
    return f"N{index}"


def created_at(date: str) -> str:
    """The contract's ISO timestamp: a chunk's date (YYYY-MM-DD) as the start of that day in UTC."""
    return f"{date}T00:00:00.000Z" if len(date) == 10 else date


def retrieval_strategy(s: Strategy | None) -> str:
    """The contract's `strategy` name: none, summary, or hybrid / keyword (embedder down), with _reranked when a
    model reranked the candidates and _cached when the conversation's cached scope was reused."""
    if s is None or s.retrieval == NO_RETRIEVAL:
        return "none"
    if s.route == SUMMARY:
        return "summary"
    parts = ["keyword" if s.dense_skipped else "hybrid"]
    if s.rerank_count:  # a model reranked the candidates (the quality stack)
        parts.append("reranked")
    if s.cache_hit:
        parts.append("cached")
    return "_".join(parts)


@dataclass(frozen=True)
class NoteCitation:
    cid: str
    note_id: str
    chunk_id: str
    created_at: str
    snippet: str
    score: float
    title: str
    url: str
    ref: str


@dataclass(frozen=True)
class NotesRetrieval:
    k: int
    strategy: str
    candidate_count: int
    rerank_count: int
    time_ms: int


@dataclass(frozen=True)
class NotesAnswer:
    answer: str
    citations: list[NoteCitation]
    conversation_id: str
    model: str
    retrieval: NotesRetrieval


def notes_answer(whole: WholeAnswer) -> NotesAnswer:
    """A whole answer in the notes contract's terms: [N1] markers, each citation with its score."""
    s = whole.strategy
    cited = {c.index for c in whole.citations}
    return NotesAnswer(
        answer=_MARKER.sub(lambda m: f"[{cid(int(m[1]))}]" if int(m[1]) in cited else m[0], whole.answer),
        citations=[NoteCitation(cid(c.index), c.doc_id, c.chunk_id, created_at(c.date), c.snippet,
                                round(whole.scores.get(c.chunk_id, 0.0), 4), c.title, c.url, c.ref)
                   for c in whole.citations],
        conversation_id=whole.conversation_id, model=whole.model,
        retrieval=NotesRetrieval(s.k if s else 0, retrieval_strategy(s), s.candidate_count if s else 0,
                                 s.rerank_count if s else 0, round(s.retrieval_ms) if s else 0),
    )


def notes_json(n: NotesAnswer) -> dict[str, Any]:
    """The contract's JSON (camelCase, as its clients read it)."""
    r = n.retrieval
    return {
        "answer": n.answer,
        "citations": [{"cid": c.cid, "noteId": c.note_id, "chunkId": c.chunk_id, "createdAt": c.created_at,
                       "snippet": c.snippet, "score": c.score, "title": c.title, "url": c.url, "ref": c.ref}
                      for c in n.citations],
        "conversation_id": n.conversation_id,
        "meta": {"model": n.model, "retrieval": {"k": r.k, "strategy": r.strategy, "candidateCount": r.candidate_count,
                                                 "rerankCount": r.rerank_count, "timeMs": r.time_ms}},
    }
