"""Whatever a web client can do, a gRPC client can: each HTTP route beside its Gateway method, called
with the same key, says the same thing (documents, a cited chunk, collections, funds, meta, renaming
and paging conversations, the notes contract); and each method refuses as its route does: another
tenant's ids exactly as unknown ones, the conversation memory never served, a member may not delete,
no credential is UNAUTHENTICATED, garbage is INVALID_ARGUMENT naming the field."""
from __future__ import annotations

from urllib.parse import quote

import fastapi.routing
import grpc
import httpx
import pytest

from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc, retriever_pb2
from tests.auth import bearer, channel, headers
from tests.stack import DEMO, Stack

QUESTION = "What did Kestrel do with its Brazil exposure in March 2024?"
NOT_FOUND, INVALID = grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT


class Caller:
    """One key, on both edges."""

    def __init__(self, stack: Stack, key: str | None) -> None:
        self.http = httpx.Client(base_url=stack.http_url, headers=headers(key) if key else {}, timeout=60)
        self.grpc = gateway_pb2_grpc.GatewayStub(channel(stack.address("gateway"), bearer(key) if key else ()))


@pytest.fixture(scope="module")
def member(stack: Stack) -> Caller:
    return Caller(stack, stack.key(DEMO, "parity-member"))


@pytest.fixture(scope="module")
def admin(stack: Stack) -> Caller:
    return Caller(stack, stack.key(DEMO, "parity-admin", "admin"))


@pytest.fixture(scope="module")
def outsider(stack: Stack) -> Caller:
    return Caller(stack, stack.key("parity-other", "eve", "admin"))


@pytest.fixture(scope="module")
def cited(member: Caller) -> gateway_pb2.NotesAnswer:
    """An answer in the notes contract over gRPC (its citations name chunks and documents)."""
    return member.grpc.AskNotes(gateway_pb2.AskRequest(question=QUESTION), timeout=60)


def refused(call, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    assert caught.value.code() == code, caught.value.details()
    return caught.value.details()


def test_the_notes_contract_over_grpc_is_the_answer_http_gives(member: Caller, cited: gateway_pb2.NotesAnswer) -> None:
    http = member.http.post("/api/chat/ask", json={"question": QUESTION, "format": "notes"}).json()
    assert cited.answer == http["answer"] and "[N1]" in cited.answer
    assert [(c.cid, c.note_id, c.chunk_id, c.score) for c in cited.citations] == [
        (c["cid"], c["noteId"], c["chunkId"], c["score"]) for c in http["citations"]]
    r = http["meta"]["retrieval"]
    assert (cited.retrieval.k, cited.retrieval.strategy, cited.retrieval.candidate_count) == (
        r["k"], r["strategy"], r["candidateCount"]) and cited.retrieval.strategy.startswith("hybrid")
    assert cited.model == http["meta"]["model"] and cited.conversation_id != http["conversation_id"]


def test_documents_are_listed_read_and_paged_alike(member: Caller) -> None:
    for collection in ("meeting_notes", ""):
        http = member.http.get("/api/documents", params={"collection": collection, "limit": 3}).json()
        rpc = member.grpc.ListDocuments(retriever_pb2.ListDocumentsRequest(collection=collection, limit=3))
        assert [e.document.doc_id for e in rpc.documents] == [d["doc_id"] for d in http["documents"]]
        assert rpc.next_offset == http["next_offset"] == 3
        nxt = member.grpc.ListDocuments(retriever_pb2.ListDocumentsRequest(collection=collection, limit=3, offset=3))
        assert not {e.document.doc_id for e in nxt.documents} & {d["doc_id"] for d in http["documents"]}
    doc = http["documents"][0]
    info = member.grpc.GetDocument(retriever_pb2.GetDocumentRequest(collection=doc["collection"], doc_id=doc["doc_id"]))
    read = member.http.get(f"/api/documents/{doc['collection']}/{quote(doc['doc_id'])}").json()
    assert (info.doc_id, info.title, info.chunk_count, info.summary) == (
        read["doc_id"], read["title"], read["chunk_count"], read["summary"])


def test_a_cited_chunk_reads_alike(member: Caller, cited: gateway_pb2.NotesAnswer) -> None:
    chunk_id = cited.citations[0].chunk_id
    rpc = member.grpc.GetChunk(retriever_pb2.GetChunkRequest(chunk_id=chunk_id))
    http = member.http.get(f"/api/chunks/{quote(chunk_id)}").json()
    assert (rpc.chunk.text, rpc.parent_text, rpc.document.doc_id) == (http["text"], http["parent_text"],
                                                                      http["document"]["doc_id"])
    assert dict(rpc.chunk.metadata) == http["metadata"]


def test_pickers_and_meta_say_the_same(member: Caller) -> None:
    http = member.http.get("/api/collections").json()["collections"]
    rpc = member.grpc.ListCollections(retriever_pb2.ListCollectionsRequest()).collections
    assert [(c.name, c.documents, c.chunks, c.data_source) for c in rpc] == [
        (c["name"], c["documents"], c["chunks"], c["data_source"]) for c in http]
    assert "conversations" not in [c.name for c in rpc] and any(c.data_source == "Meeting Notes" for c in rpc)
    funds = member.grpc.ListFunds(gateway_pb2.ListFundsRequest()).funds
    assert list(funds) == member.http.get("/api/funds").json()["funds"] and funds
    meta, http_meta = member.grpc.GetMeta(gateway_pb2.GetMetaRequest()), member.http.get("/api/meta").json()
    assert (list(meta.models), meta.default_model, list(meta.data_sources), list(meta.funds)) == (
        http_meta["models"], http_meta["default_model"], http_meta["data_sources"], http_meta["funds"])
    assert (meta.identity.tenant, meta.identity.user, meta.identity.role) == (DEMO, "parity-member", "member")


def test_conversations_rename_and_page_alike(member: Caller, outsider: Caller, cited: gateway_pb2.NotesAnswer) -> None:
    conversation = cited.conversation_id
    renamed = member.grpc.RenameConversation(gateway_pb2.RenameConversationRequest(
        conversation_id=conversation, title="  Kestrel   Brazil "))
    assert renamed.title == "Kestrel Brazil"
    first = member.grpc.ListConversations(gateway_pb2.ListConversationsRequest(limit=1))
    http = member.http.get("/api/conversations", params={"limit": 1}).json()
    assert [c.conversation_id for c in first.conversations] == [c["conversation_id"] for c in http["conversations"]]
    assert first.next_offset == http["next_offset"] == 1
    titles = {c.conversation_id: c.title for c in member.grpc.ListConversations(
        gateway_pb2.ListConversationsRequest()).conversations}
    assert titles[conversation] == "Kestrel Brazil"
    rename = gateway_pb2.RenameConversationRequest(conversation_id=conversation, title="mine now")
    unknown = gateway_pb2.RenameConversationRequest(conversation_id="no-such-conversation", title="x")
    assert refused(lambda: outsider.grpc.RenameConversation(rename), NOT_FOUND) == refused(
        lambda: outsider.grpc.RenameConversation(unknown), NOT_FOUND).replace("no-such-conversation", conversation)
    long = gateway_pb2.RenameConversationRequest(conversation_id=conversation, title="t" * 201)
    assert refused(lambda: member.grpc.RenameConversation(long), INVALID).startswith("title")


def test_another_tenant_and_the_memory_answer_as_unknown_ids(member: Caller, outsider: Caller,
                                                             cited: gateway_pb2.NotesAnswer) -> None:
    note = cited.citations[0]
    collection = member.grpc.GetChunk(retriever_pb2.GetChunkRequest(chunk_id=note.chunk_id)).chunk.collection
    theirs = retriever_pb2.GetDocumentRequest(collection=collection, doc_id=note.note_id)
    unknown = retriever_pb2.GetDocumentRequest(collection=collection, doc_id="no-such-doc")
    assert refused(lambda: outsider.grpc.GetDocument(theirs), NOT_FOUND) == refused(
        lambda: outsider.grpc.GetDocument(unknown), NOT_FOUND).replace("no-such-doc", note.note_id)
    refused(lambda: outsider.grpc.GetChunk(retriever_pb2.GetChunkRequest(chunk_id=note.chunk_id)), NOT_FOUND)
    refused(lambda: outsider.grpc.DeleteDocument(gateway_pb2.DeleteDocumentRequest(
        collection=collection, doc_id=note.note_id)), NOT_FOUND)
    assert not outsider.grpc.ListDocuments(retriever_pb2.ListDocumentsRequest(collection=collection)).documents
    assert member.grpc.GetDocument(theirs).doc_id == note.note_id, "the owner still reads it"
    # The member's own conversation memory is not served here either (its messages reach it through Ask).
    assert not member.grpc.ListDocuments(retriever_pb2.ListDocumentsRequest(collection="conversations")).documents
    refused(lambda: member.grpc.GetDocument(retriever_pb2.GetDocumentRequest(
        collection="conversations", doc_id=cited.conversation_id)), NOT_FOUND)


def test_a_member_may_read_but_not_delete_an_admins_document(member: Caller, admin: Caller) -> None:
    admin.http.post("/api/documents", json={"collection": "parity_docs", "documents": [
        {"doc_id": "p-1", "text": "The parity fund holds 12 bonds."}]}).read()
    delete = gateway_pb2.DeleteDocumentRequest(collection="parity_docs", doc_id="p-1")
    http = member.http.delete("/api/documents/parity_docs/p-1")
    assert http.status_code == 403, http.text
    assert refused(lambda: member.grpc.DeleteDocument(delete), grpc.StatusCode.PERMISSION_DENIED) == \
        http.json()["error"]["message"]
    assert member.grpc.GetDocument(retriever_pb2.GetDocumentRequest(collection="parity_docs", doc_id="p-1"))
    assert admin.grpc.DeleteDocument(delete).documents == 1
    refused(lambda: admin.grpc.DeleteDocument(delete), NOT_FOUND)


def test_every_new_method_needs_a_credential_and_names_bad_input(member: Caller, stack: Stack) -> None:
    anonymous = Caller(stack, None).grpc
    calls = {
        "ListDocuments": retriever_pb2.ListDocumentsRequest(), "GetDocument": retriever_pb2.GetDocumentRequest(),
        "DeleteDocument": gateway_pb2.DeleteDocumentRequest(), "GetChunk": retriever_pb2.GetChunkRequest(),
        "ListCollections": retriever_pb2.ListCollectionsRequest(), "ListFunds": gateway_pb2.ListFundsRequest(),
        "GetMeta": gateway_pb2.GetMetaRequest(), "RenameConversation": gateway_pb2.RenameConversationRequest(),
        "AskNotes": gateway_pb2.AskRequest(question="x"),
    }
    for name, request in calls.items():
        refused(lambda: getattr(anonymous, name)(request), grpc.StatusCode.UNAUTHENTICATED)
    bad = [
        (member.grpc.ListDocuments, retriever_pb2.ListDocumentsRequest(limit=500), "limit"),
        (member.grpc.ListDocuments, retriever_pb2.ListDocumentsRequest(offset=-1), "offset"),
        (member.grpc.ListDocuments, retriever_pb2.ListDocumentsRequest(collection="../etc"), "collection"),
        (member.grpc.GetDocument, retriever_pb2.GetDocumentRequest(collection="meeting_notes"), "doc_id"),
        (member.grpc.GetChunk, retriever_pb2.GetChunkRequest(), "chunk_id"),
        (member.grpc.ListConversations, gateway_pb2.ListConversationsRequest(limit=0), "limit"),
        (member.grpc.ListConversations, gateway_pb2.ListConversationsRequest(offset=-5), "offset"),
        (member.grpc.AskNotes, gateway_pb2.AskRequest(question=""), "question"),
    ]
    for call, request, field in bad:
        assert refused(lambda: call(request), INVALID).startswith(field)


def test_oversized_input_is_refused_naming_the_field(member: Caller) -> None:
    long = "x" * 100_000
    oversized = [
        (member.grpc.GetChunk, retriever_pb2.GetChunkRequest(chunk_id=long), "chunk_id"),
        (member.grpc.GetDocument, retriever_pb2.GetDocumentRequest(collection="meeting_notes", doc_id=long), "doc_id"),
        (member.grpc.ListDocuments, retriever_pb2.ListDocumentsRequest(collection="c" * 200), "collection"),
        (member.grpc.AskNotes, gateway_pb2.AskRequest(question=long), "question"),
    ]
    for call, request, field in oversized:
        assert refused(lambda: call(request), INVALID).startswith(field)
    # Past the unary message limit, the edge refuses before anything parses it.
    with pytest.raises(grpc.RpcError) as caught:
        member.grpc.GetChunk(retriever_pb2.GetChunkRequest(chunk_id="x" * (5 * 1024 * 1024)))
    assert caught.value.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, INVALID), caught.value.details()


def test_another_tenant_asks_and_picks_only_within_its_own(outsider: Caller, member: Caller,
                                                           cited: gateway_pb2.NotesAnswer) -> None:
    theirs = gateway_pb2.AskRequest(question=QUESTION, conversation_id=cited.conversation_id)
    refused(lambda: outsider.grpc.AskNotes(theirs), NOT_FOUND)
    assert not outsider.grpc.ListFunds(gateway_pb2.ListFundsRequest()).funds
    assert not {c.name for c in outsider.grpc.ListCollections(retriever_pb2.ListCollectionsRequest()).collections} & {
        "meeting_notes", "factsheets"}
    assert outsider.grpc.GetMeta(gateway_pb2.GetMetaRequest()).identity.tenant == "parity-other"
    assert member.grpc.ListFunds(gateway_pb2.ListFundsRequest()).funds, "the owner's funds are still there"


@pytest.mark.parametrize("malformed", ["", "x" * 129, "a b", "ünïcode", "-leading-dash"])
def test_a_conversation_id_no_conversation_can_have_is_refused_alike_on_every_conversation_call(
        member: Caller, malformed: str) -> None:
    """The declared conversation-id rule (the path parameter's pattern and length) on both edges: a
    malformed id is INVALID_ARGUMENT / 400 naming conversation_id, a well-formed unknown one NOT_FOUND / 404."""
    path = f"/api/conversations/{quote(malformed, safe='')}"
    http = [member.http.post("/api/chat/stop", json={"conversation_id": malformed}),
            member.http.post("/api/chat/ask", json={"question": QUESTION, "conversation_id": malformed or "-"}),
            member.http.post("/api/corrections", json={"correction": "4%", "question": "q",
                                                       "conversation_id": malformed or "-"})]
    if malformed:  # an empty path segment is another route
        http += [member.http.get(path), member.http.patch(path, json={"title": "t"}), member.http.delete(path)]
    for reply in http:
        assert reply.status_code == 400, (reply.request.method, reply.request.url, reply.text[:200])
        assert reply.json()["error"]["message"].startswith("conversation_id"), reply.text[:200]
    g = member.grpc
    for call in (lambda c: g.Stop(gateway_pb2.StopRequest(conversation_id=c)),
                 lambda c: g.GetConversation(gateway_pb2.GetConversationRequest(conversation_id=c)),
                 lambda c: g.RenameConversation(gateway_pb2.RenameConversationRequest(conversation_id=c, title="t")),
                 lambda c: g.DeleteConversation(gateway_pb2.DeleteConversationRequest(conversation_id=c)),
                 lambda c: g.Correct(gateway_pb2.CorrectionRequest(conversation_id=c or "-", correction="4%",
                                                                   question="q")),
                 lambda c: list(g.Ask(gateway_pb2.AskRequest(question=QUESTION, conversation_id=c or "-")))):
        assert refused(lambda: call(malformed), INVALID).startswith("conversation_id")


def test_a_well_formed_unknown_conversation_id_is_not_found_on_every_conversation_call(member: Caller) -> None:
    unknown = "0" * 32
    path = f"/api/conversations/{unknown}"
    for reply in (member.http.get(path), member.http.patch(path, json={"title": "t"}), member.http.delete(path),
                  member.http.post("/api/chat/stop", json={"conversation_id": unknown}),
                  member.http.post("/api/chat/ask", json={"question": QUESTION, "conversation_id": unknown}),
                  member.http.post("/api/corrections", json={"correction": "4%", "question": "q",
                                                             "conversation_id": unknown})):
        assert reply.status_code == 404, (reply.request.method, reply.request.url, reply.text[:200])
    g = member.grpc
    for call in (lambda: g.Stop(gateway_pb2.StopRequest(conversation_id=unknown)),
                 lambda: g.GetConversation(gateway_pb2.GetConversationRequest(conversation_id=unknown)),
                 lambda: g.RenameConversation(gateway_pb2.RenameConversationRequest(conversation_id=unknown,
                                                                                    title="t")),
                 lambda: g.DeleteConversation(gateway_pb2.DeleteConversationRequest(conversation_id=unknown)),
                 lambda: g.Correct(gateway_pb2.CorrectionRequest(conversation_id=unknown, correction="4%",
                                                                 question="q")),
                 lambda: list(g.Ask(gateway_pb2.AskRequest(question=QUESTION, conversation_id=unknown)))):
        refused(call, NOT_FOUND)


# Each HTTP route and the Gateway method that does the same; the tests above show they say the same.
COUNTERPARTS = {
    ("POST", "/api/chat/ask/stream"): "Ask",
    ("POST", "/api/chat/ask"): "Ask",  # with "format": "notes", AskNotes
    ("POST", "/api/chat/stop"): "Stop",
    ("GET", "/api/conversations"): "ListConversations",
    ("GET", "/api/conversations/{conversation_id}"): "GetConversation",
    ("PATCH", "/api/conversations/{conversation_id}"): "RenameConversation",
    ("DELETE", "/api/conversations/{conversation_id}"): "DeleteConversation",
    ("POST", "/api/corrections"): "Correct",
    ("POST", "/api/documents"): "Ingest",
    ("GET", "/api/documents"): "ListDocuments",
    ("GET", "/api/documents/{collection}/{doc_id}"): "GetDocument",
    ("DELETE", "/api/documents/{collection}/{doc_id}"): "DeleteDocument",
    ("PUT", "/api/documents/{collection}/{doc_id}/access"): "SetDocumentAccess",
    ("PUT", "/api/collections/{collection}/access"): "SetCollectionAccess",
    ("GET", "/api/chunks/{chunk_id}"): "GetChunk",
    ("GET", "/api/collections"): "ListCollections",
    ("GET", "/api/funds"): "ListFunds",
    ("GET", "/api/meta"): "GetMeta",
    ("POST", "/api/transcripts"): "IngestTranscript",
}
# HTTP by nature: the page and its API explorer are for browsers; health and metrics have their own
# gRPC-side counterparts outside Gateway (grpc.health.v1.Health on every port, each service's /metrics).
# The MCP server is streamable HTTP by its protocol; its tools are Ask, ListDocuments, GetChunk, ListCollections.
HTTP_ONLY = {("GET", "/"), ("GET", "/docs"), ("GET", "/openapi.json"), ("GET", "/healthz"), ("GET", "/metrics"),
             ("POST", "/mcp")}
# gRPC spellings of what HTTP folds into one route: the notes contract is POST /api/chat/ask with
# "format": "notes"; the models a client may pick are part of GET /api/meta.
GRPC_ONLY = {"AskNotes": ("POST", "/api/chat/ask"), "ListModels": ("GET", "/api/meta")}


def test_every_http_route_has_its_gateway_method_and_every_method_its_route(stack: Stack) -> None:
    app = stack.app("gateway").http_app
    flat = getattr(fastapi.routing, "iter_route_contexts", lambda routes: routes)
    served = {(method, route.path_format.replace(":path", "")) for route in flat(app.routes)
              if getattr(route, "methods", None) for method in route.methods if method != "HEAD"}
    methods = {m.name for m in gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].methods}

    assert served - HTTP_ONLY - set(COUNTERPARTS) == set(), "a route with no Gateway method: add one"
    assert set(COUNTERPARTS) <= served, "a counterpart listed for a route the app no longer serves"
    assert set(COUNTERPARTS.values()) | set(GRPC_ONLY) == methods, "a Gateway method with no HTTP route"
    assert set(GRPC_ONLY.values()) <= served and set(COUNTERPARTS.values()).isdisjoint(GRPC_ONLY)
