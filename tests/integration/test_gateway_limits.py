"""The gateway under bad input, overload and failing hops: every bad input is a 4xx naming
the field, overload is refused fast with 429 and Retry-After, and what could not be searched or
generated is never stored as an answer that looks right."""
from __future__ import annotations

import json
import threading
import time

import grpc
import httpx
import pytest

from ragmesh.store.sqlite import SqliteStore
from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc
from services.gateway.history import STOPPED_MARK
from services.gateway.pipeline import NO_MATCH
from tests.auth import channel
from tests.conftest import sse
from tests.stack import Stack

QUESTION = "When did Meridian close to new investors?"


def _post(stack: Stack, path: str, body: object, url: str | None = None) -> httpx.Response:
    """JSON as a browser's JSON.stringify sends it: a lone surrogate travels as a \\ud800 escape."""
    return httpx.post((url or stack.http_url) + path, content=json.dumps(body), timeout=60,
                      headers={**stack.headers, "content-type": "application/json"})


def _error(reply: httpx.Response, status: int, field: str) -> str:
    assert reply.status_code == status, (reply.status_code, reply.text[:300])
    message = reply.json()["error"]["message"]
    assert message.startswith(field) or f"{field}:" in message or field in message, message
    return message


def _answers(stack: Stack) -> list[str]:
    store = SqliteStore(stack.settings.sqlite_path)
    try:
        rows = store._db.execute("SELECT content FROM messages WHERE role = 'assistant'").fetchall()
    finally:
        store.close()
    return [r[0] for r in rows]


# -- bad input ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("body,field", [
    ({"question": "\ud800 what?"}, "question"),
    ({"question": "x" * 2001}, "question"),
    ({"question": "hi", "selected_funds": ["\udfff"]}, "selected_funds[0]"),
    ({"question": "hi", "selected_funds": [f"fund {i}" for i in range(51)]}, "selected_funds"),
    ({"question": "hi", "document_ids": [f"d{i}" for i in range(21)]}, "document_ids"),
    ({"question": "hi", "conversation_id": "c" * 129}, "conversation_id"),
    ({"question": "hi", "model": "m" * 129}, "model"),
    ({"question": "hi", "tenant": "t" * 10_000}, "tenant"),
    ({"question": "hi", "start_date": "2024-01-01" * 100}, "start_date"),
])
def test_bad_fields_are_400_naming_the_field_and_nothing_is_stored(stack: Stack, body: dict, field: str) -> None:
    before = len(_answers(stack))
    for path in ("/api/chat/ask", "/api/chat/ask/stream"):
        _error(_post(stack, path, body), 400, field)
    assert len(_answers(stack)) == before


def test_repeated_list_values_are_deduplicated_not_multiplied(stack: Stack) -> None:
    reply = _post(stack, "/api/chat/ask", {"question": QUESTION, "data_sources": ["Meeting Notes"] * 20_000})
    assert reply.status_code == 200, reply.text[:300]
    assert reply.json()["meta"]["strategy"]["collections"] == ["meeting_notes"]


def test_a_body_over_the_limit_is_refused_before_it_is_parsed(stack: Stack) -> None:
    big = json.dumps({"question": "x" * (2 * 1024 * 1024)})
    reply = httpx.post(stack.http_url + "/api/chat/ask", content=big, timeout=60,
                       headers={**stack.headers, "content-type": "application/json"})
    _error(reply, 413, "body")

    def chunks():  # no Content-Length: counted as it arrives
        yield b'{"question": "'
        for _ in range(64):
            yield b"y" * 65536
        yield b'"}'

    reply = httpx.post(stack.http_url + "/api/chat/ask", content=chunks(), timeout=60,
                       headers={**stack.headers, "content-type": "application/json"})
    _error(reply, 413, "body")
    _error(_post(stack, "/api/corrections", {"correction": "c" * (5 * 1024 * 1024)}), 413, "body")


@pytest.mark.parametrize("path", ["/api/chat/ask", "/api/documents", "/api/corrections"])
def test_deep_nesting_is_400(stack: Stack, path: str) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    reply = httpx.post(stack.http_url + path, content=deep, timeout=60,
                       headers={**stack.headers, "content-type": "application/json"})
    assert reply.status_code == 400, reply.text[:300]
    assert reply.json()["error"]["code"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize("body,field", [
    ({"correction": "c" * 4001, "question": "q"}, "correction"),
    ({"correction": "right \ud800", "question": "q"}, "correction"),
    ({"correction": "right", "question": "q" * 2001}, "question"),
    ({"correction": "right", "question": "q", "message_id": "m" * 129, "conversation_id": "c"}, "message_id"),
])
def test_bad_corrections_are_400(stack: Stack, body: dict, field: str) -> None:
    _error(_post(stack, "/api/corrections", body), 400, field)


def test_a_summary_of_a_missing_document_is_404_not_500(stack: Stack) -> None:
    reply = _post(stack, "/api/chat/ask", {"question": "Summarize this document",
                                           "document_ids": ["documents/no-such-document"]})
    _error(reply, 404, "document_ids")


def test_a_server_fault_is_internal_with_a_request_id_and_no_internals(stack: Stack, monkeypatch) -> None:
    pipeline = stack.app("gateway").pipeline

    async def broken(*args, **kwargs):
        raise ZeroDivisionError("secret internal detail")

    monkeypatch.setattr(pipeline.planner, "plan", broken)
    events = sse(stack.http_url + "/api/chat/ask/stream", {"question": QUESTION}, stack.headers)
    error = events[-1]["error"]
    assert error["code"] == "INTERNAL" and "request id" in error["message"]
    assert "secret" not in json.dumps(events) and "ZeroDivision" not in json.dumps(events)
    reply = httpx.post(stack.http_url + "/api/chat/ask", json={"question": QUESTION},
                       headers={**stack.headers, "x-request-id": "trace-me-42"}, timeout=60)
    assert reply.status_code == 500 and reply.json()["error"]["message"] == "internal error (request id trace-me-42)"
    assert reply.headers["x-request-id"] == "trace-me-42"
    grpc_events = list(gateway_pb2_grpc.GatewayStub(channel(stack.address("gateway"), stack.metadata)).Ask(
        gateway_pb2.AskRequest(question=QUESTION)))
    assert grpc_events[-1].error.code == "INTERNAL" and "secret" not in grpc_events[-1].error.message


def test_a_server_fault_before_the_stream_is_500_with_a_request_id(stack: Stack, monkeypatch) -> None:
    """A fault while the question is prepared (its conversation read before any event is sent)."""
    conversation = httpx.post(stack.http_url + "/api/chat/ask", json={"question": "Hello"}, headers=stack.headers,
                              timeout=60).json()["conversation_id"]

    def broken(*args, **kwargs):
        raise ZeroDivisionError("secret internal detail")

    monkeypatch.setattr(stack.app("gateway").pipeline.history, "own_recent", broken)
    for path in ("/api/chat/ask", "/api/chat/ask/stream"):
        reply = httpx.post(stack.http_url + path, json={"question": QUESTION, "conversation_id": conversation},
                           headers={**stack.headers, "x-request-id": "trace-me-43"}, timeout=60)
        assert reply.status_code == 500, reply.text
        assert reply.json()["error"]["message"] == "internal error (request id trace-me-43)"


# -- overload -----------------------------------------------------------------------------------------

def test_over_the_concurrency_limit_asks_get_429_with_retry_after_and_nothing_wrong_is_saved(stack: Stack) -> None:
    slow = stack.start_variant("generator", extractive_delay_ms=150.0)
    gateway = stack.start_variant("gateway", generator_addr=slow.address, max_concurrent_calls=2,
                                  tenant_call_share=1, user_call_share=1)  # the whole service's limit, one user
    url = f"http://127.0.0.1:{gateway.app.http_port}"
    before = _answers(stack)
    results: list[httpx.Response] = []

    def ask() -> None:
        results.append(httpx.post(url + "/api/chat/ask", json={"question": QUESTION}, headers=stack.headers,
                                  timeout=120))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.status_code for r in results)
    assert codes.count(200) >= 2 and codes.count(429) >= 1 and set(codes) <= {200, 429}, codes
    refused = next(r for r in results if r.status_code == 429)
    assert int(refused.headers["retry-after"]) >= 1 and refused.json()["error"]["code"] == "RESOURCE_EXHAUSTED"
    new = _answers(stack)[len(before):]
    assert len(new) == codes.count(200) and not [a for a in new if NO_MATCH in a], new
    admission = gateway.app.admission  # the gRPC port shares the limit: fill it, deterministically
    deadline = time.monotonic() + 10  # once the answered requests have let go of their slots
    while admission.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    held = admission.in_flight
    admission.in_flight = admission.limit
    try:
        with pytest.raises(grpc.RpcError) as info:
            list(gateway_pb2_grpc.GatewayStub(channel(gateway.address, stack.metadata)).Ask(
                gateway_pb2.AskRequest(question=QUESTION)))
    finally:
        admission.in_flight = held
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert ("retry-after", "1") in tuple(info.value.trailing_metadata())


def test_a_user_over_the_rate_limit_gets_429_and_others_do_not(stack: Stack) -> None:
    gateway = stack.start_variant("gateway", rate_limit_per_minute=3)
    url = f"http://127.0.0.1:{gateway.app.http_port}"
    codes = [httpx.post(url + "/api/chat/ask", json={"question": "hello"}, headers=stack.headers,
                        timeout=60).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429], codes
    other = stack.key("demo", "rate-other")
    assert httpx.post(url + "/api/chat/ask", json={"question": "hello"}, headers={"authorization": f"Bearer {other}"},
                      timeout=60).status_code == 200


def test_when_no_search_answers_in_time_the_ask_fails_and_nothing_is_stored(stack: Stack) -> None:
    gateway = stack.start_variant("gateway", retriever_addr="127.0.0.1:9", retrieval_timeout_s=0.5)
    url = f"http://127.0.0.1:{gateway.app.http_port}"
    before = _answers(stack)
    events = sse(url + "/api/chat/ask/stream", {"question": QUESTION}, stack.headers)
    assert events[-1]["error"]["code"] == "UNAVAILABLE" and "no answer in time" in events[-1]["error"]["message"]
    assert not [e for e in events if "content" in e]
    reply = httpx.post(url + "/api/chat/ask", json={"question": QUESTION}, headers=stack.headers, timeout=60)
    assert reply.status_code == 503
    assert _answers(stack) == before


# -- failing hops ---------------------------------------------------------------------------------------

def test_a_generator_that_dies_mid_answer_is_stored_as_failed_with_the_partial_text(stack: Stack) -> None:
    doomed = stack.start_variant("generator", extractive_delay_ms=200.0)
    gateway = stack.start_variant("gateway", generator_addr=doomed.address)
    url = f"http://127.0.0.1:{gateway.app.http_port}"
    events: list[dict] = []
    with httpx.stream("POST", url + "/api/chat/ask/stream", json={"question": QUESTION}, headers=stack.headers,
                      timeout=60) as resp:
        for line in resp.iter_lines():
            if not line:
                continue
            events.append(json.loads(line[len("data: "):]))
            if sum("content" in e for e in events) == 2:
                stack.call(doomed.server.stop(0))  # no grace: the generator dies mid-answer
    assert events[-1].get("error", {}).get("code") == "UNAVAILABLE", events[-3:]
    conversation = next(e["strategy"]["conversation_id"] for e in events if "strategy" in e)
    stored = httpx.get(f"{url}/api/conversations/{conversation}", headers=stack.headers).json()["messages"][-1]
    partial = "".join(e["content"] for e in events if "content" in e)
    assert stored["content"].startswith(partial) and stored["content"].endswith("*[Response failed: UNAVAILABLE]*")
    assert STOPPED_MARK not in stored["content"] and stored["meta"]["failed"] == "UNAVAILABLE"


def test_right_after_a_retriever_restart_the_next_ask_succeeds(stack: Stack) -> None:
    stack.restart_service("retriever")
    reply = _post(stack, "/api/chat/ask", {"question": QUESTION})
    assert reply.status_code == 200, reply.text[:300]
    assert not reply.json()["meta"]["strategy"]["unavailable"]
    assert "March 2025" in reply.json()["answer"] or "1 March" in reply.json()["answer"]


def test_past_the_planning_limit_a_question_is_refused_at_once_and_nothing_is_saved(stack: Stack) -> None:
    """MAX_CONCURRENT_RETRIEVALS: a question that would wait behind the others until its searches time
    out is refused up front, over JSON (429 + Retry-After), SSE and gRPC, and answered once a slot frees."""
    gateway = stack.start_variant("gateway", max_concurrent_retrievals=1)
    url = f"http://127.0.0.1:{gateway.app.http_port}"
    planning = gateway.app.pipeline.planning
    before = _answers(stack)
    planning.in_flight = planning.limit  # another question is being planned
    try:
        reply = httpx.post(url + "/api/chat/ask", json={"question": QUESTION}, headers=stack.headers, timeout=60)
        assert reply.status_code == 429 and reply.headers["retry-after"] == "1", reply.text
        assert reply.json()["error"]["code"] == "RESOURCE_EXHAUSTED"
        events = sse(url + "/api/chat/ask/stream", {"question": QUESTION}, stack.headers)
        assert events[-1]["error"]["code"] == "RESOURCE_EXHAUSTED" and not any("content" in e for e in events)
        streamed = list(gateway_pb2_grpc.GatewayStub(channel(gateway.address, stack.metadata)).Ask(
            gateway_pb2.AskRequest(question=QUESTION)))
        assert streamed[-1].error.code == "RESOURCE_EXHAUSTED", streamed[-1]
        assert not any(e.WhichOneof("event") == "content" for e in streamed)
    finally:
        planning.in_flight = 0
    assert _answers(stack) == before  # nothing stored for the refused questions
    assert httpx.post(url + "/api/chat/ask", json={"question": QUESTION}, headers=stack.headers,
                      timeout=60).status_code == 200


def test_a_question_refused_for_load_is_told_at_once_without_reading_its_conversation(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every planning slot taken as the question comes (most refusals under load): the refusal is decided
    before the conversation is read or the answer registered as running, and its two events (those of a
    question refused its slot later) are sent whole, with their length, not as a stream held open."""
    first = _post(stack, "/api/chat/ask", {"question": QUESTION})
    assert first.status_code == 200, first.text[:300]
    pipeline = stack.app("gateway").pipeline
    work: list[str] = []
    read, begin = pipeline.history.own_recent, pipeline.shared.runs.begin

    def reading(*args: object) -> object:
        work.append("conversation read")
        return read(*args)

    async def beginning(conversation_id: str) -> object:
        work.append("answer registered")
        return await begin(conversation_id)

    monkeypatch.setattr(pipeline.history, "own_recent", reading)
    monkeypatch.setattr(pipeline.shared.runs, "begin", beginning)
    monkeypatch.setattr(pipeline.planning, "limit", 1)
    monkeypatch.setattr(pipeline.planning, "in_flight", 1)  # another question is being planned
    refused = pipeline.planning.refused
    body = {"question": QUESTION, "conversation_id": first.json()["conversation_id"]}
    with httpx.stream("POST", stack.http_url + "/api/chat/ask/stream", json=body, headers=stack.headers,
                      timeout=60) as reply:
        raw = reply.read().decode()
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
    assert int(reply.headers["content-length"]) == len(raw.encode()) and "transfer-encoding" not in reply.headers
    events = [json.loads(line[len("data: "):]) for line in raw.splitlines() if line]
    assert events[0] == {"searching": True} and events[1]["error"]["code"] == "RESOURCE_EXHAUSTED", events
    assert len(events) == 2 and "retry in 1 s" in events[1]["error"]["message"]
    streamed = list(gateway_pb2_grpc.GatewayStub(channel(stack.address("gateway"), stack.metadata)).Ask(
        gateway_pb2.AskRequest(**body)))
    assert [e.WhichOneof("event") for e in streamed] == ["searching", "error"], streamed
    assert streamed[-1].error.code == "RESOURCE_EXHAUSTED"
    assert work == [] and pipeline.planning.refused == refused + 2  # each refusal counted once
