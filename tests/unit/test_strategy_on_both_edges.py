"""The strategy event says the same on both edges, from its one definition (services/gateway/strategy.py):
the SSE JSON, the gRPC message and the JSON schema have the same fields, down to the nested ones, a
stored strategy (its JSON) reads back as the stream sent it, and the event is assembled from the
planner's Plan and the steps after it by one function."""
from __future__ import annotations

import dataclasses

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from pydantic import TypeAdapter

from ragmesh.types import Chunk, Hit, SearchFilter
from ragmesh.v1 import gateway_pb2
from services.gateway.events import Event
from services.gateway.followup import Followup
from services.gateway.planner import Plan
from services.gateway.quality import QualityStep
from services.gateway.reading import Carried
from services.gateway.servicer import event_to_proto, strategy_from_json
from services.gateway.strategy import Strategy, StrategyFilter, strategy_event, strategy_json


def every_field_set() -> Strategy:
    return Strategy(
        route="SPECIFIC", retrieval="RAG_NEW_QUERY", reason="specific question", conversation_id="conv-1",
        collections=["meeting_notes"], cache_key="key", cache_hit=True,
        filter=StrategyFilter("demo", "2024-01-01", "2024-12-31", {"fund_name": ["Kestrel Macro"]}),
        k=5, candidate_count=40, chunks=5, retrieval_ms=12.5, embed_ms=3.25, search_ms=8.5,
        dense_skipped=True, unavailable=["documents"], threshold_layer=2, time_hint="last quarter", time_window="1w",
        detected_funds=["Kestrel Macro"], context_chars=1800, corrections=1, model="extractive", variants=["v"],
        rerank_count=20, quality=[QualityStep("rerank", "done", 4.5, "20 scored")],
        followup=Followup(False, "new_entity", "Northwind is new"), recency="latest",
        default_window={"conversations": 90}, relaxed=["date 2023 read from the question: nothing matched"],
        carried=Carried(("Northwind Global Macro Fund",), "August 2024", "2024-08-01", "2024-08-31", ("Leah Abrams",),
                        "How much did Northwind lose in August 2024?", ("period: August 2024 -> July 2024",)))


def test_the_example_sets_every_field() -> None:
    """So the comparisons below carry a value through each field, including one added later."""
    s = every_field_set()
    assert all(getattr(s, f.name) for f in dataclasses.fields(s)), "give the new field a value that is not empty"


def proto_shape(d: Descriptor) -> dict:
    """Field name -> the shape of a nested message (None for scalars, lists of scalars and maps)."""
    def nested(f: FieldDescriptor) -> dict | None:
        is_map = f.message_type is not None and f.message_type.GetOptions().map_entry
        return proto_shape(f.message_type) if f.message_type is not None and not is_map else None
    return {f.name: nested(f) for f in d.fields}


def json_shape(value: dict) -> dict:
    """Key -> the shape of a nested object; scalars, lists of scalars and maps (to lists or numbers) are leaves."""
    def nested(v: object) -> dict | None:
        if isinstance(v, list):
            v = v[0] if v and isinstance(v[0], dict) else None
        is_map = isinstance(v, dict) and all(isinstance(x, (list, int, float)) and not isinstance(x, bool)
                                             for x in v.values())
        return json_shape(v) if isinstance(v, dict) and not is_map else None
    return {k: nested(v) for k, v in value.items()}


def schema_shape(schema: dict, defs: dict) -> dict:
    def nested(prop: dict) -> dict | None:
        prop = prop.get("items", prop)
        if "$ref" in prop:
            return schema_shape(defs[prop["$ref"].split("/")[-1]], defs)
        return None
    assert set(schema["required"]) == set(schema["properties"]), "every field is in every event"
    return {k: nested(p) for k, p in schema["properties"].items()}


def test_the_json_and_the_grpc_message_have_the_same_fields() -> None:
    sent = json_shape(strategy_json(every_field_set()))
    grpc = proto_shape(gateway_pb2.Strategy.DESCRIPTOR)
    # The filter is the common Filter message, which has more than the strategy shows (equals, doc_ids).
    assert set(sent.pop("filter")) <= set(grpc.pop("filter"))
    assert sent == grpc


def test_the_schema_describes_the_json_the_event_sends() -> None:
    schema = TypeAdapter(Strategy).json_schema(mode="serialization", by_alias=True)
    assert schema_shape(schema, schema["$defs"]) == json_shape(strategy_json(every_field_set()))
    assert schema["properties"]["retrieval_ms"]["type"] == "number"
    assert "in" in schema["$defs"]["StrategyFilter"]["properties"]


def test_the_grpc_message_carries_every_value_of_the_json() -> None:
    s = every_field_set()
    sent = event_to_proto(Event("strategy", s)).strategy
    as_json = json_format.MessageToDict(sent, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)
    expected = strategy_json(s)
    expected["filter"]["in"] = {k: {"values": v} for k, v in expected["filter"]["in"].items()}
    as_json["filter"] = {k: v for k, v in as_json["filter"].items() if k in expected["filter"]}  # Filter has more
    assert as_json == expected


def test_a_stored_strategy_reads_back_as_the_stream_sent_it() -> None:
    s = every_field_set()
    sent = event_to_proto(Event("strategy", s)).strategy
    assert strategy_from_json(strategy_json(s)) == sent
    assert sent.followup.signal == "new_entity" and dict(sent.default_window) == {"conversations": 90}


def test_the_event_is_assembled_from_the_plan_and_the_steps_after_it() -> None:
    hits = [Hit(Chunk(f"c{i}", "d", "meeting_notes", "text"), 0.5) for i in range(3)]
    rewrite = QualityStep("rewrite", "done", 1.0, "factual intent: 2 variants")
    plan = Plan("SPECIFIC", "RAG_NEW_QUERY", "specific question", "conv-1", ["meeting_notes"],
                SearchFilter(tenant="demo", any_of={"fund_name": ["Kestrel Macro"]}),
                Followup(False, "new_term", "new"), "extractive", k=5, retrieval_ms=12.3456,
                quality=[rewrite], hits=hits)
    compress = QualityStep("compress", "skipped", 0.0, "no model configured")
    s = strategy_event(plan, [compress], context_chars=900, corrections=2, notes=["web search unavailable"])
    assert s.chunks == 3 and s.context_chars == 900 and s.corrections == 2
    assert s.quality == [rewrite, compress], "the planner's steps, then the pipeline's, in the order they ran"
    assert s.reason == "specific question; web search unavailable"
    assert s.retrieval_ms == 12.35, "rounded once, so both edges say the same"
    assert s.filter == StrategyFilter("demo", "", "", {"fund_name": ["Kestrel Macro"]})
    assert plan.reason == "specific question" and plan.quality == [rewrite], "the plan is read, never written"
