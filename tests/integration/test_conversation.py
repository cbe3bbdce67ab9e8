"""Multi-turn routing, stop, restart and the gRPC face of the gateway and retriever. Calls carry the
stack's admin key; a conversation starts without an id and the gateway's strategy event names it."""
from __future__ import annotations

import asyncio

import json
import threading
import time

import grpc
import httpx
import pytest

from ragmesh.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, retriever_pb2, retriever_pb2_grpc
from services.gateway.history import STOPPED_MARK
from tests.auth import bearer, channel
from tests.conftest import answer_of, one, sse, wait_for
from tests.stack import DEMO, Stack


def ask(stack: Stack, question: str, conversation_id: str = "", **extra) -> list[dict]:
    """One turn; without a conversation id, the first turn of a new conversation."""
    body = {"question": question, **extra} | ({"conversation_id": conversation_id} if conversation_id else {})
    return sse(stack.http_url + "/api/chat/ask/stream", body, stack.headers)


def conversation_of(events: list[dict]) -> str:
    return one(events, "strategy")["conversation_id"]


def searches(stack: Stack) -> int:
    return stack.app("retriever").engine.searches


def test_follow_ups_reuse_or_skip_retrieval_and_filter_changes_search_again(stack: Stack) -> None:
    first = one(ask(stack, "What did Kestrel do with its Brazil exposure?"), "strategy")
    assert first["retrieval"] == "RAG_NEW_QUERY"
    conv = first["conversation_id"]

    before = searches(stack)
    second = one(ask(stack, "Why did Kestrel cut the Brazil exposure?", conv), "strategy")
    assert second["retrieval"] == "RAG_REUSE" and second["cache_hit"], second
    assert searches(stack) == before, "a reused scope must not search again"

    events = ask(stack, "summarize that", conv)
    third = one(events, "strategy")
    assert third["route"] == "NO_RAG" and third["retrieval"] == "NO_RAG" and third["followup"]["signal"] == "rework"
    assert searches(stack) == before, "NO_RAG must not call the retriever"
    assert "12% to 4%" in answer_of(events)

    fourth = one(ask(stack, "What did Kestrel do with its Brazil exposure?", conv,
                     selected_funds=["Northwind Global Macro Fund"]), "strategy")
    assert fourth["retrieval"] == "RAG_NEW_QUERY" and "filters changed" in fourth["reason"]
    assert searches(stack) > before

    fifth = one(ask(stack, "What were the top holdings in the healthcare portfolio?", conv,
                    selected_funds=["Northwind Global Macro Fund"]), "strategy")
    assert fifth["retrieval"] == "RAG_NEW_QUERY" and "healthcare" in fifth["reason"], "words the hits lack"

    history = httpx.get(f"{stack.http_url}/api/conversations/{conv}", headers=stack.headers).json()["messages"]
    assert [m["role"] for m in history] == ["user", "assistant"] * 5
    assert history[5]["meta"]["route"] == "NO_RAG"


def _last_answer(stack: Stack, conv: str) -> str:
    reply = httpx.get(f"{stack.http_url}/api/conversations/{conv}", headers=stack.headers)
    return reply.json()["messages"][-1]["content"]


def test_closing_the_sse_connection_cancels_generation_upstream(stack: Stack, slow_generation) -> None:
    generator = stack.app("generator").service
    cancelled = generator.cancelled
    conv = ""
    with httpx.stream("POST", stack.http_url + "/api/chat/ask/stream", timeout=30, headers=stack.headers,
                      json={"question": "How did Harborview change its net exposure?"}) as resp:
        for line in resp.iter_lines():
            if '"strategy"' in line:
                conv = json.loads(line[len("data: "):])["strategy"]["conversation_id"]
            if '"content"' in line:
                break  # leave mid-answer: the context manager closes the connection
    assert conv, "the strategy event names the new conversation"
    assert wait_for(lambda: generator.cancelled == cancelled + 1), "generator never saw the cancellation"
    assert wait_for(lambda: _last_answer(stack, conv).endswith(STOPPED_MARK))
    assert len(_last_answer(stack, conv)) > len(STOPPED_MARK), "the partial answer is kept"


def test_stop_endpoint_stops_the_answer_and_keeps_the_partial(stack: Stack, slow_generation) -> None:
    generator = stack.app("generator").service
    cancelled = generator.cancelled
    events: list[dict] = []

    def read() -> None:  # the events as they arrive, so the conversation id is known mid-answer
        with httpx.stream("POST", stack.http_url + "/api/chat/ask/stream", timeout=30, headers=stack.headers,
                          json={"question": "How did Harborview change its net exposure?"}) as resp:
            assert resp.status_code == 200
            for line in resp.iter_lines():
                if line:
                    events.append(json.loads(line[len("data: "):]))

    reader = threading.Thread(target=read)
    reader.start()
    assert wait_for(lambda: any("strategy" in e for e in events))
    conv = conversation_of(events)
    assert wait_for(lambda: stack.call(stack.app("gateway").pipeline.stop(conv))
                     if len(_last_answer_or_empty(stack, conv)) else False)
    reader.join(30)
    done = events[-1]
    assert done["done"] and done["stopped"] is True
    assert wait_for(lambda: generator.cancelled == cancelled + 1)
    assert _last_answer(stack, conv).endswith(STOPPED_MARK)
    assert httpx.post(stack.http_url + "/api/chat/stop", json={"conversation_id": conv},
                      headers=stack.headers).json() == {"stopped": False}


def test_a_stop_before_any_content_replies_once_the_question_is_gone(stack: Stack, monkeypatch) -> None:
    """000's stop flow: stopped before any content, the question (and the conversation it opened) is
    dropped. The stop's reply comes after that, so a client that reloads its conversation list at once
    (the web page does) never sees it. The generator is held silent at the gateway's client."""
    pipeline = stack.app("gateway").pipeline
    generating = threading.Event()

    async def silent(**kwargs):
        generating.set()
        await asyncio.Event().wait()  # says nothing until the answer is stopped (cancelled)
        yield  # an async generator, as the client's

    monkeypatch.setattr(pipeline.generator, "generate", silent)
    real_drop = pipeline.history.drop_question

    def slow_drop(*args):  # a store slower than the client's next request
        time.sleep(0.5)
        return real_drop(*args)

    monkeypatch.setattr(pipeline.history, "drop_question", slow_drop)
    events: list[dict] = []

    def read() -> None:
        with httpx.stream("POST", stack.http_url + "/api/chat/ask/stream", timeout=30, headers=stack.headers,
                          json={"question": "How did Harborview change its net exposure?"}) as resp:
            for line in resp.iter_lines():
                if line:
                    events.append(json.loads(line[len("data: "):]))

    reader = threading.Thread(target=read)
    reader.start()
    assert generating.wait(30) and wait_for(lambda: any("strategy" in e for e in events))
    conv = conversation_of(events)
    reply = httpx.post(stack.http_url + "/api/chat/stop", json={"conversation_id": conv}, headers=stack.headers)
    assert reply.json() == {"stopped": True}
    assert httpx.get(f"{stack.http_url}/api/conversations/{conv}", headers=stack.headers).status_code == 404
    reader.join(30)
    assert events[-1]["done"] and events[-1]["stopped"] is True and not any("content" in e for e in events)


def _last_answer_or_empty(stack: Stack, conv: str) -> str:
    """Non-empty once the question is saved, i.e. generation has started."""
    reply = httpx.get(f"{stack.http_url}/api/conversations/{conv}", headers=stack.headers)
    return reply.json()["messages"][-1]["content"] if reply.status_code == 200 else ""


def _search(stub: retriever_pb2_grpc.RetrieverStub) -> list[tuple[str, float, int, int]]:
    reply = stub.Search(retriever_pb2.SearchRequest(query="gold position size", top_k=10), timeout=10)
    return [(h.chunk.chunk_id, round(h.score, 6), h.dense_rank, h.sparse_rank) for h in reply.hits]


def test_restarting_the_retriever_gives_the_same_hits(stack: Stack) -> None:
    with channel(stack.address("retriever"), stack.metadata) as ch:
        before = _search(retriever_pb2_grpc.RetrieverStub(ch))
    assert len(before) == 10
    stack.restart_service("retriever")
    with channel(stack.address("retriever"), stack.metadata) as ch:
        assert _search(retriever_pb2_grpc.RetrieverStub(ch)) == before


def test_grpc_ask_streams_the_same_events(stack: Stack) -> None:
    with channel(stack.address("gateway"), stack.metadata) as ch:
        stub = gateway_pb2_grpc.GatewayStub(ch)
        events = list(stub.Ask(gateway_pb2.AskRequest(question="What premium was paid for Brightwater Bio?"), timeout=60))
        kinds = [e.WhichOneof("event") for e in events]
        assert kinds[:4] == ["searching", "searching", "strategy", "generating"]
        assert kinds[-2:] == ["citations", "done"]
        assert events[1].searching is False
        assert "88%" in "".join(e.content for e in events)
        conv = events[-1].done.conversation_id
        stored = stub.GetConversation(gateway_pb2.GetConversationRequest(conversation_id=conv), timeout=5)
        assert [m.role for m in stored.messages] == ["user", "assistant"]

        with pytest.raises(grpc.RpcError) as err:
            list(stub.Ask(gateway_pb2.AskRequest(question=""), timeout=10))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("question")


@pytest.mark.parametrize("request_kwargs, field", [
    ({"query": "x", "top_k": 0}, "top_k"),
    ({"query": "x", "top_k": 201}, "top_k"),
    ({"query": ""}, "query"),
    ({"query": "x", "filter": common_pb2.Filter(start_date="2024-1-1")}, "filter.start_date"),
    ({"query": "x", "filter": common_pb2.Filter(start_date="2024-02-01", end_date="2024-01-01")}, "filter.end_date"),
])
def test_retriever_rejects_bad_searches(stack: Stack, request_kwargs: dict, field: str) -> None:
    with channel(stack.address("retriever"), stack.metadata) as ch:
        with pytest.raises(grpc.RpcError) as err:
            retriever_pb2_grpc.RetrieverStub(ch).Search(retriever_pb2.SearchRequest(**request_kwargs), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith(field)


def test_grpc_correct_records_a_correction(stack: Stack) -> None:
    with channel(stack.address("gateway"), bearer(stack.key(DEMO, "grpc-user"))) as ch:
        stub = gateway_pb2_grpc.GatewayStub(ch)
        reply = stub.Correct(gateway_pb2.CorrectionRequest(
            user_id="grpc-user", question="Who runs Meridian?", correction="Dr. Hannah Okafor runs Meridian."), timeout=5)
        assert reply.correction_id
        with pytest.raises(grpc.RpcError) as err:
            stub.Correct(gateway_pb2.CorrectionRequest(correction=""), timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert stack.app("gateway").store.corrections(DEMO, "grpc-user")[0].correction.startswith("Dr. Hannah Okafor")
