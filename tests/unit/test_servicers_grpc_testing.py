"""Each service's servicer in process with `grpc_testing` (tests/grpc_inprocess.py says how asyncio
servicers are driven that way), beside the loopback tests: the same servicer objects the apps
register, built from the stack's running parts, behind the real interceptor; status codes for bad
input and missing credentials, the invocation metadata deciding the tenant, and every kind of
streaming (server, client, both ways), with a stream cancelled by the client."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import pytest

from ragmesh.v1 import (
    common_pb2, embedder_pb2, embedder_pb2_grpc, gateway_pb2, gateway_pb2_grpc, generator_pb2, generator_pb2_grpc,
    retriever_pb2, retriever_pb2_grpc,
)
from services.embedder.limits import MAX_TEXTS
from services.embedder.servicer import EmbedderServicer
from services.gateway.servicer import GatewayServicer
from services.generator.servicer import GeneratorServicer
from services.retriever.ingest.upsert import Upserter
from services.retriever.servicer import RetrieverServicer
from tests.auth import bearer
from tests.grpc_inprocess import in_process
from tests.stack import Stack

OK, INVALID, UNAUTHENTICATED = grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED


def method(module, service: str, name: str):
    return module.DESCRIPTOR.services_by_name[service].methods_by_name[name]


def servicer_parts(stack: Stack, name: str) -> tuple:
    """(descriptor, add_to_server, servicer) as the app registers them, from its running parts."""
    app = stack.app(name)
    if name == "embedder":
        return (embedder_pb2.DESCRIPTOR.services_by_name["Embedder"], embedder_pb2_grpc.add_EmbedderServicer_to_server,
                EmbedderServicer(app.backend, app.batcher, app.limits))
    if name == "retriever":
        return (retriever_pb2.DESCRIPTOR.services_by_name["Retriever"],
                retriever_pb2_grpc.add_RetrieverServicer_to_server,
                RetrieverServicer(app.engine, app.ingestor, Upserter(app.committer), app.store, app.configure))
    if name == "generator":
        return (generator_pb2.DESCRIPTOR.services_by_name["Generator"],
                generator_pb2_grpc.add_GeneratorServicer_to_server, GeneratorServicer(app.service))
    return (gateway_pb2.DESCRIPTOR.services_by_name["Gateway"], gateway_pb2_grpc.add_GatewayServicer_to_server,
            app.servicer())


@pytest.fixture(scope="module")
def servers(stack: Stack) -> Iterator[dict]:
    yield {name: in_process(stack.hosts[name], stack.loop, *servicer_parts(stack, name))
           for name in ("embedder", "retriever", "generator", "gateway")}


def unary(server, module, service: str, name: str, request, metadata=(), timeout: float = 60):
    """(response, code, details) of a unary call."""
    response, _, code, details = server.invoke_unary_unary(
        method(module, service, name), metadata, request, timeout).termination()
    return response, code, details


def drain(rpc) -> tuple[list, grpc.StatusCode, str]:
    """Every response of a response stream, then its status."""
    responses = []
    while True:
        try:
            responses.append(rpc.take_response())
        except ValueError:  # grpc_testing: no more responses, the RPC has terminated
            break
    _, code, details = rpc.termination()
    return responses, code, details


# -- embedder: unary ----------------------------------------------------------------------------
def test_embedder_embeds_for_a_credential_and_names_what_it_refuses(servers, stack: Stack) -> None:
    embedder = servers["embedder"]
    reply, code, _ = unary(embedder, embedder_pb2, "Embedder", "Embed",
                           embedder_pb2.EmbedRequest(texts=["harbour", "kestrel"], task=embedder_pb2.QUERY),
                           stack.service_metadata())
    assert code == OK and len(reply.vectors) == 2 and reply.dimensions == len(reply.vectors[0].values) == 384
    _, code, details = unary(embedder, embedder_pb2, "Embedder", "Embed", embedder_pb2.EmbedRequest(texts=["x"]))
    assert code == UNAUTHENTICATED and details
    _, code, details = unary(embedder, embedder_pb2, "Embedder", "Embed",
                             embedder_pb2.EmbedRequest(texts=["x"] * (MAX_TEXTS + 1)), stack.service_metadata())
    assert code == INVALID and details.startswith("texts")


# -- retriever: metadata decides the tenant; client + server streaming -----------------------------
def test_the_service_metadata_names_the_tenant_a_search_sees(servers, stack: Stack) -> None:
    request = retriever_pb2.SearchRequest(query="Kestrel Brazil exposure", collections=["meeting_notes"], top_k=3)
    demo, code, _ = unary(servers["retriever"], retriever_pb2, "Retriever", "Search", request,
                          stack.service_metadata("demo"))
    assert code == OK and demo.hits and all(h.chunk.tenant == "demo" for h in demo.hits)
    other, code, _ = unary(servers["retriever"], retriever_pb2, "Retriever", "Search", request,
                           stack.service_metadata("nobody-here"))
    assert code == OK and not other.hits
    _, code, details = unary(servers["retriever"], retriever_pb2, "Retriever", "Search",
                             retriever_pb2.SearchRequest(query="x", collections=["../etc"]), stack.metadata)
    assert code == INVALID and details.startswith("collections")


def test_retriever_ingest_streams_progress_for_a_stream_of_documents(servers, stack: Stack) -> None:
    rpc = servers["retriever"].invoke_stream_stream(method(retriever_pb2, "Retriever", "Ingest"), stack.metadata, 60)
    rpc.send_request(retriever_pb2.Document(doc_id="gt-1", collection="grpc_testing",
                                            text="The glacier survey starts in March with four teams."))
    rpc.send_request(retriever_pb2.Document(doc_id="gt-2", collection="grpc_testing", date="2024-02-30",
                                            text="A document with an impossible date."))
    rpc.requests_closed()
    progress, code, _ = drain(rpc)
    assert code == OK
    final = {p.doc_id: retriever_pb2.IngestStage.Name(p.stage) for p in progress}
    assert final == {"gt-1": "INDEXED", "gt-2": "FAILED"}
    assert [retriever_pb2.IngestStage.Name(p.stage) for p in progress if p.doc_id == "gt-1"] == [
        "PARSED", "CHUNKED", "EMBEDDED", "INDEXED"]
    [failed] = [p for p in progress if p.doc_id == "gt-2"]
    assert failed.error.startswith("date")


# -- generator: server streaming -------------------------------------------------------------------
def test_generator_streams_content_then_done_and_refuses_an_unknown_model(servers, stack: Stack) -> None:
    block = generator_pb2.ContextBlock(index=1, text="Kestrel cut its Brazil exposure to 4% in March.")
    request = generator_pb2.GenerateRequest(model="extractive", question="What did Kestrel do with Brazil?",
                                            blocks=[block])
    rpc = servers["generator"].invoke_unary_stream(method(generator_pb2, "Generator", "Generate"),
                                                   stack.service_metadata(), request, 60)
    events, code, _ = drain(rpc)
    assert code == OK
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[-1] == "done" and "content" in kinds and kinds.index("content") < kinds.index("done")
    assert "Brazil" in "".join(e.content for e in events if e.HasField("content"))
    bad = servers["generator"].invoke_unary_stream(method(generator_pb2, "Generator", "Generate"),
                                                   stack.service_metadata(),
                                                   generator_pb2.GenerateRequest(model="gpt-9", question="x"), 60)
    events, code, details = drain(bad)
    assert (events, code) == ([], INVALID) and details.startswith("model")


# -- gateway: the answer's stream, cancelled; Stop, DeleteConversation, Ingest -----------------------
def test_gateway_ask_streams_its_events_in_order(servers, stack: Stack) -> None:
    rpc = servers["gateway"].invoke_unary_stream(
        method(gateway_pb2, "Gateway", "Ask"), stack.metadata,
        gateway_pb2.AskRequest(question="What did Kestrel do with its Brazil exposure?"), 60)
    events, code, _ = drain(rpc)
    assert code == OK
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[:5] == ["searching", "searching", "strategy", "generating", "content"]
    assert kinds[-2:] == ["citations", "done"] and set(kinds[4:-2]) == {"content"}
    _, code, _ = drain(servers["gateway"].invoke_unary_stream(method(gateway_pb2, "Gateway", "Ask"), (),
                                                              gateway_pb2.AskRequest(question="x"), 60))
    assert code == UNAUTHENTICATED


def test_a_cancelled_ask_stops_the_answer_and_keeps_it_marked_stopped(servers, stack: Stack) -> None:
    rpc = servers["gateway"].invoke_unary_stream(
        method(gateway_pb2, "Gateway", "Ask"), stack.metadata,
        gateway_pb2.AskRequest(question="Summarise every Kestrel meeting note in detail"), 60)
    while (event := rpc.take_response()).WhichOneof("event") != "content":
        if event.HasField("strategy"):
            conversation = event.strategy.conversation_id
    rpc.cancel()  # the client goes away after the first words (grpc_testing has no status for it)
    read = gateway_pb2.GetConversationRequest(conversation_id=conversation)
    for _ in range(100):  # the handler's task is cancelled on the service's loop; it saves what it had
        reply, code, _ = unary(servers["gateway"], gateway_pb2, "Gateway", "GetConversation", read, stack.metadata)
        if code == OK and [m.role for m in reply.messages] == ["user", "assistant"]:
            break
        stack.call(asyncio.sleep(0.05))
    assert code == OK and "stopped" in reply.messages[-1].content.lower(), reply


def test_gateway_stop_and_delete_answer_not_found_for_unknown_conversations(servers, stack: Stack) -> None:
    for name, request in (("Stop", gateway_pb2.StopRequest(conversation_id="no-such-conversation")),
                          ("DeleteConversation", gateway_pb2.DeleteConversationRequest(conversation_id="nope"))):
        _, code, details = unary(servers["gateway"], gateway_pb2, "Gateway", name, request, stack.metadata)
        assert code == grpc.StatusCode.NOT_FOUND, (name, details)


def test_gateway_ingest_refuses_a_document_that_names_its_owner(servers, stack: Stack) -> None:
    """The uploader owns what it uploads: an access naming an owner ends the stream, nothing ingested."""
    rpc = servers["gateway"].invoke_stream_stream(method(gateway_pb2, "Gateway", "Ingest"),
                                                  bearer(stack.key("demo", "reader")), 60)
    rpc.send_request(retriever_pb2.Document(doc_id="x", collection="documents", text="x",
                                            access=common_pb2.Access(owner="someone-else")))
    rpc.requests_closed()
    progress, code, details = drain(rpc)
    assert (progress, code) == ([], grpc.StatusCode.INVALID_ARGUMENT) and details.startswith("access.owner"), details


def test_gateway_library_methods_answer_for_a_key_and_refuse_without_one(servers, stack: Stack) -> None:
    gateway = servers["gateway"]
    meta, code, _ = unary(gateway, gateway_pb2, "Gateway", "GetMeta", gateway_pb2.GetMetaRequest(), stack.metadata)
    assert code == OK and meta.identity.tenant == "demo" and "extractive" in meta.models
    listed, code, _ = unary(gateway, gateway_pb2, "Gateway", "ListDocuments",
                            retriever_pb2.ListDocumentsRequest(collection="meeting_notes", limit=2), stack.metadata)
    assert code == OK and len(listed.documents) == 2 and listed.next_offset == 2
    _, code, details = unary(gateway, gateway_pb2, "Gateway", "GetChunk",
                             retriever_pb2.GetChunkRequest(chunk_id="no-such-chunk"), stack.metadata)
    assert code == grpc.StatusCode.NOT_FOUND and "no-such-chunk" in details
    _, code, _ = unary(gateway, gateway_pb2, "Gateway", "ListFunds", gateway_pb2.ListFundsRequest())
    assert code == UNAUTHENTICATED
