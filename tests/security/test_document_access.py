"""Inside a tenant, a document is read only by those its access names: tried as colleagues would,
through the real retriever gRPC server on both search backends, with the calls the gateway relays
(the service credential acting for a user, with the user's role and groups).

`alice` (a member) keeps a private document; `bob`, a colleague, tries every read path to find,
cite, open, list, count or learn of it; `carol` is in group `risk`; `boss` is the tenant's admin,
who manages every document but reads only what is shared with it."""
from __future__ import annotations

import re

from urllib.parse import quote

import grpc
import httpx
import pytest

from ragmesh.identity import Identity
from ragmesh.identity.authenticator import service_token
from ragmesh.text import sha256
from ragmesh.v1 import common_pb2, retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel, headers
from tests.conftest import answer_of, one, sse
from tests.stack import Stack

TENANT = "acl-t"  # one per search backend (both retrievers share the stack's store): Callers.tenant
SECRET = "Heron salary bands: the zebra-quokka grade pays 42 thousand."
DOC = "alice:heron"
DOCS = "documents"


class Callers:
    def __init__(self, stack: Stack, address: str, tenant: str) -> None:
        self.stack, self.address, self.tenant = stack, address, tenant

    def as_(self, user: str, role: str = "member", groups: tuple[str, ...] = ()) -> retriever_pb2_grpc.RetrieverStub:
        who = Identity(self.tenant, user, role, "service_token", groups)
        metadata = (("authorization", f"Bearer {service_token(self.stack.settings)}"), *who.headers())
        return retriever_pb2_grpc.RetrieverStub(channel(self.address, metadata))

    def platform(self) -> retriever_pb2_grpc.RetrieverStub:
        return retriever_pb2_grpc.RetrieverStub(channel(self.address, bearer(service_token(self.stack.settings),
                                                                             self.tenant)))


def _ingest(stub: retriever_pb2_grpc.RetrieverStub, doc_id: str, text: str, collection: str = DOCS,
            access: common_pb2.Access | None = None, **metadata: str) -> list[retriever_pb2.IngestProgress]:
    doc = retriever_pb2.Document(doc_id=doc_id, collection=collection, text=text, metadata=metadata, summarize=False)
    if access is not None:
        doc.access.CopyFrom(access)
    return list(stub.Ingest(iter([doc])))


def _search(stub: retriever_pb2_grpc.RetrieverStub, query: str = "zebra-quokka grade pays",
            **kw) -> retriever_pb2.SearchResponse:
    return stub.Search(retriever_pb2.SearchRequest(query=query, collections=[DOCS], top_k=10, **kw))


def _texts(response: retriever_pb2.SearchResponse) -> str:
    return " ".join(h.chunk.text + h.parent_text for h in response.hits)


def _code(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code(), re.sub(r"'[^']*'", "ID", caught.value.details())


@pytest.fixture(scope="module")
def callers(stack: Stack, backend: tuple[str, str]) -> Callers:
    c = Callers(stack, backend[1], f"{TENANT}-{backend[0]}")
    progress = _ingest(c.as_("alice"), "heron", SECRET, project="heron-private")
    assert [p.stage for p in progress][-1] == retriever_pb2.INDEXED, progress
    assert progress[-1].doc_id == DOC  # a member's ids live under its name
    return c


def _chunk_id(callers: Callers) -> str:
    hits = _search(callers.as_("alice")).hits
    assert hits and SECRET in hits[0].chunk.text
    return hits[0].chunk.chunk_id


def test_a_colleague_cannot_find_open_list_count_or_learn_of_a_private_document(callers: Callers) -> None:
    alice, bob = callers.as_("alice"), callers.as_("bob")
    chunk_id = _chunk_id(callers)
    assert SECRET not in _texts(_search(bob))
    # counts: the filtered search admits nothing of it, as for a document that does not exist
    only = retriever_pb2.SearchRequest(query="zebra-quokka", collections=[DOCS], top_k=5)
    only.filter.doc_ids.values.append(DOC)
    assert bob.Search(only).candidate_count == 0 and alice.Search(only).candidate_count > 0
    unknown = chunk_id[:-1] + "9"  # as long as the real one: ids are shown cut to 40 characters
    assert _code(lambda: bob.GetChunk(retriever_pb2.GetChunkRequest(chunk_id=chunk_id))) == \
        _code(lambda: bob.GetChunk(retriever_pb2.GetChunkRequest(chunk_id=unknown)))
    assert _code(lambda: bob.GetDocument(retriever_pb2.GetDocumentRequest(collection=DOCS, doc_id=DOC))) == \
        _code(lambda: bob.GetDocument(retriever_pb2.GetDocumentRequest(collection=DOCS, doc_id=DOC[:-1] + "x")))
    assert DOC not in [e.document.doc_id for e in bob.ListDocuments(retriever_pb2.ListDocumentsRequest(limit=200)).documents]
    assert "heron-private" not in bob.FieldValues(retriever_pb2.FieldValuesRequest(field="project")).values
    assert "heron-private" in alice.FieldValues(retriever_pb2.FieldValuesRequest(field="project")).values
    code, message = _code(lambda: bob.FieldValues(retriever_pb2.FieldValuesRequest(field="__access__")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "reserved" in message
    assert bob.CheckChunks(retriever_pb2.CheckChunksRequest(
        chunks=[retriever_pb2.ChunkRef(chunk_id=chunk_id, text_sha256=sha256(SECRET))])).current == [False]
    assert alice.CheckChunks(retriever_pb2.CheckChunksRequest(
        chunks=[retriever_pb2.ChunkRef(chunk_id=chunk_id, text_sha256=sha256(SECRET))])).current == [True]

    def counts(stub) -> dict[str, tuple[int, int, int]]:
        infos = stub.ListCollections(retriever_pb2.ListCollectionsRequest(own_tenant=True)).collections
        return {i.name: (i.documents, i.chunks, i.indexed_chunks) for i in infos}

    assert counts(bob).get(DOCS, (0, 0, 0)) == (0, 0, 0)
    assert counts(alice)[DOCS][0] >= 1
    # deleting it is a no-op for the colleague, as for an unknown id
    assert bob.Delete(retriever_pb2.DeleteRequest(collection=DOCS, doc_ids=[DOC])).documents == 0
    assert SECRET in _texts(_search(alice))


def test_a_share_admits_and_its_revocation_takes_effect_at_the_next_search(callers: Callers) -> None:
    alice, bob, carol = callers.as_("alice"), callers.as_("bob"), callers.as_("carol", groups=("risk",))
    dave = callers.as_("dave", groups=("ops",))
    share = retriever_pb2.SetDocumentAccessRequest(collection=DOCS, doc_id=DOC,
                                                   access=common_pb2.Access(users=["bob"], groups=["risk"]))
    info = alice.SetDocumentAccess(share)
    assert (list(info.access.users), list(info.access.groups), info.access.owner) == (["bob"], ["risk"], "alice")
    assert "__access__" not in info.metadata
    assert SECRET in _texts(_search(bob)) and SECRET in _texts(_search(carol))
    assert SECRET not in _texts(_search(dave))
    chunk_id = _chunk_id(callers)
    assert bob.GetChunk(retriever_pb2.GetChunkRequest(chunk_id=chunk_id)).chunk.text == SECRET
    # bob reads it but does not own it: he may neither re-share nor delete it
    code, _ = _code(lambda: bob.SetDocumentAccess(share))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    code, _ = _code(lambda: bob.Delete(retriever_pb2.DeleteRequest(collection=DOCS, doc_ids=[DOC])))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    alice.SetDocumentAccess(retriever_pb2.SetDocumentAccessRequest(collection=DOCS, doc_id=DOC,
                                                                   access=common_pb2.Access()))
    assert SECRET not in _texts(_search(bob)) and SECRET not in _texts(_search(carol))
    assert SECRET in _texts(_search(alice))


def test_only_admins_open_a_document_to_the_tenant_and_members_upload_only_where_allowed(callers: Callers) -> None:
    alice, boss, bob = callers.as_("alice"), callers.as_("boss", "admin"), callers.as_("bob")
    everyone = common_pb2.Access(tenant=True)
    code, message = _code(lambda: alice.SetDocumentAccess(retriever_pb2.SetDocumentAccessRequest(
        collection=DOCS, doc_id=DOC, access=everyone)))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "admin" in message
    code, _ = _code(lambda: alice.SetDocumentAccess(retriever_pb2.SetDocumentAccessRequest(
        collection=DOCS, doc_id=DOC, access=common_pb2.Access(owner="bob"))))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    code, message = _code(lambda: _ingest(alice, "open", "a member's note for everyone", access=everyone))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "admin" in message
    code, message = _code(lambda: _ingest(alice, "note", "a member's meeting note", collection="acl_meeting_notes"))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "admins only" in message
    # the admin manages what it cannot read: it lists it, does not find it, and may open it to all
    listed = boss.ListDocuments(retriever_pb2.ListDocumentsRequest(collection=DOCS, limit=200)).documents
    assert DOC in [e.document.doc_id for e in listed]
    assert SECRET not in _texts(_search(boss))
    boss.SetDocumentAccess(retriever_pb2.SetDocumentAccessRequest(collection=DOCS, doc_id=DOC, access=everyone))
    assert SECRET in _texts(_search(bob))
    boss.SetDocumentAccess(retriever_pb2.SetDocumentAccessRequest(collection=DOCS, doc_id=DOC,
                                                                  access=common_pb2.Access()))
    assert SECRET not in _texts(_search(bob))


def test_a_members_ids_are_its_own_and_nobody_else_replaces_its_document(callers: Callers) -> None:
    bob = callers.as_("bob")
    mine = _ingest(bob, "heron", "Bob's own heron memo about kingfishers")
    assert mine[-1].stage == retriever_pb2.INDEXED and mine[-1].doc_id == "bob:heron"
    again = _ingest(bob, DOC, "Bob tries to overwrite alice's memo")  # lands under bob's own name
    assert again[-1].doc_id == f"bob:{DOC}"
    assert SECRET in _texts(_search(callers.as_("alice")))


def test_collection_rules_are_the_admins_and_open_a_collection_to_members(callers: Callers) -> None:
    alice, boss = callers.as_("alice"), callers.as_("boss", "admin")
    rule = retriever_pb2.CollectionAccess(collection="acl_drafts", members_upload=True,
                                          default_access=common_pb2.Access(groups=["risk"]))
    code, _ = _code(lambda: alice.SetCollectionAccess(rule))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    boss.SetCollectionAccess(rule)
    done = _ingest(alice, "draft", "Draft of the kestrel-wombat hedging memo", collection="acl_drafts")
    assert done[-1].stage == retriever_pb2.INDEXED, done
    found = callers.as_("carol", groups=("risk",)).Search(retriever_pb2.SearchRequest(
        query="kestrel-wombat hedging", collections=["acl_drafts"], top_k=3))
    assert found.hits and found.hits[0].chunk.doc_id == "alice:draft"
    assert not callers.as_("bob").Search(retriever_pb2.SearchRequest(
        query="kestrel-wombat hedging", collections=["acl_drafts"], top_k=3)).hits
    infos = {i.name: i for i in boss.ListCollections(retriever_pb2.ListCollectionsRequest(own_tenant=True)).collections}
    assert infos["acl_drafts"].members_upload and list(infos["acl_drafts"].default_access.groups) == ["risk"]


def test_a_document_written_before_access_lists_stays_the_tenants(callers: Callers) -> None:
    """Upgrade: chunks stored without an access value (as every older version wrote them) are read by
    every user of the tenant, with nothing embedded again."""
    legacy = retriever_pb2.UpsertRequest(
        chunk=common_pb2.Chunk(chunk_id="legacy#0", doc_id="legacy", collection=DOCS,
                               text="Legacy handbook: the ocelot-tapir policy applies to everyone."),
        vector=[1.0] + [0.0] * 383)
    assert callers.platform().Upsert(iter([legacy])).documents == 1
    found = _search(callers.as_("bob"), "ocelot-tapir policy")
    assert any("ocelot-tapir" in h.chunk.text for h in found.hits)


# -- the same through the gateway's HTTP edge, on each search backend --------------------------------

PRIVATE = "Osprey review: the lynx-harrier team's bonus pool is 23 percent this year."


def test_through_the_gateway_a_colleague_finds_a_share_only_while_it_lasts(stack: Stack, backend: tuple[str, str],
                                                                           ask_url: str) -> None:
    """HTTP as the web page speaks it, on a gateway whose retriever runs each search backend: the
    colleague's answers, citations, citation panel, documents list and fund picker never show the
    private document; a share opens it; after the revoke, the colleague's follow-up in the same
    conversation (which would reuse the cached scope) does not quote it."""
    tenant = f"{TENANT}-http-{backend[0]}"
    alice, bob = (headers(stack.key(tenant, user)) for user in ("alice", "bob"))
    uploaded = sse(ask_url + "/api/documents", {"collection": DOCS, "documents": [
        {"doc_id": "osprey", "text": PRIVATE, "metadata": {"fund_name": "Osprey Capital Partners"}}]}, alice)
    assert uploaded[-2]["stage"] == "INDEXED" and uploaded[-2]["doc_id"] == "alice:osprey", uploaded
    question = {"question": "What is the lynx-harrier team's bonus pool?", "data_sources": ["Documents"]}

    def ask(who: dict, conversation: str | None = None) -> tuple[str, list[dict], str]:
        events = sse(ask_url + "/api/chat/ask/stream", {**question, "conversation_id": conversation}, who)
        strategies.append(one(events, "strategy"))
        return answer_of(events), one(events, "citations"), next(e["conversation_id"] for e in events
                                                                 if "conversation_id" in e)

    strategies: list[dict] = []

    text, cited, _ = ask(alice)
    assert "23 percent" in text and [c for c in cited if c["doc_id"] == "alice:osprey"]
    chunk_id = next(c["chunk_id"] for c in cited if c["doc_id"] == "alice:osprey")
    text, cited, _ = ask(bob)
    assert "23 percent" not in text and not [c for c in cited if c["doc_id"] == "alice:osprey"]
    panel = httpx.get(f"{ask_url}/api/chunks/{quote(chunk_id, safe='')}", headers=bob)
    unknown = httpx.get(f"{ask_url}/api/chunks/{quote(chunk_id[:-1] + '9', safe='')}", headers=bob)
    assert panel.status_code == unknown.status_code == 404
    listed = httpx.get(f"{ask_url}/api/documents", params={"collection": DOCS}, headers=bob).json()["documents"]
    assert "alice:osprey" not in [d["doc_id"] for d in listed]
    assert "Osprey Capital Partners" not in httpx.get(f"{ask_url}/api/meta", headers=bob).json()["funds"]

    path = f"{ask_url}/api/documents/{DOCS}/{quote('alice:osprey')}/access"
    assert httpx.put(path, json={"users": ["bob"]}, headers=alice).status_code == 200
    text, cited, conversation = ask(bob)
    assert "23 percent" in text and [c for c in cited if c["doc_id"] == "alice:osprey"]
    assert httpx.put(path, json={"users": []}, headers=alice).status_code == 200
    text, cited, _ = ask(bob, conversation)
    assert "23 percent" not in text and not [c for c in cited if c["doc_id"] == "alice:osprey"]
    # Searched again, never the cached scope: the revoke changed its sources, or the fund the answer spoke of
    # (carried from the conversation) is no longer one bob may read, which changes the filters first.
    reason = strategies[-1]["reason"]
    assert strategies[-1]["retrieval"] == "RAG_NEW_QUERY" and (
        "cached sources changed" in reason or "carried from the conversation: funds Osprey" in reason), reason


def test_the_new_methods_refuse_no_credential_another_tenant_and_bad_input(callers: Callers) -> None:
    """CheckChunks, SetDocumentAccess and SetCollectionAccess: without a credential UNAUTHENTICATED;
    another tenant's caller learns nothing of this tenant's document; oversized or malformed input is
    INVALID_ARGUMENT naming the field."""
    chunk_id = _chunk_id(callers)
    anonymous = retriever_pb2_grpc.RetrieverStub(channel(callers.address, ()))
    check = retriever_pb2.CheckChunksRequest(chunks=[retriever_pb2.ChunkRef(chunk_id=chunk_id,
                                                                            text_sha256=sha256(SECRET))])
    assert _code(lambda: anonymous.CheckChunks(check))[0] == grpc.StatusCode.UNAUTHENTICATED
    other = Callers(callers.stack, callers.address, callers.tenant + "-other").as_("alice", "admin")
    assert other.CheckChunks(check).current == [False]
    assert _code(lambda: other.SetDocumentAccess(retriever_pb2.SetDocumentAccessRequest(
        collection=DOCS, doc_id=DOC, access=common_pb2.Access())))[0] == grpc.StatusCode.NOT_FOUND
    alice = callers.as_("alice")
    too_many = retriever_pb2.CheckChunksRequest(chunks=[retriever_pb2.ChunkRef(chunk_id=f"c{i}")
                                                        for i in range(1_001)])
    code, message = _code(lambda: alice.CheckChunks(too_many))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("chunks")
    code, message = _code(lambda: alice.SetDocumentAccess(retriever_pb2.SetDocumentAccessRequest(
        collection=DOCS, doc_id=DOC, access=common_pb2.Access(users=["not a name"]))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("access.users[0]")
    code, message = _code(lambda: callers.as_("boss", "admin").SetCollectionAccess(
        retriever_pb2.CollectionAccess(collection="bad name!", default_access=common_pb2.Access())))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("collection")
