"""Tenant isolation, tried as an attacker would, through every entry point: the HTTP bridge, Gateway
gRPC and the internal services. Two tenants: `acme` (the victim, with two members, alice and bob,
and an admin) and `umbra` (the attacker: mallory, a member, and its admin). Every probe uses ids
learned from the victim. A probe passes when it leaks nothing, writes nothing into the victim's
tenant, and is refused with 401/403/404 (UNAUTHENTICATED / PERMISSION_DENIED / NOT_FOUND) in words
that say no more than an unknown id would."""
from __future__ import annotations

import re
import time
from collections.abc import Iterator

import grpc
import httpx
import pytest

from ragmesh.serving import ServiceHost
from ragmesh.store.sqlite import SqliteStore
from ragmesh.v1 import (
    common_pb2,
    embedder_pb2,
    embedder_pb2_grpc,
    gateway_pb2,
    gateway_pb2_grpc,
    generator_pb2,
    generator_pb2_grpc,
    retriever_pb2,
    retriever_pb2_grpc,
)
from tests.auth import bearer, channel, headers
from tests.conftest import answer_of, one, sse
from tests.stack import Stack

SECRET = "Nightingale"
SECRET_TEXT = ("Project Nightingale: Acme agreed to acquire Lark Robotics for 42 million dollars. "
               "The Acme Secret Fund will hold the position. Keep Nightingale confidential.")
ALICE_PHRASE = "zebra-periwinkle"  # only in alice's question, so memory leaks are easy to see


class World:
    """Keys, and the ids the attacker learned, made once for the module, and where to call: the
    stack's gateway and retriever, or a gateway on a retriever over another search backend."""

    def __init__(self, stack: Stack, gateway: ServiceHost | None = None, retriever: str = "", suffix: str = "") -> None:
        """`suffix`: after both tenants' names, so a second world starts from nothing of the first's."""
        self.stack = stack
        self.gateway_host = gateway or stack.hosts["gateway"]
        self.retriever_address = retriever or stack.address("retriever")
        self.acme, self.umbra = f"acme{suffix}", f"umbra{suffix}"
        self.acme_admin = stack.key(self.acme, "acme-admin", "admin")
        self.alice = stack.key(self.acme, "alice")
        self.bob = stack.key(self.acme, "bob")
        self.umbra_admin = stack.key(self.umbra, "umbra-admin", "admin")
        self.mallory = stack.key(self.umbra, "mallory")
        self.url = f"http://{stack.settings.host}:{self.gateway_host.app.http_port}"

    def post(self, key: str | None, path: str, body: dict, **kw) -> httpx.Response:
        return httpx.post(self.url + path, json=body, headers=headers(key) if key else {}, timeout=60, **kw)

    def get(self, key: str | None, path: str) -> httpx.Response:
        return httpx.get(self.url + path, headers=headers(key) if key else {}, timeout=30)

    def delete(self, key: str | None, path: str) -> httpx.Response:
        return httpx.delete(self.url + path, headers=headers(key) if key else {}, timeout=30)

    def gateway(self, key: str) -> gateway_pb2_grpc.GatewayStub:
        return gateway_pb2_grpc.GatewayStub(channel(self.gateway_host.address, bearer(key)))

    def retriever(self, key: str) -> retriever_pb2_grpc.RetrieverStub:
        return retriever_pb2_grpc.RetrieverStub(channel(self.retriever_address, bearer(key)))

    def store(self) -> SqliteStore:
        return SqliteStore(self.stack.settings.sqlite_path)

    def memory_written(self) -> None:
        """Waits until the gateway's conversation memory has embedded the messages asked so far."""
        self.stack.call(self.gateway_host.app.memory.idle())


@pytest.fixture(scope="module")
def world(stack: Stack) -> World:
    return _populated(World(stack))


@pytest.fixture(scope="module")
def searched(world: World, stack: Stack, backend: tuple[str, str]) -> Iterator[World]:
    """The world on each search backend, for the cases a search backend answers (the rest run on
    memory only): the stack's own on memory; on milvus a gateway on the milvus-lite retriever of
    the `backend` fixture, populated the same way with tenants of its own."""
    name, address = backend
    if name == "memory":
        yield world
        return
    gateway = stack.start_variant("gateway", retriever_addr=address)
    yield _populated(World(stack, gateway, address, "-milvus"))
    stack.extra.remove(gateway)
    stack.call(gateway.stop())


def _populated(w: World) -> World:
    # acme's admins open `documents` to the whole tenant (members' uploads are their own by default)
    w.retriever(w.acme_admin).SetCollectionAccess(retriever_pb2.CollectionAccess(
        collection="documents", members_upload=True, default_access=common_pb2.Access(tenant=True)))
    events = sse(w.url + "/api/documents", {"collection": "documents", "documents": [
        {"doc_id": "nightingale", "text": SECRET_TEXT, "metadata": {"fund_name": "Acme Secret Fund"}}]},
        headers(w.acme_admin))
    assert _done(events)["documents"] == 1, events
    # alice talks about it, with the memory source on, and corrects an answer
    first = sse(w.url + "/api/chat/ask/stream", {"question": f"What is Project Nightingale? {ALICE_PHRASE}",
                                                  "data_sources": ["Documents"]}, headers(w.alice))
    done = _done(first)
    w.alice_conv, w.alice_answer = done["conversation_id"], done["message_id"]
    assert SECRET in answer_of(first), "alice must see her own tenant's document"
    reply = w.post(w.alice, "/api/corrections", {"conversation_id": w.alice_conv, "message_id": w.alice_answer,
                                                 "correction": "The price was 41 million."})
    assert reply.status_code == 200, reply.text
    w.memory_written()  # alice's messages are in the conversation memory
    # bob, same tenant, has a conversation too
    w.bob_conv = _done(sse(w.url + "/api/chat/ask/stream", {"question": "What is Project Nightingale?",
                                                          "data_sources": ["Documents"]}, headers(w.bob)),
                     )["conversation_id"]
    return w


def _done(events: list[dict]) -> dict:
    done = [e for e in events if e.get("done")]
    assert len(done) == 1, events
    return done[0]


def _refused(reply: httpx.Response, status: int) -> None:
    assert reply.status_code == status, (reply.status_code, reply.text)
    body = reply.text
    assert SECRET not in body and ALICE_PHRASE not in body and "42 million" not in body, body


def _rpc_refused(call, code: grpc.StatusCode) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        result = call()
        if hasattr(result, "__iter__") and not isinstance(result, (str, bytes)):
            list(result)
    assert info.value.code() == code, (info.value.code(), info.value.details())
    assert SECRET not in (info.value.details() or "")
    return info.value


def _messages(w: World, conversation_id: str) -> list:
    store = w.store()
    try:
        return store.messages(conversation_id)
    finally:
        store.close()


# -- credentials ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path,method", [("/api/meta", "GET"), ("/api/conversations", "GET"),
                                         ("/api/chat/ask", "POST"), ("/api/chat/ask/stream", "POST"),
                                         ("/api/chat/stop", "POST"), ("/api/corrections", "POST"),
                                         ("/api/documents", "POST"), ("/api/conversations/x", "DELETE"),
                                         ("/api/documents/documents/nightingale", "GET"),
                                         ("/api/documents", "GET"), ("/api/conversations/x", "PATCH"),
                                         ("/api/chunks/demo%2Fdocuments%2Fx%230", "GET"),
                                         ("/api/collections", "GET"), ("/api/funds", "GET"),
                                         ("/api/transcripts", "POST")])
@pytest.mark.parametrize("credential", [None, "Bearer", "Bearer rmk_0000000000000000_" + "A" * 43,
                                        "Basic YWxhZGRpbjpvcGVuc2VzYW1l", "Bearer not.a.jwt"])
def test_every_api_route_refuses_calls_without_a_valid_credential(world: World, path: str, method: str,
                                                                   credential: str | None) -> None:
    sent = {"authorization": credential} if credential else {}
    reply = httpx.request(method, world.url + path, headers=sent, json={"question": "x", "conversation_id": "x",
                                                                         "correction": "x"}, timeout=30)
    assert reply.status_code == 401, (reply.status_code, reply.text)
    assert reply.headers["www-authenticate"] == "Bearer"
    assert reply.json()["error"]["code"] == "UNAUTHENTICATED"


def test_health_stays_open(world: World) -> None:
    assert httpx.get(world.url + "/healthz").status_code == 200
    health = grpc.insecure_channel(world.stack.address("retriever"))
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    assert health_pb2_grpc.HealthStub(health).Check(health_pb2.HealthCheckRequest()).status == \
        health_pb2.HealthCheckResponse.SERVING


def test_a_revoked_or_expired_key_is_refused_everywhere(world: World, stack: Stack) -> None:
    key = stack.key("acme", "carol")
    assert world.get(key, "/api/meta").status_code == 200
    store = world.store()
    try:
        assert store.revoke_api_key(key.split("_")[1])
    finally:
        store.close()
    _refused(world.get(key, "/api/meta"), 401)
    _rpc_refused(lambda: world.gateway(key).ListConversations(gateway_pb2.ListConversationsRequest()),
                 grpc.StatusCode.UNAUTHENTICATED)
    expired = stack.key("acme", "dave", "admin", expires_days=1e-9)
    time.sleep(0.01)
    _refused(world.get(expired, "/api/meta"), 401)
    _rpc_refused(lambda: world.retriever(expired).Search(retriever_pb2.SearchRequest(query="x")),
                 grpc.StatusCode.UNAUTHENTICATED)


def test_a_member_key_on_an_admin_route_is_refused(world: World) -> None:
    """A member reads the tenant's document but may not delete it, nor change a collection's rules."""
    reply = world.delete(world.alice, "/api/documents/documents/nightingale")
    _refused(reply, 403)
    assert reply.json()["error"]["code"] == "PERMISSION_DENIED"
    _refused(httpx.put(world.url + "/api/collections/documents/access", headers=headers(world.alice), timeout=30,
                       json={"members_upload": False, "default_access": {"tenant": True}}), 403)
    _rpc_refused(lambda: world.gateway(world.mallory).SetCollectionAccess(retriever_pb2.CollectionAccess(
        collection="documents", default_access=common_pb2.Access(tenant=True))), grpc.StatusCode.PERMISSION_DENIED)


# -- the HTTP bridge --------------------------------------------------------------------------------

def test_a_tenant_or_user_named_in_the_body_is_not_obeyed(world: World) -> None:
    _refused(world.post(world.mallory, "/api/chat/ask", {"question": "What is Project Nightingale?",
                                                         "tenant": "acme", "data_sources": ["Documents"]}), 403)
    _refused(world.post(world.umbra_admin, "/api/chat/ask", {"question": "What is Project Nightingale?",
                                                             "tenant": "acme", "user_id": "alice"}), 403)
    _refused(world.post(world.mallory, "/api/chat/ask", {"question": "hi", "user_id": "alice"}), 403)
    _refused(world.post(world.bob, "/api/chat/ask", {"question": "hi", "user_id": "alice"}), 403)
    _refused(world.post(world.acme_admin, "/api/chat/ask", {"question": "hi", "user_id": "alice"}), 403)


def test_another_tenants_documents_never_reach_an_answer(searched: World) -> None:
    for key in (searched.mallory, searched.umbra_admin):
        reply = searched.post(key, "/api/chat/ask", {"question": "What is Project Nightingale and its price?",
                                                     "data_sources": ["Documents", "Meeting Notes", "Factsheet"]})
        assert reply.status_code == 200, reply.text
        _refused(reply, 200)
        assert not [c for c in reply.json()["citations"] if c["doc_id"] == "nightingale"]


def test_the_fund_list_is_the_callers_tenants(searched: World) -> None:
    assert "Acme Secret Fund" in searched.get(searched.alice, "/api/meta").json()["funds"]
    meta = searched.get(searched.mallory, "/api/meta").json()
    assert "Acme Secret Fund" not in meta["funds"]
    assert meta["identity"] == {"tenant": searched.umbra, "user": "mallory", "role": "member", "groups": []}
    # a question naming the fund does not tell mallory it exists (no detected fund)
    events = sse(searched.url + "/api/chat/ask/stream", {"question": "What does Acme Secret Fund hold?"},
                 headers(searched.mallory))
    assert "Acme Secret Fund" not in one(events, "strategy")["detected_funds"]


def test_another_users_conversation_cannot_be_read_asked_into_stopped_or_deleted(world: World) -> None:
    before = len(_messages(world, world.alice_conv))
    for key in (world.mallory, world.umbra_admin, world.bob, world.acme_admin):
        _refused(world.get(key, f"/api/conversations/{world.alice_conv}"), 404)
        _refused(world.post(key, "/api/chat/ask", {"question": "Repeat everything we said.",
                                                   "conversation_id": world.alice_conv}), 404)
        _refused(world.post(key, "/api/chat/stop", {"conversation_id": world.alice_conv}), 404)
        _refused(world.delete(key, f"/api/conversations/{world.alice_conv}"), 404)
        listed = world.get(key, "/api/conversations").json()["conversations"]
        assert world.alice_conv not in {c["conversation_id"] for c in listed}
    assert len(_messages(world, world.alice_conv)) == before, "an attacker's turn was written into alice's"
    # not-yours reads exactly like unknown
    mine = world.get(world.mallory, f"/api/conversations/{world.alice_conv}").json()
    unknown = world.get(world.mallory, "/api/conversations/no-such-conversation").json()
    assert mine["error"]["message"].replace(world.alice_conv, "ID") == \
        unknown["error"]["message"].replace("no-such-conversation", "ID")
    # the owner can, and only the owner: the tenant's admin neither (tests/security/test_colleague_chats.py)
    assert world.get(world.alice, f"/api/conversations/{world.alice_conv}").status_code == 200
    assert world.alice_conv in {c["conversation_id"] for c in
                                world.get(world.alice, "/api/conversations").json()["conversations"]}


def test_a_correction_cannot_copy_another_conversations_answer(world: World) -> None:
    store = world.store()
    try:
        mallory_corrections = len(store.corrections("umbra", "mallory"))
    finally:
        store.close()
    stolen = world.post(world.mallory, "/api/corrections", {
        "conversation_id": world.alice_conv, "message_id": world.alice_answer, "correction": "no"})
    bogus = world.post(world.mallory, "/api/corrections", {
        "conversation_id": world.alice_conv, "message_id": "0" * 32, "correction": "no"})
    unknown_conv = world.post(world.mallory, "/api/corrections", {
        "conversation_id": "f" * 32, "message_id": "0" * 32, "correction": "no"})
    for reply in (stolen, bogus, unknown_conv):
        _refused(reply, 404)
    # no oracle: the messages differ only by the ids they quote
    strip = lambda r: re.sub(r"'[^']*'", "ID", r.json()["error"]["message"])  # noqa: E731
    assert strip(stolen) == strip(bogus) == strip(unknown_conv)
    store = world.store()
    try:
        assert len(store.corrections("umbra", "mallory")) == mallory_corrections
    finally:
        store.close()


def test_conversation_memory_is_per_user(searched: World) -> None:
    for key in (searched.mallory, searched.bob, searched.acme_admin):
        reply = searched.post(key, "/api/chat/ask", {"question": f"What did I ask about {ALICE_PHRASE}?",
                                                     "data_sources": ["Conversation memory"]})
        assert reply.status_code == 200, reply.text
        _refused(reply, 200)


def test_documents_of_another_tenant_cannot_be_read_written_or_deleted(searched: World) -> None:
    _refused(searched.get(searched.mallory, "/api/documents/documents/nightingale"), 404)
    _refused(searched.delete(searched.umbra_admin, "/api/documents/documents/nightingale"), 404)
    _refused(searched.post(searched.umbra_admin, "/api/documents", {"collection": "documents", "tenant": searched.acme,
                                                                    "documents": [{"doc_id": "nightingale",
                                                                                   "text": "overwritten"}]}), 403)
    assert searched.get(searched.alice, "/api/documents/documents/nightingale").status_code == 200
    # umbra's own document of the same id lands in umbra, and acme's stays as it was
    events = sse(searched.url + "/api/documents", {"collection": "documents", "documents": [
        {"doc_id": "nightingale", "text": "Umbra's own note about birds."}]}, headers(searched.umbra_admin))
    assert _done(events)["documents"] == 1
    hits = searched.retriever(searched.acme_admin).Search(retriever_pb2.SearchRequest(
        query="Nightingale", collections=["documents"], top_k=5)).hits
    assert hits and all(h.chunk.tenant == searched.acme and "birds" not in h.chunk.text for h in hits)


def test_state_changing_requests_from_another_origin_or_host_are_refused(world: World) -> None:
    files = {"files": ("evil.txt", b"injected text", "text/plain")}
    reply = httpx.post(world.url + "/api/documents", data={"collection": "documents"}, files=files,
                       headers={**headers(world.acme_admin), "origin": "http://evil.example"})
    _refused(reply, 403)
    reply = httpx.post(world.url + "/api/chat/ask", content=b'{"question": "hi"}',
                       headers={**headers(world.alice), "content-type": "text/plain"})
    assert reply.status_code == 415, reply.text
    reply = httpx.get(world.url + "/api/meta", headers={**headers(world.alice), "host": "rebind.evil.example"})
    assert reply.status_code == 400 and "host" in reply.json()["error"]["message"]
    same_origin = httpx.post(world.url + "/api/chat/ask", json={"question": "hello"},
                             headers={**headers(world.alice), "origin": world.url})
    assert same_origin.status_code == 200, same_origin.text


# -- Gateway gRPC -----------------------------------------------------------------------------------

def test_gateway_grpc_checks_the_same(world: World) -> None:
    mallory = world.gateway(world.mallory)
    listed = mallory.ListConversations(gateway_pb2.ListConversationsRequest()).conversations
    assert world.alice_conv not in {c.conversation_id for c in listed}
    _rpc_refused(lambda: mallory.GetConversation(gateway_pb2.GetConversationRequest(
        conversation_id=world.alice_conv)), grpc.StatusCode.NOT_FOUND)
    _rpc_refused(lambda: mallory.DeleteConversation(gateway_pb2.DeleteConversationRequest(
        conversation_id=world.alice_conv, tenant="umbra")), grpc.StatusCode.NOT_FOUND)
    _rpc_refused(lambda: mallory.DeleteConversation(gateway_pb2.DeleteConversationRequest(
        conversation_id=world.alice_conv, tenant="acme")), grpc.StatusCode.PERMISSION_DENIED)
    _rpc_refused(lambda: mallory.Stop(gateway_pb2.StopRequest(conversation_id=world.alice_conv)),
                 grpc.StatusCode.NOT_FOUND)
    _rpc_refused(lambda: mallory.Correct(gateway_pb2.CorrectionRequest(
        conversation_id=world.alice_conv, message_id=world.alice_answer, correction="x")), grpc.StatusCode.NOT_FOUND)
    _rpc_refused(lambda: mallory.Ask(gateway_pb2.AskRequest(question="Repeat it.", conversation_id=world.alice_conv)),
                 grpc.StatusCode.NOT_FOUND)
    _rpc_refused(lambda: mallory.Ask(gateway_pb2.AskRequest(question="What is Nightingale?", tenant="acme")),
                 grpc.StatusCode.PERMISSION_DENIED)
    events = list(mallory.Ask(gateway_pb2.AskRequest(question="What is Project Nightingale?",
                                                     data_sources=["Documents"])))
    text = "".join(e.content for e in events)
    # acme's words only: umbra's own documents may name Nightingale (the planting test writes one)
    assert "Lark Robotics" not in text and "42 million" not in text and events[-1].WhichOneof("event") == "done"
    _rpc_refused(lambda: gateway_pb2_grpc.GatewayStub(grpc.insecure_channel(world.stack.address("gateway"))).Ask(
        gateway_pb2.AskRequest(question="hi")), grpc.StatusCode.UNAUTHENTICATED)
    alice = world.gateway(world.alice)
    assert alice.GetConversation(gateway_pb2.GetConversationRequest(conversation_id=world.alice_conv)).messages


# -- internal services ------------------------------------------------------------------------------

def test_internal_services_refuse_anyone_but_the_gateway_and_operators(world: World) -> None:
    stack = world.stack
    for name, call in (
        ("embedder", lambda ch: embedder_pb2_grpc.EmbedderStub(ch).Embed(embedder_pb2.EmbedRequest(texts=["x"]))),
        ("generator", lambda ch: list(generator_pb2_grpc.GeneratorStub(ch).Generate(
            generator_pb2.GenerateRequest(question="x", prompt="x")))),
        ("generator", lambda ch: generator_pb2_grpc.GeneratorStub(ch).Budget(generator_pb2.ContextBudgetRequest())),
        ("retriever", lambda ch: retriever_pb2_grpc.RetrieverStub(ch).Search(retriever_pb2.SearchRequest(query="x"))),
    ):
        _rpc_refused(lambda: call(grpc.insecure_channel(stack.address(name))), grpc.StatusCode.UNAUTHENTICATED)
        _rpc_refused(lambda: call(channel(stack.address(name), bearer("wrong-token", "acme"))),
                     grpc.StatusCode.UNAUTHENTICATED)
        _rpc_refused(lambda: call(channel(stack.address(name), bearer(world.mallory))),
                     grpc.StatusCode.PERMISSION_DENIED)
        call(channel(stack.address(name), bearer(world.umbra_admin)))  # an operator's admin key works
    # the service token without a tenant fails closed on tenant data
    _rpc_refused(lambda: retriever_pb2_grpc.RetrieverStub(channel(stack.address("retriever"), stack.service_metadata(
        ""))).Search(retriever_pb2.SearchRequest(query="x")), grpc.StatusCode.PERMISSION_DENIED)
    # cross-tenant platform reads need the service credential, not a tenant's admin key
    _rpc_refused(lambda: world.retriever(world.umbra_admin).Stats(retriever_pb2.StatsRequest()),
                 grpc.StatusCode.PERMISSION_DENIED)
    assert retriever_pb2_grpc.RetrieverStub(channel(stack.address("retriever"), stack.service_metadata())).Stats(
        retriever_pb2.StatsRequest()).collections


def test_the_retriever_takes_the_tenant_from_the_credential_never_the_request(searched: World) -> None:
    umbra = searched.retriever(searched.umbra_admin)
    hits = umbra.Search(retriever_pb2.SearchRequest(query="Nightingale acquisition 42 million", top_k=20,
                                                    filter=common_pb2.Filter(tenant=searched.acme))).hits
    assert all(h.chunk.tenant == searched.umbra for h in hits) and SECRET_TEXT not in {h.chunk.text for h in hits}
    assert "Acme Secret Fund" not in umbra.FieldValues(retriever_pb2.FieldValuesRequest(
        field="fund_name", tenant=searched.acme)).values
    assert "alice" not in umbra.FieldValues(retriever_pb2.FieldValuesRequest(
        field="user_id", collections=["conversations"], tenant=searched.acme)).values
    _rpc_refused(lambda: umbra.GetDocument(retriever_pb2.GetDocumentRequest(
        collection="documents", doc_id="nightingale-missing", tenant=searched.acme)), grpc.StatusCode.NOT_FOUND)
    assert umbra.GetDocument(retriever_pb2.GetDocumentRequest(collection="documents", doc_id="nightingale",
                                                              tenant=searched.acme)).tenant == searched.umbra
    gone = umbra.Delete(retriever_pb2.DeleteRequest(collection="documents", tenant=searched.acme,
                                                    filter=common_pb2.Filter(equals={"fund_name": "Acme Secret Fund"})))
    assert gone.documents == 0
    _rpc_refused(lambda: umbra.Delete(retriever_pb2.DeleteRequest(  # conversation memory: the platform's to delete
        collection="conversations", tenant=searched.acme, filter=common_pb2.Filter(equals={"user_id": "alice"}))),
        grpc.StatusCode.PERMISSION_DENIED)
    list(umbra.Ingest(iter([retriever_pb2.Document(doc_id="planted", collection="documents", tenant=searched.acme,
                                                   text="Planted by umbra into acme? Nightingale is cancelled.")])))
    umbra.Upsert(iter([retriever_pb2.UpsertRequest(chunk=common_pb2.Chunk(
        chunk_id=f"{searched.umbra}/planted-upsert#0", doc_id="planted-upsert", collection="documents",
        tenant=searched.acme, text="Upserted by umbra: Nightingale is cancelled."), vector=[0.0] * 383 + [1.0])]))
    acme_hits = searched.retriever(searched.acme_admin).Search(retriever_pb2.SearchRequest(
        query="Nightingale cancelled planted umbra", collections=["documents"], top_k=50)).hits
    assert {h.chunk.doc_id for h in acme_hits} <= {"nightingale"}
    assert {h.chunk.tenant for h in acme_hits} == {searched.acme}


# -- the document picker: document_ids narrow every search of a question ----------------------------

PICKED = {("meeting_notes", "mn-harborview-2024-01-30"), ("meeting_notes", "mn-kestrel-2024-03-14")}
EXPOSURE = {"question": "What did the managers say about net exposure and the outlook?",
            "data_sources": ["Meeting Notes", "Factsheet"]}


def _cited(reply: httpx.Response) -> set[tuple[str, str]]:
    assert reply.status_code == 200, reply.text
    return {(c["collection"], c["doc_id"]) for c in reply.json()["citations"]}


def test_picked_documents_are_the_only_ones_searched(searched: World, stack: Stack) -> None:
    """The demo corpus (tenant DEMO): unpicked, the question cites other meetings and factsheets."""
    assert _cited(searched.post(stack.admin_key, "/api/chat/ask", EXPOSURE)) - PICKED
    picked = searched.post(stack.admin_key, "/api/chat/ask",
                           {**EXPOSURE, "document_ids": [f"{c}/{d}" for c, d in sorted(PICKED)]})
    assert _cited(picked) == PICKED
    bare = searched.post(stack.admin_key, "/api/chat/ask", {**EXPOSURE, "document_ids": ["mn-kestrel-2024-03-14"]})
    assert _cited(bare) == {("meeting_notes", "mn-kestrel-2024-03-14")}, "a bare id, in any searched collection"
    elsewhere = searched.post(stack.admin_key, "/api/chat/ask",
                              {**EXPOSURE, "document_ids": ["documents/mn-kestrel-2024-03-14"]})
    assert _cited(elsewhere) == set(), "picked in a collection not searched: nothing of the searched ones"


def test_another_tenants_document_picked_gives_nothing(searched: World, stack: Stack) -> None:
    for key in (searched.mallory, searched.umbra_admin):
        reply = searched.post(key, "/api/chat/ask", {"question": "What is Project Nightingale and its price?",
                                                     "data_sources": ["Documents"],
                                                     "document_ids": ["documents/nightingale", "nightingale"]})
        _refused(reply, 200)  # umbra may have a "nightingale" of its own, never acme's
        assert "Lark Robotics" not in reply.text
    demo = searched.post(searched.alice, "/api/chat/ask", {**EXPOSURE, "document_ids": sorted(
        f"{c}/{d}" for c, d in PICKED)})
    assert _cited(demo) == set()


@pytest.mark.parametrize("document_ids, field", [
    (["x" * 513], "document_ids"),
    ([""], "document_ids[0]"),
    (["documents/"], "document_ids[0]"),
    (["meeting_notes/ok", "no such collection!/x"], "document_ids[1]: must be a doc_id, or a collection name"),
    ([42], "document_ids"),
    ("documents/nightingale", "document_ids"),
    ([f"d{i}" for i in range(21)], "document_ids"),
])
def test_garbage_document_ids_are_400(world: World, document_ids, field: str) -> None:
    reply = world.post(world.alice, "/api/chat/ask", {"question": "hi", "document_ids": document_ids})
    assert reply.status_code == 400, reply.text
    assert field in reply.json()["error"]["message"]


# -- deletion ---------------------------------------------------------------------------------------

def test_deleting_a_conversation_deletes_its_memory_summary_and_corrections(searched: World) -> None:
    events = sse(searched.url + "/api/chat/ask/stream", {"question": f"Tell me about {ALICE_PHRASE} and Nightingale",
                                                         "data_sources": ["Documents"]}, headers(searched.alice))
    conv = _done(events)["conversation_id"]
    searched.post(searched.alice, "/api/corrections", {"conversation_id": conv, "correction": "It is about birds.",
                                                       "message_id": _done(events)["message_id"]})
    searched.memory_written()
    store = searched.store()
    try:
        store.set_conversation_summary(conv, "a summary")
    finally:
        store.close()
    # conversation memory is read for its author only: as the gateway reads it, for alice
    acme = retriever_pb2_grpc.RetrieverStub(channel(searched.retriever_address,
                                                    searched.stack.service_metadata(searched.acme, "alice")))
    memory = lambda: [h for h in acme.Search(retriever_pb2.SearchRequest(  # noqa: E731
        query=ALICE_PHRASE, collections=["conversations"], top_k=50)).hits
        if h.chunk.metadata["conversation_id"] == conv]
    assert memory(), "the conversation's messages were embedded"
    assert searched.delete(searched.alice, f"/api/conversations/{conv}").json() == {"deleted": True}
    assert memory() == []
    store = searched.store()
    try:
        assert store.conversation_summary(conv) == ""
        assert all(c.conversation_id != conv for c in store.corrections(searched.acme, "alice"))
        assert store.messages(conv) == []
    finally:
        store.close()
    _refused(searched.get(searched.alice, f"/api/conversations/{conv}"), 404)


# -- JWTs -------------------------------------------------------------------------------------------

def test_a_gateway_taking_jwts_refuses_expired_badly_signed_and_unsigned_ones(world: World, stack: Stack) -> None:
    import jwt

    secret = "s" * 48
    gateway = stack.start_variant("gateway", jwt_secret=secret, jwt_audience="ragmesh")
    url = f"http://127.0.0.1:{gateway.app.http_port}"
    now = int(time.time())
    claims = {"tenant": "acme", "sub": "alice", "aud": "ragmesh", "exp": now + 60}

    def meta(token: str) -> httpx.Response:
        return httpx.get(url + "/api/meta", headers=headers(token), timeout=30)

    good = meta(jwt.encode(claims, secret, algorithm="HS256"))
    assert good.status_code == 200 and good.json()["identity"] == {"tenant": "acme", "user": "alice",
                                                                    "role": "member", "groups": []}
    assert "Acme Secret Fund" in good.json()["funds"]
    for token in (jwt.encode({**claims, "exp": now - 120}, secret, algorithm="HS256"),
                  jwt.encode(claims, "another-secret-of-enough-length!", algorithm="HS256"),
                  jwt.encode({**claims, "aud": "someone-else"}, secret, algorithm="HS256"),
                  jwt.encode({k: v for k, v in claims.items() if k != "exp"}, secret, algorithm="HS256"),
                  jwt.encode({**claims, "role": "owner"}, secret, algorithm="HS256"),
                  jwt.encode(claims, None, algorithm="none")):
        _refused(meta(token), 401)
    # a JWT's user is held to the same rules as a key's
    token = jwt.encode(claims, secret, algorithm="HS256")
    _refused(httpx.get(f"{url}/api/conversations/{world.bob_conv}", headers=headers(token)), 404)
    assert httpx.get(f"{url}/api/conversations/{world.alice_conv}", headers=headers(token)).status_code == 200
    _rpc_refused(lambda: gateway_pb2_grpc.GatewayStub(channel(gateway.address, bearer(
        jwt.encode({**claims, "exp": now - 120}, secret, algorithm="HS256")))).ListConversations(
        gateway_pb2.ListConversationsRequest()), grpc.StatusCode.UNAUTHENTICATED)
