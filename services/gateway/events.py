"""Pipeline events as the JSON objects the SSE bridge sends (one per `data:` line)."""
from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from services.gateway.strategy import Strategy

if TYPE_CHECKING:  # the pipeline stores strategy_json with each answer, so it imports this module
    from services.gateway.pipeline import Event


def strategy_json(s: Strategy) -> dict[str, Any]:
    f = s.filter
    return {
        "route": s.route, "retrieval": s.retrieval, "reason": s.reason, "cache_hit": s.cache_hit,
        "collections": s.collections,
        "filter": {"tenant": f.tenant, "start_date": f.start_date, "end_date": f.end_date, "in": f.any_of},
        "time_hint": s.time_hint, "time_window": s.time_window, "detected_funds": s.detected_funds,
        "k": s.k, "candidate_count": s.candidate_count, "chunks": s.chunks, "threshold_layer": s.threshold_layer,
        "retrieval_ms": round(s.retrieval_ms, 2), "embed_ms": round(s.embed_ms, 2), "search_ms": round(s.search_ms, 2),
        "context_chars": s.context_chars, "corrections": s.corrections,
        "conversation_id": s.conversation_id, "cache_key": s.cache_key, "dense_skipped": s.dense_skipped,
        "unavailable": s.unavailable, "model": s.model,
        "variants": s.variants, "rerank_count": s.rerank_count, "quality": [asdict(q) for q in s.quality],
        "followup": asdict(s.followup) if s.followup else None,
        "recency": s.recency, "default_window": s.default_window, "relaxed": s.relaxed,
    }


def event_json(event: Event) -> dict[str, Any]:
    if event.kind == "strategy":
        return {"strategy": strategy_json(event.value)}
    if event.kind == "citations":
        return {"citations": [asdict(c) for c in event.value.citations], "web_queries": event.value.web_queries}
    if event.kind == "done":
        return {"done": True, **event.value}
    return {event.kind: event.value}
