"""One question is one trace across the four services: a stack of its own, started with an
OpenTelemetry provider that keeps spans in memory, answers one question over SSE; every span of
that request is in the trace the HTTP bridge opened, the internal services' server spans are
children of the gateway's client spans (the context crossed each gRPC hop), each says which
service made it (the four share one process and one provider here) and carries the request id."""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from demo.loader import meeting_documents
from ragmesh import convert, tracing
from ragmesh.clients import ClientAuth, RetrieverClient
from ragmesh.logging import JsonFormatter
from ragmesh.request_context import request_id_var
from tests.conftest import answer_of, sse
from tests.stack import Stack

REQUEST_ID = "trace-one-question"
QUESTION = "Who is the new head of research at Meridian?"
SERVICES = {"gateway", "embedder", "retriever", "generator"}
STEPS = {"routing", "embedding", "search", "context", "generation", "storing"}


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)  # before the stack starts: its channels get the client interceptors
    stack = None
    try:
        stack = Stack(tmp_path_factory.mktemp("traced")).start()
        stack.call(_load(stack))
        yield stack, exporter
    finally:
        if stack is not None:
            stack.stop()
        tracing.uninstall()


async def _load(stack: Stack) -> None:
    docs = [d for d in meeting_documents() if "meridian" in d.doc_id]

    async def stream():
        for doc in docs:
            yield convert.document_to_proto(doc)

    client = RetrieverClient(stack.address("retriever"), 30, 600, ClientAuth.key(stack.settings, stack.admin_key))
    try:
        async for _ in client.ingest(stream()):
            pass
    finally:
        await client.close()


def _spans_of(exporter: InMemorySpanExporter, request_id: str, root: str) -> list[ReadableSpan]:
    """The request's spans once its root (the HTTP request's span, ended last) has been exported."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        spans = [s for s in exporter.get_finished_spans() if s.attributes.get(tracing.REQUEST_ID) == request_id]
        if any(s.name == root for s in spans):
            return spans
        time.sleep(0.05)
    pytest.fail(f"no span {root!r} for request {request_id}: {[s.name for s in exporter.get_finished_spans()]}")


def test_one_question_is_one_trace_across_the_four_services(traced: tuple[Stack, InMemorySpanExporter]) -> None:
    stack, exporter = traced
    events = sse(stack.http_url + "/api/chat/ask/stream", {"question": QUESTION},
                 {**stack.headers, "x-request-id": REQUEST_ID})
    assert "done" in events[-1] and "Leah Abrams" in answer_of(events), events
    stack.call(stack.app("gateway").memory.idle())  # the turn's memory is written after the answer, in the trace
    spans = _spans_of(exporter, REQUEST_ID, "POST /api/chat/ask/stream")
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "POST /api/chat/ask/stream" and root.kind == SpanKind.SERVER
    assert root.attributes["http.response.status_code"] == 200
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}, "one trace for the question"
    by_id = {s.context.span_id: s for s in spans}
    loose = [(s.name, s.attributes.get(tracing.SERVICE)) for s in spans if s.parent and s.parent.span_id not in by_id]
    assert not loose, f"spans whose parent is not in the trace: {loose}"

    made_by = {s.attributes.get(tracing.SERVICE) for s in spans}
    assert made_by == SERVICES, made_by
    assert STEPS <= {s.name for s in spans}, sorted({s.name for s in spans})
    steps = [s for s in spans if s.name in STEPS]
    assert {s.attributes[tracing.SERVICE] for s in steps} == {"gateway"}
    routing = next(s for s in steps if s.name == "routing")
    assert routing.attributes["route"] == "SPECIFIC"
    assert {s.attributes["collection"] for s in steps if s.name == "search"} == {"meeting_notes", "factsheets"}
    assert {s.attributes["record"] for s in steps if s.name == "storing"} == {"question", "answer"}

    # Each hop: the caller's CLIENT span is the parent of the called service's SERVER span. (The
    # retriever's calls to the embedder write the turn into the conversation memory, after the answer.)
    for service, method in (("embedder", "ragmesh.v1.Embedder/Embed"), ("retriever", "ragmesh.v1.Retriever/Search"),
                            ("generator", "ragmesh.v1.Generator/Generate")):
        callers = set()
        for server in [s for s in spans if s.name == method and s.kind == SpanKind.SERVER]:
            assert server.attributes[tracing.SERVICE] == service
            assert server.attributes["rpc.grpc.status_code"] == 0
            client = by_id[server.parent.span_id]
            assert client.kind == SpanKind.CLIENT and client.name == f"/{method}"
            callers.add(client.attributes[tracing.SERVICE])
        assert "gateway" in callers and service not in callers, (method, callers)
    generate = next(s for s in spans if s.name == "ragmesh.v1.Generator/Generate" and s.kind == SpanKind.SERVER)
    generation = next(s for s in steps if s.name == "generation")
    assert by_id[generate.parent.span_id].parent.span_id == generation.context.span_id, \
        "the generator's call happens inside the gateway's generation step"


def test_a_failed_call_is_an_error_span_with_its_status_code(traced: tuple[Stack, InMemorySpanExporter]) -> None:
    stack, exporter = traced
    refused = stack.call(_search_with_no_query(stack))
    assert refused == "INVALID_ARGUMENT"
    spans = [s for s in exporter.get_finished_spans() if s.attributes.get(tracing.REQUEST_ID) == "trace-bad-search"]
    (server,) = [s for s in spans if s.kind == SpanKind.SERVER]
    assert server.attributes["rpc.grpc.status_code"] == 3 and not server.status.is_ok


async def _search_with_no_query(stack: Stack) -> str:
    from ragmesh.errors import InvalidArgument
    from ragmesh.types import SearchFilter

    client = RetrieverClient(stack.address("retriever"), 30, 600, ClientAuth.key(stack.settings, stack.admin_key))
    token = request_id_var.set("trace-bad-search")
    try:
        await client.search("", ["meeting_notes"], SearchFilter())
    except InvalidArgument:
        return "INVALID_ARGUMENT"
    finally:
        request_id_var.reset(token)
        await client.close()
    return "OK"


def test_log_lines_carry_the_trace_id_of_their_span(traced: tuple[Stack, InMemorySpanExporter]) -> None:
    record = logging.makeLogRecord({"msg": "inside", "levelname": "INFO", "name": "t"})
    with tracing.span("logging") as current:
        line = json.loads(JsonFormatter("test").format(record))
    assert line["trace_id"] == format(current.get_span_context().trace_id, "032x")
    assert "trace_id" not in json.loads(JsonFormatter("test").format(record)), "outside a span: no trace id"
