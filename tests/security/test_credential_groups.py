"""Groups come from the credential, end to end: a key made with groups and a JWT with a groups claim,
sent to the gateway, reach the embedder and the retriever (which admits a document shared with the
group); a body that names groups or another user's id does not change the groups a call reads by.

Tenant `grp`: `boss` (admin) keeps a memo shared with group `research`; `rita` holds a key in
`research`, `paul` a key in no group; `jane` signs in with a JWT (groups claim `research`), `jim`
with a JWT in group `ops` and `joe` with one that has no groups claim."""
from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import quote

import grpc
import httpx
import jwt
import pytest

from ragmesh.identity import MAX_GROUPS_CHARS
from ragmesh.request_context import identity_var
from ragmesh.serving import ServiceHost
from ragmesh.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel, headers
from tests.stack import Stack
from tests.unit.test_identity import longest_groups

TENANT = "grp"
JWT_SECRET = "a-groups-test-secret-of-48-characters-0123456789"
MEMO = "Research memo: the okapi-lantern study pays out in the third quarter."
ASKED = "When does the okapi-lantern study pay out?"
DOCS = "documents"


class Grp:
    def __init__(self, stack: Stack, gateway: ServiceHost) -> None:
        self.stack, self.gateway = stack, gateway
        self.url = f"http://127.0.0.1:{gateway.app.http_port}"
        self.boss = stack.key(TENANT, "boss", "admin")
        self.rita = stack.key(TENANT, "rita", groups=("research",))
        self.paul = stack.key(TENANT, "paul")
        self.jane = self.token("jane", groups=["research"])
        self.jim = self.token("jim", groups=["ops"])
        self.joe = self.token("joe")

    @staticmethod
    def token(user: str, **claims: object) -> str:
        return jwt.encode({"tenant": TENANT, "sub": user, "exp": int(time.time()) + 600} | claims, JWT_SECRET,
                          algorithm="HS256")

    def get(self, credential: str, path: str) -> httpx.Response:
        return httpx.get(self.url + path, headers=headers(credential), timeout=30)

    def ask(self, credential: str, **body: object) -> httpx.Response:
        sent = {"question": ASKED, "data_sources": ["Documents"]} | body
        return httpx.post(self.url + "/api/chat/ask", json=sent, headers=headers(credential), timeout=60)

    def grpc(self, credential: str) -> gateway_pb2_grpc.GatewayStub:
        return gateway_pb2_grpc.GatewayStub(channel(self.gateway.address, bearer(credential)))


@pytest.fixture(scope="module")
def grp(stack: Stack) -> Grp:
    gateway = stack.start_variant("gateway", jwt_secret=JWT_SECRET)
    world = Grp(stack, gateway)
    retriever = retriever_pb2_grpc.RetrieverStub(channel(stack.address("retriever"), bearer(world.boss)))
    memo = retriever_pb2.Document(doc_id="okapi-memo", collection=DOCS, text=MEMO, summarize=False,
                                  access=common_pb2.Access(groups=["research"]))
    progress = list(retriever.Ingest(iter([memo]), timeout=60))
    assert progress[-1].stage == retriever_pb2.INDEXED, progress
    hits = retriever.Search(retriever_pb2.SearchRequest(query=ASKED, collections=[DOCS], top_k=5)).hits
    world.chunk_id = next(h.chunk.chunk_id for h in hits if h.chunk.doc_id == "okapi-memo")
    return world


@pytest.fixture
def embedded(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, tuple[str, ...]]]]:
    """(user, groups) of the identity each Embed call to the embedder is served as."""
    seen: list[tuple[str, tuple[str, ...]]] = []
    batcher = stack.app("embedder").batcher
    embed = batcher.embed

    async def recorded(*args, **kwargs):
        who = identity_var.get()
        seen.append((who.user, who.groups) if who is not None else ("", ()))
        return await embed(*args, **kwargs)

    monkeypatch.setattr(batcher, "embed", recorded)
    yield seen


def _cites_memo(reply: httpx.Response) -> bool:
    assert reply.status_code == 200, reply.text
    return any(c["doc_id"] == "okapi-memo" for c in reply.json()["citations"]) or "third quarter" in reply.text


def test_the_callers_groups_are_what_the_credential_names(grp: Grp) -> None:
    for credential, user, groups in ((grp.rita, "rita", ["research"]), (grp.paul, "paul", []),
                                     (grp.jane, "jane", ["research"]), (grp.jim, "jim", ["ops"]),
                                     (grp.joe, "joe", [])):
        meta = grp.get(credential, "/api/meta")
        assert meta.status_code == 200, meta.text
        assert meta.json()["identity"] == {"tenant": TENANT, "user": user, "role": "member", "groups": groups}
        caller = grp.grpc(credential).GetMeta(gateway_pb2.GetMetaRequest()).identity
        assert (caller.user, list(caller.groups)) == (user, groups)


def test_the_retriever_admits_the_groups_of_a_key_and_of_a_jwt(grp: Grp) -> None:
    """The gateway relays each caller's groups: the retriever opens the memo to `research` only."""
    for credential in (grp.rita, grp.jane):
        assert grp.get(credential, f"/api/chunks/{quote(grp.chunk_id, safe='')}").status_code == 200
        chunk = grp.grpc(credential).GetChunk(retriever_pb2.GetChunkRequest(chunk_id=grp.chunk_id))
        assert chunk.chunk.text == MEMO
    for credential in (grp.paul, grp.jim, grp.joe):
        assert grp.get(credential, f"/api/chunks/{quote(grp.chunk_id, safe='')}").status_code == 404
        with pytest.raises(grpc.RpcError) as refused:
            grp.grpc(credential).GetChunk(retriever_pb2.GetChunkRequest(chunk_id=grp.chunk_id))
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND


def test_the_most_groups_a_credential_may_carry_cross_every_hop(grp: Grp) -> None:
    """A key's groups travel in one metadata header to each internal service: at their limit they still
    fit, so the call is answered, not refused for its metadata."""
    many = ["research", *longest_groups()[1:]]
    assert len(",".join(sorted(many))) <= MAX_GROUPS_CHARS
    key = grp.stack.key(TENANT, "many-groups", groups=many)
    assert grp.get(key, f"/api/chunks/{quote(grp.chunk_id, safe='')}").status_code == 200
    assert _cites_memo(grp.ask(key, question=f"{ASKED} (many groups)"))


def test_an_ask_reaches_the_embedder_and_the_retriever_with_the_callers_groups(
        grp: Grp, embedded: list[tuple[str, tuple[str, ...]]]) -> None:
    assert _cites_memo(grp.ask(grp.rita, question=f"{ASKED} (rita)"))
    assert _cites_memo(grp.ask(grp.jane, question=f"{ASKED} (jane)"))
    assert not _cites_memo(grp.ask(grp.paul, question=f"{ASKED} (paul)"))
    assert not _cites_memo(grp.ask(grp.jim, question=f"{ASKED} (jim)"))
    notes = grp.grpc(grp.jane).AskNotes(gateway_pb2.AskRequest(question=f"{ASKED} (jane, gRPC)",
                                                               data_sources=["Documents"]))
    assert "okapi-memo" in [c.note_id for c in notes.citations]
    groups = {user: found for user, found in embedded if user in ("rita", "jane", "paul", "jim")}
    assert groups == {"rita": ("research",), "jane": ("research",), "paul": (), "jim": ("ops",)}, embedded


def test_a_body_naming_groups_or_another_user_is_refused(grp: Grp) -> None:
    """Ask bodies and gRPC requests have no groups field: a body that names one is a 400 naming it
    (request declarations refuse unknown fields); naming another user is refused to every key, an
    admin's too (conversations and memory are their author's)."""
    for body in ({"groups": ["research"]}, {"group": "research", "groups": "research"},
                 {"groups": ["research"], "user_id": "paul"}):
        reply = grp.ask(grp.paul, **body)
        assert reply.status_code == 400, reply.text
        assert "group" in reply.json()["error"]["message"]
    assert grp.ask(grp.paul, user_id="rita").status_code == 403
    assert grp.ask(grp.boss, user_id="rita").status_code == 403
    assert _cites_memo(grp.ask(grp.boss)), "the memo's uploader reads it as itself"
    for key in (grp.paul, grp.boss):
        with pytest.raises(grpc.RpcError) as refused:
            grp.grpc(key).AskNotes(gateway_pb2.AskRequest(question=ASKED, data_sources=["Documents"],
                                                          user_id="rita"))
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_an_upload_body_naming_groups_or_a_user_shares_nothing(grp: Grp) -> None:
    """`documents` keeps an upload readable by its uploader only: a `groups` or `user_id` beside the
    documents (or in one) neither shares it with the group nor makes another user its owner."""
    body = {"collection": DOCS, "groups": ["research"], "user_id": "rita",
            "documents": [{"doc_id": "boss-draft", "text": "Draft: the okapi-lantern budget is 7 million.",
                           "groups": ["research"], "user_id": "rita"}]}
    reply = httpx.post(grp.url + "/api/documents", json=body, headers=headers(grp.boss), timeout=60)
    assert reply.status_code in (200, 400), reply.text
    if reply.status_code == 400:
        assert "group" in reply.json()["error"]["message"]
        return
    assert '"INDEXED"' in reply.text, reply.text
    listed = {user: [d["doc_id"] for d in grp.get(credential, f"/api/documents?collection={DOCS}").json()["documents"]]
              for user, credential in (("boss", grp.boss), ("rita", grp.rita), ("jane", grp.jane))}
    assert "boss-draft" in listed["boss"]
    assert "boss-draft" not in listed["rita"] and "boss-draft" not in listed["jane"], listed
