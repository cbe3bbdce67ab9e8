"""The HTTP API a web client builds on: conversations listed (newest first, titled, paged),
read back with their citations, renamed and deleted; documents listed per collection; a chunk read
for a citation panel; collections and funds for pickers; only configured models in /api/meta. Each
route as its owner, as another tenant (a 404 exactly like an unknown id), without a key, and with
garbage (a 400 naming the field). The retriever RPCs behind them are checked over gRPC too."""
from __future__ import annotations

from urllib.parse import quote

import grpc
import httpx
import pytest

from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc, retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel, headers
from tests.conftest import sse
from tests.stack import DEMO, Stack

QUESTION = "What did Kestrel do with its Brazil exposure in March 2024?"


class Client:
    def __init__(self, stack: Stack, key: str | None) -> None:
        self.http = httpx.Client(base_url=stack.http_url, headers=headers(key) if key else {}, timeout=60)

    def __getattr__(self, name: str):
        return getattr(self.http, name)


@pytest.fixture(scope="module")
def analyst(stack: Stack) -> Client:
    return Client(stack, stack.key(DEMO, "browse-analyst"))


@pytest.fixture(scope="module")
def outsider(stack: Stack) -> Client:
    return Client(stack, stack.key("browse-other", "eve", "admin"))


@pytest.fixture(scope="module")
def asked(stack: Stack, analyst: Client) -> list[str]:
    """Two conversations of the analyst, the first asked first: [older, newer]."""
    ids = []
    for question in (QUESTION, "How did Harborview change its net exposure in June 2024?"):
        events = sse(stack.http_url + "/api/chat/ask/stream", {"question": question}, dict(analyst.headers))
        ids.append(next(e for e in events if "done" in e)["conversation_id"])
    return ids


def _error(reply: httpx.Response, status: int) -> dict:
    assert reply.status_code == status, reply.text[:300]
    return reply.json()["error"]


def test_conversations_are_listed_newest_first_titled_and_paged(analyst: Client, asked: list[str]) -> None:
    listed = analyst.get("/api/conversations").json()
    assert [c["conversation_id"] for c in listed["conversations"]] == asked[::-1]
    assert listed["conversations"][1]["title"] == QUESTION
    assert listed["next_offset"] is None
    first = analyst.get("/api/conversations", params={"limit": 1}).json()
    assert [c["conversation_id"] for c in first["conversations"]] == [asked[1]] and first["next_offset"] == 1
    second = analyst.get("/api/conversations", params={"limit": 1, "offset": 1}).json()
    assert [c["conversation_id"] for c in second["conversations"]] == [asked[0]]
    for params, field in (({"limit": 0}, "limit"), ({"limit": 201}, "limit"), ({"offset": -1}, "offset"),
                          ({"limit": "many"}, "limit")):
        assert field in _error(analyst.get("/api/conversations", params=params), 400)["message"]


def test_a_conversation_reads_back_with_citations_model_route_and_timings(analyst: Client, asked: list[str]) -> None:
    messages = analyst.get(f"/api/conversations/{asked[0]}").json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    answer = messages[1]
    assert answer["model"] == "extractive" and answer["route"] and answer["retrieval"] == "RAG_NEW_QUERY"
    assert answer["citations"] and all(c["chunk_id"] for c in answer["citations"])
    assert set(answer["chunk_map"].values()) == {c["chunk_id"] for c in answer["citations"]}
    assert answer["timings"]["retrieval_ms"] >= 0 and answer["timings"]["generation_ms"] >= 0
    assert answer["failed"] == "" and messages[0]["citations"] == []


def test_rename_keeps_the_order_and_blank_brings_back_the_first_question(analyst: Client, asked: list[str]) -> None:
    path = f"/api/conversations/{asked[0]}"
    assert analyst.patch(path, json={"title": "  Kestrel   Brazil "}).json() == {
        "conversation_id": asked[0], "title": "Kestrel Brazil"}
    titles = {c["conversation_id"]: c["title"] for c in analyst.get("/api/conversations").json()["conversations"]}
    assert titles[asked[0]] == "Kestrel Brazil"
    assert [c for c in titles] == asked[::-1]
    assert "title" in _error(analyst.patch(path, json={"title": "t" * 201}), 400)["message"]
    assert "title" in _error(analyst.patch(path, json={"title": 5}), 400)["message"]
    assert "title" in _error(analyst.patch(path, json={}), 400)["message"]
    assert _error(analyst.patch(path, content=b"title=x", headers={"content-type": "text/plain"}), 415)
    analyst.patch(path, json={"title": " "})
    assert analyst.get("/api/conversations").json()["conversations"][1]["title"] == QUESTION


def test_titles_lose_control_and_direction_override_characters_on_both_edges(stack: Stack) -> None:
    """A NUL cuts a title short in a C client; a right-to-left override shows "report\u202efdp.exe" as
    "reportexe.pdf". Neither survives a rename, over HTTP or gRPC, nor a title made from the question."""
    key = stack.key(DEMO, "browse-titles")
    titler = Client(stack, key)
    events = sse(stack.http_url + "/api/chat/ask/stream",
                 {"question": "Kestrel\u202e\x00 Brazil\u2066 exposure\x9b?\u2069"}, dict(titler.headers))
    cid = next(e for e in events if "done" in e)["conversation_id"]
    assert titler.get("/api/conversations").json()["conversations"][0]["title"] == "Kestrel Brazil exposure?"
    hostile = "report\u202efdp.exe\x00\x07 \u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069 q\x1b[31m\x85\x9f"
    kept = "reportfdp.exe q[31m"
    assert titler.patch(f"/api/conversations/{cid}", json={"title": hostile}).json()["title"] == kept
    assert titler.get("/api/conversations").json()["conversations"][0]["title"] == kept
    stub = gateway_pb2_grpc.GatewayStub(channel(stack.address("gateway"), bearer(key)))
    renamed = stub.RenameConversation(gateway_pb2.RenameConversationRequest(conversation_id=cid, title=hostile), timeout=10)
    assert renamed.title == kept
    listed = stub.ListConversations(gateway_pb2.ListConversationsRequest(), timeout=10).conversations
    assert [c.title for c in listed] == [kept]


def test_another_tenant_gets_404s_like_unknown_ids(stack: Stack, analyst: Client, outsider: Client,
                                                   asked: list[str]) -> None:
    cid = asked[0]
    citation = analyst.get(f"/api/conversations/{cid}").json()["messages"][1]["citations"][0]
    chunk_path = "/api/chunks/" + quote(citation["chunk_id"], safe="")
    probes = [("get", f"/api/conversations/{cid}", None), ("patch", f"/api/conversations/{cid}", {"title": "mine"}),
              ("delete", f"/api/conversations/{cid}", None), ("get", chunk_path, None)]
    for method, path, body in probes:
        theirs = _error(outsider.request(method, path, json=body), 404)
        unknown = _error(outsider.request(method, path.replace(path.rsplit("/", 1)[1], "unknown-id"), json=body), 404)
        assert theirs["code"] == unknown["code"] == "NOT_FOUND"
        assert theirs["message"].replace(path.rsplit("/", 1)[1], "X").split("'")[0] == \
            unknown["message"].split("'")[0], (theirs, unknown)
        _error(Client(stack, None).request(method, path, json=body), 401)
    assert outsider.get("/api/conversations").json()["conversations"] == []
    assert outsider.get("/api/documents").json() == {"documents": [], "next_offset": None}
    assert outsider.get("/api/collections").json() == {"collections": []}
    assert outsider.get("/api/funds").json() == {"funds": []}
    assert analyst.get(f"/api/conversations/{cid}").status_code == 200, "still the analyst's"


def test_documents_list_per_collection_with_type_date_chunks_and_summary_flag(stack: Stack, analyst: Client) -> None:
    stack.call(stack.app("gateway").memory.idle())  # the conversation memory written after earlier answers is listed too
    notes = analyst.get("/api/documents", params={"collection": "meeting_notes", "limit": 200}).json()
    assert notes["documents"] and {d["collection"] for d in notes["documents"]} == {"meeting_notes"}
    line = notes["documents"][0]
    assert line["title"] and line["date"] and line["chunk_count"] >= 1 and line["updated_at"]
    assert isinstance(line["summarized"], bool) and "type" in line
    everything = analyst.get("/api/documents", params={"limit": 200}).json()["documents"]
    assert len({d["collection"] for d in everything}) > 1
    page = analyst.get("/api/documents", params={"limit": 2, "offset": 1}).json()
    assert [d["doc_id"] for d in page["documents"]] == [d["doc_id"] for d in everything[1:3]]
    assert page["next_offset"] == 3
    for params, field in (({"collection": "../etc"}, "collection"), ({"limit": 500}, "limit"),
                          ({"offset": "x"}, "offset")):
        assert field in _error(analyst.get("/api/documents", params=params), 400)["message"]
    _error(Client(stack, None).get("/api/documents"), 401)


def test_a_cited_chunk_opens_with_its_context_and_document(analyst: Client, asked: list[str]) -> None:
    citation = analyst.get(f"/api/conversations/{asked[0]}").json()["messages"][1]["citations"][0]
    chunk = analyst.get("/api/chunks/" + quote(citation["chunk_id"], safe="")).json()
    assert chunk["chunk_id"] == citation["chunk_id"] and chunk["doc_id"] == citation["doc_id"]
    assert citation["snippet"][:60] in chunk["text"] or chunk["text"][:60] in citation["snippet"]
    assert chunk["document"]["doc_id"] == citation["doc_id"] and chunk["document"]["title"]
    assert chunk["date"] == citation["date"] and "Kestrel" in chunk["fund"] + chunk["text"]
    assert _error(analyst.get("/api/chunks/" + "c" * 1025), 400)["message"].startswith("chunk_id")
    assert _error(analyst.get("/api/chunks/%20"), 400)["message"].startswith("chunk_id")


def test_a_child_chunk_brings_its_parents_text(stack: Stack) -> None:
    admin = Client(stack, stack.key("browse-books", "admin", "admin"))
    paragraph = " ".join(f"Sentence {{}}.{j} about the harbour." for j in range(60))
    book = "\n\n".join(f"Chapter {i}\n\n{paragraph.format(*[i] * 60)}\n\n{paragraph.format(*[i] * 60)}"
                       for i in range(1, 6))  # long form (over 8,000 characters, headings): BOOK chunking
    events = sse(stack.http_url + "/api/documents", {"collection": "documents", "documents": [
        {"doc_id": "harbour-book", "text": book, "title": "Harbour book"}]}, dict(admin.headers))
    assert next(e for e in events if "done" in e)["documents"] == 1
    listed = admin.get("/api/documents").json()["documents"]
    assert [(d["doc_id"], d["title"], d["type"]) for d in listed] == [("harbour-book", "Harbour book", "BOOK")]
    stub = retriever_pb2_grpc.RetrieverStub(channel(stack.address("retriever"),
                                                    stack.service_metadata("browse-books", "admin")))
    hits = stub.Search(retriever_pb2.SearchRequest(query="Sentence 2.30 harbour", collections=["documents"], top_k=5),
                       timeout=30).hits
    child = next(h.chunk for h in hits if h.chunk.parent_chunk_id)
    chunk = admin.get("/api/chunks/" + quote(child.chunk_id, safe="")).json()
    assert chunk["parent_text"] and len(chunk["parent_text"]) > len(chunk["text"])


def test_collections_and_funds_for_pickers(analyst: Client) -> None:
    collections = {c["name"]: c for c in analyst.get("/api/collections").json()["collections"]}
    assert collections["meeting_notes"]["data_source"] == "Meeting Notes"
    assert collections["meeting_notes"]["documents"] > 0 and collections["meeting_notes"]["chunks"] > 0
    funds = analyst.get("/api/funds").json()["funds"]
    assert any("Kestrel" in f for f in funds) and funds == sorted(funds)


def test_meta_offers_only_the_configured_models(analyst: Client, gemini_gateway) -> None:
    meta = analyst.get("/api/meta").json()
    assert "extractive" in meta["models"] and "gemini-2.5-pro" not in meta["models"]
    url, _, _ = gemini_gateway
    with_gemini = httpx.get(url + "/api/meta", headers=dict(analyst.headers), timeout=30).json()
    assert {"extractive", "gemini-2.5-flash", "gemini-2.5-pro"} <= set(with_gemini["models"])
    assert "openai" not in with_gemini["models"]


def test_deleting_a_conversation_removes_it_from_the_list(analyst: Client, asked: list[str]) -> None:
    assert analyst.delete(f"/api/conversations/{asked[1]}").json() == {"deleted": True}
    assert asked[1] not in [c["conversation_id"] for c in analyst.get("/api/conversations").json()["conversations"]]
    _error(analyst.get(f"/api/conversations/{asked[1]}"), 404)


@pytest.mark.parametrize("call,field", [
    (lambda s: s.ListDocuments(retriever_pb2.ListDocumentsRequest(collection="../x"), timeout=10), "collection"),
    (lambda s: s.ListDocuments(retriever_pb2.ListDocumentsRequest(limit=201), timeout=10), "limit"),
    (lambda s: s.ListDocuments(retriever_pb2.ListDocumentsRequest(offset=-1), timeout=10), "offset"),
    (lambda s: s.GetChunk(retriever_pb2.GetChunkRequest(chunk_id=""), timeout=10), "chunk_id"),
    (lambda s: s.GetChunk(retriever_pb2.GetChunkRequest(chunk_id="\u00e9" * 1025), timeout=10), "chunk_id"),
])
def test_the_retriever_rpcs_refuse_bad_input_naming_the_field(stack: Stack, call, field: str) -> None:
    stub = retriever_pb2_grpc.RetrieverStub(channel(stack.address("retriever"), stack.metadata))
    with pytest.raises(grpc.RpcError) as caught:
        call(stub)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and caught.value.details().startswith(field)


def test_the_retriever_rpcs_are_per_tenant(stack: Stack) -> None:
    member = retriever_pb2_grpc.RetrieverStub(channel(stack.address("retriever"),
                                                      bearer(stack.key(DEMO, "rpc", "admin"))))
    other = retriever_pb2_grpc.RetrieverStub(channel(stack.address("retriever"),
                                                     bearer(stack.key("rpc-other", "x", "admin"))))
    mine = member.ListDocuments(retriever_pb2.ListDocumentsRequest(collection="meeting_notes", limit=1), timeout=10)
    entry = mine.documents[0]
    assert entry.document.tenant == DEMO and not entry.document.sections and not entry.document.summary
    assert not other.ListDocuments(retriever_pb2.ListDocumentsRequest(), timeout=10).documents
    chunk_id = member.Search(retriever_pb2.SearchRequest(query="Kestrel Brazil", top_k=1), timeout=30).hits[0].chunk.chunk_id
    assert member.GetChunk(retriever_pb2.GetChunkRequest(chunk_id=chunk_id), timeout=10).chunk.chunk_id == chunk_id
    with pytest.raises(grpc.RpcError) as caught:
        other.GetChunk(retriever_pb2.GetChunkRequest(chunk_id=chunk_id), timeout=10)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    own = member.ListCollections(retriever_pb2.ListCollectionsRequest(own_tenant=True), timeout=10).collections
    assert "meeting_notes" in {c.name for c in own}
    assert not other.ListCollections(retriever_pb2.ListCollectionsRequest(own_tenant=True), timeout=10).collections
    with pytest.raises(grpc.RpcError) as caught:  # every tenant's counts: the platform's only
        member.ListCollections(retriever_pb2.ListCollectionsRequest(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
