"""Filters read from the question are merged into the request's, never replace them (services/gateway/
scope.py): an ask with funds, documents and dates selected whose question names a fund and a period keeps
all of them, in the strategy's filter and in the SearchRequest the retriever receives (a recording
retriever on loopback, called through the gateway's own client)."""
from __future__ import annotations

import asyncio
import datetime as dt

import grpc
import numpy as np
import pytest

from ragmesh import config, convert
from ragmesh.clients import RetrieverClient
from ragmesh.models import EXTRACTIVE
from ragmesh.types import Chunk, Hit
from ragmesh.v1 import retriever_pb2, retriever_pb2_grpc
from services.gateway.history import Recent
from services.gateway.planner import Plan, Planner
from services.gateway.request import AskRequest
from services.gateway.scope import Scope
from services.gateway.scope_cache import ScopeCache
from services.gateway.strategy import strategy_event, strategy_json

KESTREL, NORTHWIND, SOLSTICE = "Kestrel Emerging Markets", "Northwind Macro", "Solstice Credit"
PICKED = {"selected_funds": [KESTREL, NORTHWIND], "document_ids": ["meeting_notes/n1", "n2"],
          "start_date": "2024-01-01", "end_date": "2024-06-30", "data_sources": ["Meeting Notes"]}


class Recording(retriever_pb2_grpc.RetrieverServicer):
    """Keeps every SearchRequest; finds one note, or nothing when `finds` is False."""

    def __init__(self, finds: bool = True) -> None:
        self.finds = finds
        self.requests: list[retriever_pb2.SearchRequest] = []

    async def Search(self, request: retriever_pb2.SearchRequest, context: grpc.aio.ServicerContext):
        self.requests.append(request)
        note = Hit(Chunk("n1#0", "n1", "meeting_notes", "Kestrel cut Brazil to 4% in March 2024."), 0.9)
        return retriever_pb2.SearchResponse(hits=[convert.hit_to_proto(note)] if self.finds else [])


class SameVector:
    async def embed(self, texts: list[str], kind: str, timeout: float) -> np.ndarray:
        return np.ones((len(texts), 4), dtype=np.float32)


async def _planned(recording: Recording, **sent) -> Plan:
    """The ask `sent` planned against the recording retriever, with the three funds known."""
    server = grpc.aio.server()
    retriever_pb2_grpc.add_RetrieverServicer_to_server(recording, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = RetrieverClient(f"127.0.0.1:{port}", 10)
    settings = config.load().replace(quality_rewrite=False, quality_rerank=False, quality_compress=False,
                                     quality_history=False, scope_llm_check=False, retrieval_timeout_s=5)

    async def known(tenant: str) -> list[str]:
        return [KESTREL, NORTHWIND, SOLSTICE]

    planner = Planner(client, None, SameVector(), ScopeCache(), known, settings, EXTRACTIVE, {},
                      today=lambda: dt.date(2024, 7, 1))
    try:
        return await planner.plan(AskRequest.checked({"tenant": "t", **sent}).to_input(), Recent(0, []))
    finally:
        await client.close()
        await server.stop(None)


def _first_search(recording: Recording) -> retriever_pb2.SearchRequest:
    return recording.requests[0]


def test_a_fund_and_period_the_question_names_narrow_what_the_request_selected() -> None:
    recording = Recording()
    plan = asyncio.run(_planned(recording, question="What did Kestrel do in March 2024?", **PICKED))
    f = strategy_json(strategy_event(plan, [], 0, 0))["filter"]
    assert f["in"] == {"fund_name": [KESTREL]} and (f["start_date"], f["end_date"]) == ("2024-03-01", "2024-03-31")
    sent = _first_search(recording).filter
    assert getattr(sent, "in")["fund_name"].values == [KESTREL]
    assert (sent.start_date, sent.end_date) == ("2024-03-01", "2024-03-31")
    assert sent.HasField("doc_ids") and sorted(sent.doc_ids.values) == ["n1", "n2"]
    assert plan.detected_funds == [KESTREL] and plan.time_hint == "in March 2024"


def test_a_fund_or_period_outside_what_the_request_selected_leaves_it_as_it_was() -> None:
    recording = Recording()
    plan = asyncio.run(_planned(recording, question="What did Solstice do in March 2023?", **PICKED))
    assert plan.filter.any_of == {"fund_name": sorted([KESTREL, NORTHWIND])}
    assert (plan.filter.start_date, plan.filter.end_date) == ("2024-01-01", "2024-06-30")
    sent = _first_search(recording).filter
    assert sorted(getattr(sent, "in")["fund_name"].values) == sorted([KESTREL, NORTHWIND])
    assert (sent.start_date, sent.end_date) == ("2024-01-01", "2024-06-30") and len(sent.doc_ids.values) == 2
    assert "not among those selected" in plan.reason and not plan.detected_funds


def test_relaxing_what_the_question_named_goes_back_to_what_the_request_selected() -> None:
    """Nothing is found: the period read from the question is loosened to the request's dates, never to every
    date; the funds stay narrowed while dates are left (as without selected funds)."""
    recording = Recording(finds=False)
    plan = asyncio.run(_planned(recording, question="What did Kestrel do in March 2024?", **PICKED))
    relaxed = [(r.filter.start_date, r.filter.end_date) for r in recording.requests]
    assert relaxed[-1] == ("2024-01-01", "2024-06-30") and ("", "") not in relaxed
    assert plan.relaxed and "relaxed to the dates set" in plan.relaxed[0]


def test_the_question_narrows_the_scope_and_the_key_follows() -> None:
    asked = Scope(start_date="2024-01-01", end_date="2024-06-30", funds=(KESTREL, NORTHWIND))
    merged = asked.narrowed(start_date="2024-03-01", end_date="2024-12-31", funds=[NORTHWIND, SOLSTICE],
                            window="24h", latest=True)
    assert merged == Scope(start_date="2024-03-01", end_date="2024-06-30", funds=(NORTHWIND,), window="24h",
                           latest=True)
    assert merged.key != asked.key
    assert asked.narrowed(start_date="2023-01-01", end_date="2023-12-31", funds=[SOLSTICE]) == asked
    assert Scope(funds=(KESTREL,)).narrowed(end_date="2024-03-31") == Scope(funds=(KESTREL,), end_date="2024-03-31")
    assert Scope(window="all").narrowed(window="24h") == Scope(window="all"), "the request's window is the window"
