"""The strategy event's one definition: `Strategy` says how a question is answered, and its JSON (the SSE
bridge, the stored answer), its protobuf message (gateway.proto `Strategy`, read from that JSON by the
servicer) and its schema (pydantic's TypeAdapter(Strategy)) all derive from it. `strategy_event` is the
one place it is assembled, from what each stage returned: the planner's Plan, the quality steps run
after it, the context built and the corrections found."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from services.gateway.followup import Followup
from services.gateway.planner import Plan
from services.gateway.quality import QualityStep
from services.gateway.reading import Carried

# Field docstrings are the schema's descriptions; every field is in every strategy event.
_SCHEMA = {"use_attribute_docstrings": True, "json_schema_serialization_defaults_required": True}


@dataclass(frozen=True)
class StrategyFilter:
    """The filter the search ran under."""

    __pydantic_config__ = _SCHEMA

    tenant: str
    start_date: str
    end_date: str
    any_of: Annotated[dict[str, list[str]], Field(alias="in")]
    """Metadata field -> values, any of which matches"""


@dataclass(frozen=True)
class Strategy:
    """How the question is answered: the route, what was searched and found."""

    __pydantic_config__ = _SCHEMA

    route: str
    """DIRECT | NO_RAG | SUMMARY | DEEP | LOOKUP | SPECIFIC"""
    retrieval: str
    """RAG_NEW_QUERY | RAG_REUSE | NO_RAG (no search)"""
    reason: str
    cache_hit: bool
    collections: list[str]
    filter: StrategyFilter
    time_hint: str
    """Words of the question read as a period (e.g. 'last quarter'), turned into the date filter"""
    time_window: str
    """The retriever's window filter: 24h, 48h, 1w or all (empty: none)"""
    detected_funds: list[str]
    """Fund names read from the question, used as the fund filter (narrowing the selected funds to those among them)"""
    k: int
    candidate_count: int
    chunks: int
    """Chunks that went into the context"""
    threshold_layer: int
    """1 min similarity, 2 fallback similarity, 3 any hits"""
    retrieval_ms: float
    embed_ms: float
    """The question's embedding, request to vector; a question every route searches for starts it while the
    conversation is read"""
    search_ms: float
    """Of retrieval_ms, the wait for the searches (0 when the scope was reused)"""
    context_chars: int
    corrections: int
    """The user's corrections given to the model"""
    conversation_id: str
    cache_key: str
    dense_skipped: bool
    """Embedder unavailable: keyword search only"""
    unavailable: list[str]
    """Collections whose search failed or timed out"""
    model: str
    variants: list[str]
    """More queries searched beside the question: the model's rewrites, or the earlier question a follow-up
    with no words of its own refers to"""
    rerank_count: int
    """Candidates the model reranked (0: none)"""
    quality: list[QualityStep]
    """The quality steps, in the order they ran"""
    followup: Followup
    """Whether the question reworks what the conversation holds (answered from it, no search), and the
    signal that decided"""
    recency: str
    """Words asking for the latest (e.g. 'latest', 'as of now') that sent the retriever's time decay; empty: none"""
    default_window: dict[str, int]
    """Collections searched within their default window (DEFAULT_WINDOW_DAYS): collection -> days"""
    relaxed: list[str]
    """Filters read from the question, or a default window, that found nothing and were loosened, each with why"""
    carried: Carried
    """What the question inherited from the conversation because it named none of its own (funds, the period
    and question an elliptical follow-up asks again, the person it refers to), and what it named in place of
    the conversation's (services/gateway/reading.py states the rule)"""


def strategy_event(plan: Plan, later_steps: Sequence[QualityStep], context_chars: int, corrections: int,
                   notes: Sequence[str] = ()) -> Strategy:
    """The strategy event of one answer: the plan, the quality steps run after planning (compression),
    the size of the context built, the corrections given to the model, and `notes` said after the
    plan's reason (e.g. that web search is not available to the model)."""
    f = plan.filter
    return Strategy(
        route=plan.route, retrieval=plan.retrieval, reason="; ".join([plan.reason, *notes]),
        cache_hit=plan.cache_hit, collections=list(plan.collections),
        filter=StrategyFilter(f.tenant, f.start_date, f.end_date, dict(f.any_of)),
        time_hint=plan.time_hint, time_window=plan.time_window, detected_funds=list(plan.detected_funds),
        k=plan.k, candidate_count=plan.candidate_count, chunks=len(plan.hits), threshold_layer=plan.threshold_layer,
        retrieval_ms=round(plan.retrieval_ms, 2), embed_ms=round(plan.embed_ms, 2), search_ms=round(plan.search_ms, 2),
        context_chars=context_chars, corrections=corrections,
        conversation_id=plan.conversation_id, cache_key=plan.cache_key, dense_skipped=plan.dense_skipped,
        unavailable=list(plan.unavailable), model=plan.model, variants=list(plan.variants),
        rerank_count=plan.rerank_count, quality=[*plan.quality, *later_steps], followup=plan.followup,
        recency=plan.recency, default_window=dict(plan.default_window), relaxed=list(plan.relaxed),
        carried=plan.reading.carried if plan.reading else Carried(),
    )


_JSON = TypeAdapter(Strategy)


def strategy_json(s: Strategy) -> dict[str, Any]:
    """The strategy as the SSE bridge sends it and an answer's meta stores it."""
    return _JSON.dump_python(s, mode="json", by_alias=True)
