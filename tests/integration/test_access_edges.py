"""Who sees a document, through both gateway edges, as the people of one tenant would try it: `ana`
(a member) uploads a private memo; `ben`, a colleague, tries to list, open and delete it over HTTP
and gRPC, before it is shared with him, while it is, and after the share is revoked; `cy` holds a key
in group `risk`; `boss` is the tenant's admin. Bad access bodies are 400 / INVALID_ARGUMENT naming the field,
on both edges. (The retriever's own rules, on both search backends, are tests/security/test_document_access.py.)"""
from __future__ import annotations

import inspect
import json
from urllib.parse import quote

import grpc
import httpx
import pytest

from ragmesh.identity import keys
from ragmesh.identity.authenticator import pepper
from ragmesh.store.sqlite import SqliteStore
from ragmesh.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, retriever_pb2
from tests.auth import bearer, channel, headers
from tests.conftest import one, sse
from tests.stack import Stack

TENANT = "edges-t"
DOCS = "documents"
SECRET = "Heron memo: the marmot-pelican bonus pool is 17 percent of salary this year."
MEMO = "ana:heron"  # a member's ids live under its name
PATH = f"/api/documents/{DOCS}/{quote(MEMO)}"
ONLY_OWNER = {"users": [], "groups": [], "tenant": False}


class Person:
    """One credential on both edges."""

    def __init__(self, stack: Stack, key: str) -> None:
        self.key = key
        self.http = httpx.Client(base_url=stack.http_url, headers=headers(key), timeout=60)
        self.grpc = gateway_pb2_grpc.GatewayStub(channel(stack.address("gateway"), bearer(key)))

    def upload(self, body: dict) -> httpx.Response:
        return self.http.post("/api/documents", json=body)

    def share(self, path: str, body: dict) -> httpx.Response:
        return self.http.put(path + "/access", json=body)

    def listed(self, collection: str = DOCS) -> dict[str, dict]:
        reply = self.http.get("/api/documents", params={"collection": collection, "limit": 200})
        assert reply.status_code == 200, reply.text
        return {d["doc_id"]: d for d in reply.json()["documents"]}

    def listed_grpc(self, collection: str = DOCS) -> set[str]:
        found = self.grpc.ListDocuments(retriever_pb2.ListDocumentsRequest(collection=collection, limit=200))
        return {e.document.doc_id for e in found.documents}


class Tenant:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.boss = Person(stack, stack.key(TENANT, "boss", "admin"))
        self.ana = Person(stack, stack.key(TENANT, "ana"))
        self.ben = Person(stack, stack.key(TENANT, "ben"))


@pytest.fixture(scope="module")
def tenant(stack: Stack) -> Tenant:
    t = Tenant(stack)
    events = sse(stack.http_url + "/api/documents", {"collection": DOCS, "access": {}, "documents": [
        {"doc_id": "heron", "text": SECRET, "title": "Heron memo"}]}, headers(t.ana.key))
    assert one(events, "done") is True and events[-2]["stage"] == "INDEXED", events
    assert events[-2]["doc_id"] == MEMO
    return t


def refused(call, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    assert caught.value.code() == code, caught.value.details()
    return caught.value.details()


def done(reply: httpx.Response) -> list[dict]:
    """An upload's events, once it answered 200."""
    assert reply.status_code == 200, reply.text
    return [json.loads(line[len("data: "):]) for line in reply.text.splitlines() if line.startswith("data: ")]


def get_document(person: Person, doc_id: str = MEMO) -> retriever_pb2.DocumentInfo:
    return person.grpc.GetDocument(retriever_pb2.GetDocumentRequest(collection=DOCS, doc_id=doc_id))


def delete_document(person: Person, doc_id: str = MEMO) -> retriever_pb2.DeleteResponse:
    return person.grpc.DeleteDocument(gateway_pb2.DeleteDocumentRequest(collection=DOCS, doc_id=doc_id))


def set_access(person: Person, access: common_pb2.Access, doc_id: str = MEMO) -> retriever_pb2.DocumentInfo:
    return person.grpc.SetDocumentAccess(retriever_pb2.SetDocumentAccessRequest(collection=DOCS, doc_id=doc_id,
                                                                                access=access))


def unseen(person: Person) -> None:
    """The memo answers `person` exactly as an unknown document, on both edges."""
    assert MEMO not in person.listed() and MEMO not in person.listed_grpc()
    unknown = PATH.replace("heron", "no-such-memo")
    for method in (person.http.get, person.http.delete):
        theirs, none = method(PATH), method(unknown)
        assert theirs.status_code == none.status_code == 404, theirs.text
        assert theirs.json()["error"]["message"] == none.json()["error"]["message"].replace("no-such-memo", "heron")
    for call in (get_document, delete_document):
        assert refused(lambda: call(person), grpc.StatusCode.NOT_FOUND) == refused(
            lambda: call(person, "ana:no-such-memo"), grpc.StatusCode.NOT_FOUND).replace("no-such-memo", "heron")


def test_a_member_uploads_into_documents_and_owns_what_it_uploads(tenant: Tenant, stack: Stack) -> None:
    mine = tenant.ana.listed()[MEMO]
    assert (mine["access"], mine["owner"], mine["title"]) == (ONLY_OWNER, "ana", "Heron memo")
    assert "__access__" not in mine["metadata"]
    read = tenant.ana.http.get(PATH).json()
    assert (read["access"], read["owner"]) == (ONLY_OWNER, "ana") and "__access__" not in read["metadata"]
    info = get_document(tenant.ana)
    assert (list(info.access.users), info.access.tenant, info.access.owner) == ([], False, "ana")
    # files too (the access as a form field), and over gRPC (each Document carries its access)
    form = tenant.ana.http.post("/api/documents", data={"collection": DOCS, "access": '{"users": ["ben"]}'},
                                files={"files": ("plan.txt", b"The otter-finch plan starts in May.", "text/plain")})
    assert done(form)[-2]["doc_id"] == "ana:plan.txt"
    note = retriever_pb2.Document(doc_id="grpc-note", collection=DOCS, text="A note sent over gRPC.",
                                  access=common_pb2.Access(groups=["risk"]))
    progress = list(tenant.ana.grpc.Ingest(iter([note])))
    assert (progress[-1].stage, progress[-1].doc_id) == (retriever_pb2.INDEXED, "ana:grpc-note")
    listed = tenant.ana.listed()
    assert (listed["ana:plan.txt"]["access"]["users"], listed["ana:grpc-note"]["access"]["groups"]) == (["ben"],
                                                                                                        ["risk"])
    # the whole tenant's documents an admin uploaded are every member's to read, not to delete
    assert done(tenant.boss.upload({"collection": "edges_notes", "documents": [
        {"doc_id": "policy", "text": "Travel policy: economy class."}]}))[-2]["stage"] == "INDEXED"
    policy = tenant.ben.listed("edges_notes")["policy"]
    assert (policy["access"], policy["owner"]) == ({"users": [], "groups": [], "tenant": True}, "boss")
    assert tenant.ben.http.delete("/api/documents/edges_notes/policy").status_code == 403


def test_a_colleague_sees_the_document_only_while_it_is_shared_with_him(tenant: Tenant) -> None:
    ana, ben = tenant.ana, tenant.ben
    unseen(ben)
    shared = ana.share(PATH, {"users": ["ben"]})
    assert shared.status_code == 200, shared.text
    assert (shared.json()["access"], shared.json()["owner"]) == ({**ONLY_OWNER, "users": ["ben"]}, "ana")
    line = ben.listed()[MEMO]
    assert (line["access"]["users"], line["owner"]) == (["ben"], "ana") and MEMO in ben.listed_grpc()
    assert ben.http.get(PATH).json()["title"] == get_document(ben).title == "Heron memo"
    # he reads it; he does not own it: he may neither delete it nor share it on, on either edge
    denied = ben.http.delete(PATH)
    assert denied.status_code == 403 and "uploader or an admin" in denied.json()["error"]["message"]
    assert refused(lambda: delete_document(ben), grpc.StatusCode.PERMISSION_DENIED) == denied.json()["error"]["message"]
    assert ben.share(PATH, {"users": ["ben", "eve"]}).status_code == 403
    refused(lambda: set_access(ben, common_pb2.Access(users=["eve"])), grpc.StatusCode.PERMISSION_DENIED)
    # revoked (over gRPC this time): he is back to not knowing it exists
    revoked = set_access(ana, common_pb2.Access())
    assert (list(revoked.access.users), revoked.access.owner) == ([], "ana")
    unseen(ben)


def test_a_group_share_admits_the_groups_members_only(tenant: Tenant, stack: Stack) -> None:
    """`cy` holds a key whose record names its groups (`ragmesh keys create --groups risk`)."""
    if "groups" not in inspect.signature(keys.new_key).parameters:
        pytest.skip("keys holding groups arrive with the identity branch (keys create --groups)")
    key, record = keys.new_key(pepper(stack.settings), TENANT, "cy", "member", groups=["risk"])
    store = SqliteStore(stack.settings.sqlite_path)
    try:
        store.add_api_key(record)
    finally:
        store.close()
    ana, cy = tenant.ana, Person(stack, key)
    refused(lambda: get_document(cy), grpc.StatusCode.NOT_FOUND)
    assert cy.http.get(PATH).status_code == 404
    assert ana.share(PATH, {"groups": ["risk"]}).json()["access"]["groups"] == ["risk"]
    assert cy.http.get(PATH).json()["access"]["groups"] == ["risk"] and MEMO in cy.listed_grpc()
    assert get_document(cy).title == "Heron memo"
    unseen(tenant.ben)
    assert set_access(ana, common_pb2.Access()).access.groups == []
    assert cy.http.get(PATH).status_code == 404 and MEMO not in cy.listed()


def test_only_the_owner_and_admins_manage_a_document(tenant: Tenant) -> None:
    ana, boss = tenant.ana, tenant.boss
    assert ana.share(PATH, {"owner": "ben"}).status_code == 403, "a member gives nothing away"
    # the admin lists every header, though it reads only what is shared with it
    assert boss.listed()[MEMO]["owner"] == "ana" and MEMO in boss.listed_grpc()
    assert boss.http.get(PATH).status_code == 404
    moved = boss.share(PATH, {"users": ["ana"], "owner": "ben"})
    assert moved.status_code == 200 and (moved.json()["owner"], moved.json()["access"]["users"]) == ("ben", ["ana"])
    assert tenant.ben.listed()[MEMO]["owner"] == "ben"
    assert ana.http.delete(PATH).status_code == 403, "ana reads it, ben owns it now"
    assert set_access(boss, common_pb2.Access(owner="ana")).access.owner == "ana"
    # the owner deletes its own document; then it is gone for everyone
    assert ana.http.post("/api/documents", json={"collection": DOCS, "documents": [
        {"doc_id": "scratch", "text": "Scratch note."}]}).status_code == 200
    assert ana.http.delete(f"/api/documents/{DOCS}/ana:scratch").json()["documents"] == 1
    assert ana.http.get(f"/api/documents/{DOCS}/ana:scratch").status_code == 404


def test_a_private_documents_text_is_cited_for_its_owner_only(tenant: Tenant) -> None:
    ask = {"question": "How big is the marmot-pelican bonus pool?", "data_sources": ["Documents"]}
    mine = tenant.ana.http.post("/api/chat/ask", json=ask).json()
    assert MEMO in [c["doc_id"] for c in mine["citations"]] and "17 percent" in mine["answer"]
    theirs = tenant.ben.http.post("/api/chat/ask", json=ask).json()
    assert MEMO not in [c["doc_id"] for c in theirs["citations"]] and "17 percent" not in theirs["answer"]


def test_collection_rules_are_set_by_admins_on_both_edges(tenant: Tenant) -> None:
    rules = {"members_upload": True, "default_access": {"groups": ["risk"]}}
    assert tenant.ana.http.put("/api/collections/edges_drafts/access", json=rules).status_code == 403
    refused(lambda: tenant.ana.grpc.SetCollectionAccess(retriever_pb2.CollectionAccess(collection="edges_drafts")),
            grpc.StatusCode.PERMISSION_DENIED)
    reply = tenant.boss.http.put("/api/collections/edges_drafts/access", json=rules)
    assert reply.json() == {"collection": "edges_drafts", "members_upload": True,
                            "default_access": {"users": [], "groups": ["risk"], "tenant": False}}
    # opened to members: ana's upload there is read by group risk by default
    assert done(tenant.ana.upload({"collection": "edges_drafts", "documents": [
        {"doc_id": "draft", "text": "Draft of the wombat hedge."}]}))[-2]["stage"] == "INDEXED"
    line = tenant.ana.listed("edges_drafts")["ana:draft"]
    assert (line["access"]["groups"], line["owner"]) == (["risk"], "ana")
    listed = {c["name"]: c for c in tenant.boss.http.get("/api/collections").json()["collections"]}
    drafts, docs, notes = listed["edges_drafts"], listed[DOCS], listed["edges_notes"]
    assert drafts["members_upload"] and drafts["default_access"]["groups"] == ["risk"]
    assert docs["members_upload"] and docs["default_access"] == ONLY_OWNER
    assert not notes["members_upload"] and notes["default_access"]["tenant"]
    rpc = {c.name: c for c in tenant.boss.grpc.ListCollections(retriever_pb2.ListCollectionsRequest()).collections}
    assert rpc["edges_drafts"].members_upload and list(rpc["edges_drafts"].default_access.groups) == ["risk"]
    closed = tenant.boss.grpc.SetCollectionAccess(retriever_pb2.CollectionAccess(
        collection="edges_drafts", members_upload=False, default_access=common_pb2.Access(tenant=True)))
    assert (closed.members_upload, closed.default_access.tenant) == (False, True)
    memory = tenant.boss.http.put("/api/collections/conversations/access", json=rules)
    assert memory.status_code == 400 and memory.json()["error"]["message"].startswith("collection")


def test_an_upload_the_retriever_refuses_is_403(tenant: Tenant) -> None:
    notes = tenant.ana.upload({"collection": "meeting_notes", "documents": [{"doc_id": "n", "text": "My notes."}]})
    assert notes.status_code == 403 and "admins only" in notes.json()["error"]["message"], notes.text
    everyone = tenant.ana.upload({"collection": DOCS, "access": {"tenant": True},
                                  "documents": [{"doc_id": "open", "text": "For all."}]})
    assert everyone.status_code == 403 and "access.tenant" in everyone.json()["error"]["message"], everyone.text
    refused(lambda: list(tenant.ana.grpc.Ingest(iter([retriever_pb2.Document(
        doc_id="n", collection="meeting_notes", text="My notes.")]))), grpc.StatusCode.PERMISSION_DENIED)


LONG = [f"u{i}" for i in range(65)]


@pytest.mark.parametrize("body,field", [
    ({"access": {"users": ["ben"], "color": "red"}}, "access.color"),
    ({"access": {"owner": "ben"}}, "access.owner"),  # the uploader is the owner
    ({"access": {"users": "ben"}}, "access.users"),
    ({"access": {"users": ["ben", "not a name"]}}, "access.users[1]"),
    ({"access": {"users": LONG}}, "access.users"),
    ({"access": {"tenant": "yes"}}, "access.tenant"),
    ({"access": ["ben"]}, "access"),
    ({"documents": [{"doc_id": "a", "text": "x", "access": {"groups": ["-risk"]}}]}, "documents[0].access.groups[0]"),
    ({"documents": [{"record": "x", "access": {"users": [7]}}]}, "documents[0].access.users[0]"),
])
def test_a_bad_access_in_an_upload_is_400_naming_the_field(tenant: Tenant, body: dict, field: str) -> None:
    reply = tenant.ana.upload({"collection": DOCS, "documents": [{"doc_id": "a", "text": "x"}], **body})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["message"].startswith(field + ":"), reply.json()


@pytest.mark.parametrize("access,field", [
    ("not json", "access"), ('{"users": 5}', "access.users"), ('{"groups": ["a b"]}', "access.groups[0]"),
    ("null", "access"),
])
def test_a_bad_access_form_field_is_400_naming_it(tenant: Tenant, access: str, field: str) -> None:
    reply = tenant.ana.http.post("/api/documents", data={"collection": DOCS, "access": access},
                                 files={"files": ("a.txt", b"x", "text/plain")})
    assert reply.status_code == 400 and reply.json()["error"]["message"].startswith(field + ":"), reply.text


@pytest.mark.parametrize("http,rpc,field", [
    ({"users": ["ben"], "color": "red"}, None, "color"),
    ({"users": ["x y"]}, common_pb2.Access(users=["x y"]), "users[0]"),
    ({"groups": ["ok", "-no"]}, common_pb2.Access(groups=["ok", "-no"]), "groups[1]"),
    ({"users": LONG}, common_pb2.Access(users=LONG), "users"),
    ({"owner": ""}, None, "owner"),
])
def test_a_bad_change_of_access_is_refused_alike_on_both_edges(tenant: Tenant, http: dict,
                                                               rpc: common_pb2.Access | None, field: str) -> None:
    reply = tenant.ana.share(PATH, http)
    assert reply.status_code == 400 and reply.json()["error"]["message"].startswith(field + ":"), reply.text
    if rpc is not None:  # gRPC names the field inside the request's `access`
        message = refused(lambda: set_access(tenant.ana, rpc), grpc.StatusCode.INVALID_ARGUMENT)
        assert message == "access." + reply.json()["error"]["message"]
        assert refused(lambda: list(tenant.ana.grpc.Ingest(iter([retriever_pb2.Document(
            doc_id="bad", collection=DOCS, text="x", access=rpc)]))), grpc.StatusCode.INVALID_ARGUMENT) == message


def test_a_bad_collection_rule_is_400_naming_the_field(tenant: Tenant) -> None:
    put = tenant.boss.http.put
    for body, field in (({"members_upload": "yes", "default_access": {}}, "members_upload"),
                        ({"members_upload": True}, "default_access"),
                        ({"members_upload": True, "default_access": {"owner": "boss"}}, "default_access.owner"),
                        ({"members_upload": True, "default_access": {"groups": ["a b"]}}, "default_access.groups[0]")):
        reply = put("/api/collections/edges_drafts/access", json=body)
        assert reply.status_code == 400 and reply.json()["error"]["message"].startswith(field + ":"), reply.text
    message = refused(lambda: tenant.boss.grpc.SetCollectionAccess(retriever_pb2.CollectionAccess(
        collection="edges_drafts", default_access=common_pb2.Access(groups=["a b"]))), grpc.StatusCode.INVALID_ARGUMENT)
    assert message.startswith("default_access.groups[0]:")
