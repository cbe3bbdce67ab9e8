"""The strategy event says the same on both edges: every field the SSE bridge sends is a field of the
gRPC Strategy, and a strategy read back from a stored answer (its JSON) equals the one the stream sent."""
from __future__ import annotations

from ragmesh.types import SearchFilter
from ragmesh.v1 import gateway_pb2
from services.gateway.events import strategy_json
from services.gateway.followup import Followup
from services.gateway.pipeline import Event
from services.gateway.quality.stack import QualityStep
from services.gateway.servicer import event_to_proto, strategy_from_json
from services.gateway.strategy import Strategy


def every_field_set() -> Strategy:
    return Strategy(
        "SPECIFIC", "RAG_NEW_QUERY", "specific question", "conv-1", ["meeting_notes"],
        SearchFilter(tenant="demo", start_date="2024-01-01", end_date="2024-12-31",
                     any_of={"fund_name": ["Kestrel Macro"]}),
        "key", cache_hit=True, k=5, candidate_count=40, chunks=5, retrieval_ms=12.5, embed_ms=3.25, search_ms=8.5,
        dense_skipped=True, unavailable=["documents"], threshold_layer=2, time_hint="last quarter", time_window="1w",
        detected_funds=["Kestrel Macro"], context_chars=1800, corrections=1, model="extractive", variants=["v"],
        rerank_count=20, quality=[QualityStep("rerank", "done", 4.5, "20 scored")],
        followup=Followup(False, "new_entity", "Northwind is new"), recency="latest",
        default_window={"conversations": 90}, relaxed=["date 2023 read from the question: nothing matched"])


def test_every_strategy_field_of_the_stream_is_a_grpc_field() -> None:
    assert set(strategy_json(every_field_set())) == set(gateway_pb2.Strategy.DESCRIPTOR.fields_by_name)


def test_a_stored_strategy_reads_back_as_the_stream_sent_it() -> None:
    s = every_field_set()
    sent = event_to_proto(Event("strategy", s)).strategy
    assert strategy_from_json(strategy_json(s)) == sent
    assert sent.followup.signal == "new_entity" and dict(sent.default_window) == {"conversations": 90}
