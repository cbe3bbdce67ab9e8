"""002's chat response contract (the notes assistant), for clients built on it: POST /api/chat/ask with
`"format": "notes"`. The answer cites [N1], [N2] (ragmesh's [1], [2]); each citation is
{cid, noteId, chunkId, createdAt, snippet, score}; meta is {model, retrieval: {k, strategy,
candidateCount, rerankCount, timeMs}}. Only the shape differs: the answer, its sources and how it was
found are those of ragmesh's own format."""
from __future__ import annotations

import re
from typing import Any

from services.gateway.router import SUMMARY
from services.gateway.strategy import NO_RETRIEVAL, Strategy

_MARKER = re.compile(r"\[(\d+)\]")


def cid(index: int) -> str:
    return f"N{index}"


def created_at(date: str) -> str:
    """002's ISO timestamp: a chunk's date (YYYY-MM-DD) as the start of that day in UTC."""
    return f"{date}T00:00:00.000Z" if len(date) == 10 else date


def retrieval_strategy(s: Strategy | None) -> str:
    """002's `strategy` name: none, summary, or hybrid / keyword (embedder down), with _reranked when a
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


def notes_response(answer: str, citations: list[dict[str, Any]], s: Strategy | None, model: str,
                   conversation_id: str) -> dict[str, Any]:
    scores = {h.chunk.chunk_id: h.score for h in (s.hits if s else [])}
    cited = {c["index"] for c in citations}
    return {
        "answer": _MARKER.sub(lambda m: f"[{cid(int(m[1]))}]" if int(m[1]) in cited else m[0], answer),
        "citations": [{
            "cid": cid(c["index"]), "noteId": c["doc_id"], "chunkId": c["chunk_id"],
            "createdAt": created_at(c["date"]), "snippet": c["snippet"],
            "score": round(scores.get(c["chunk_id"], 0.0), 4),
            "title": c["title"], "url": c["url"], "ref": c["ref"],
        } for c in citations],
        "conversation_id": conversation_id,
        "meta": {"model": model, "retrieval": {
            "k": s.k if s else 0, "strategy": retrieval_strategy(s),
            "candidateCount": s.candidate_count if s else 0,
            "rerankCount": s.rerank_count if s else 0,
            "timeMs": round(s.retrieval_ms) if s else 0,
        }},
    }
