"""An analyst's whole flow over the Gateway gRPC API alone, as a backend service would run it: who the
key is, the documents it may read, a question answered as a stream, a cited chunk opened as a citation
panel shows it, and the conversation renamed and deleted.

It needs only grpcio and the generated stubs (ragmesh/v1, or your own from protos/ with grpcio-tools):

    RAGMESH_GATEWAY=localhost:50051 RAGMESH_API_KEY=rk_... python examples/grpc_client.py "What did Kestrel do?"

Every call carries the key as `authorization: Bearer <key>` metadata; the key, never a request field,
decides the tenant and the user. Errors are gRPC status codes: INVALID_ARGUMENT (the message names the
field), NOT_FOUND (also for another tenant's ids), UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED
and UNAVAILABLE (both worth a retry after a pause)."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import grpc

from ragmesh.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, retriever_pb2

TIMEOUT_S = 60.0  # each call's deadline: the gateway stops the work (and the model call) when it passes
PAGE = 50  # documents a page (1..200)
QUESTION = "What did Kestrel do with its Brazil exposure in March 2024?"  # asked when none is given


@dataclass
class Flow:
    """What the flow saw, step by step (the test reads it; a script would print it)."""

    caller: str = ""
    documents: list[str] = field(default_factory=list)  # "collection/doc_id: title", newest first
    answer: str = ""
    route: str = ""
    citations: list[common_pb2.Citation] = field(default_factory=list)
    conversation_id: str = ""
    chunk: retriever_pb2.ChunkInfo | None = None  # the first citation's chunk, with its document
    title: str = ""
    deleted: bool = False


def analyst_flow(gateway: gateway_pb2_grpc.GatewayStub, key: str, question: str, show=print) -> Flow:
    """Runs the flow with `key`, calling `show` with each step's line."""
    auth = (("authorization", f"Bearer {key}"),)
    flow = Flow()

    meta = gateway.GetMeta(gateway_pb2.GetMetaRequest(), metadata=auth, timeout=TIMEOUT_S)
    flow.caller = f"{meta.identity.user} ({meta.identity.role}) of {meta.identity.tenant}"
    show(f"caller: {flow.caller}; models {', '.join(meta.models)}; sources {', '.join(meta.data_sources)}")

    # Documents, newest first, a page at a time: a full page says where the next one starts.
    offset: int | None = 0
    while offset is not None:
        page = gateway.ListDocuments(retriever_pb2.ListDocumentsRequest(limit=PAGE, offset=offset), metadata=auth,
                                     timeout=TIMEOUT_S)
        flow.documents += [f"{e.document.collection}/{e.document.doc_id}: {e.document.title}" for e in page.documents]
        offset = page.next_offset if page.HasField("next_offset") else None
    show(f"documents: {len(flow.documents)}, newest {flow.documents[0] if flow.documents else 'none'}")

    # The answer as a stream of events, in the order the SSE bridge sends them.
    parts: list[str] = []
    for event in gateway.Ask(gateway_pb2.AskRequest(question=question), metadata=auth, timeout=TIMEOUT_S):
        kind = event.WhichOneof("event")
        if kind == "strategy":  # how it will be answered: route, filters, what was searched and found
            flow.route = event.strategy.route
            show(f"strategy: {event.strategy.route}, {event.strategy.chunks} chunks ({event.strategy.reason})")
        elif kind == "content":
            parts.append(event.content)
        elif kind == "citations":
            flow.citations = list(event.citations.items)
        elif kind == "done":
            flow.conversation_id = event.done.conversation_id
        elif kind == "error":  # a failure after the stream started (before it, the call itself fails)
            raise RuntimeError(f"{event.error.code}: {event.error.message}")
    flow.answer = "".join(parts)
    show(f"answer: {flow.answer}")
    for c in flow.citations:
        show(f"  [{c.index}] {c.title or c.doc_id} ({c.date}) chunk {c.chunk_id}")

    # A cited chunk as a citation panel shows it: its text, its parent's, its document.
    if cited := next((c for c in flow.citations if c.chunk_id), None):
        flow.chunk = gateway.GetChunk(retriever_pb2.GetChunkRequest(chunk_id=cited.chunk_id), metadata=auth,
                                      timeout=TIMEOUT_S)
        show(f"chunk {cited.chunk_id} of {flow.chunk.document.title or flow.chunk.document.doc_id}: "
             f"{flow.chunk.chunk.text[:120]}")

    renamed = gateway.RenameConversation(gateway_pb2.RenameConversationRequest(
        conversation_id=flow.conversation_id, title=f"Research: {question[:60]}"), metadata=auth, timeout=TIMEOUT_S)
    flow.title = renamed.title
    show(f"renamed {flow.conversation_id}: {flow.title}")

    flow.deleted = gateway.DeleteConversation(gateway_pb2.DeleteConversationRequest(
        conversation_id=flow.conversation_id), metadata=auth, timeout=TIMEOUT_S).deleted
    show(f"deleted {flow.conversation_id}: {flow.deleted}")
    return flow


def main(argv: list[str] | None = None) -> int:
    address = os.environ.get("RAGMESH_GATEWAY", "localhost:50051")
    key = os.environ.get("RAGMESH_API_KEY", "")
    question = " ".join(sys.argv[1:] if argv is None else argv) or QUESTION
    if not key:
        print("set RAGMESH_API_KEY (a key from `ragmesh keys create --tenant T --user U`)", file=sys.stderr)
        return 2
    # TLS in production: grpc.secure_channel(address, grpc.ssl_channel_credentials(open(ca, "rb").read()))
    with grpc.insecure_channel(address) as channel:
        try:
            analyst_flow(gateway_pb2_grpc.GatewayStub(channel), key, question)
        except grpc.RpcError as exc:
            print(f"{exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
