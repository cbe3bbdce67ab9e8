"""A colleague's conversations are theirs alone (issue 33): the tenant's admin key, the strongest key a
tenant holds, and a member colleague try every conversation route and method, over HTTP and gRPC, on
alice's chat, in which she told the assistant her salary. None lists, reads, renames, stops or deletes it
(each answered exactly as an unknown id is); an ask or a correction naming alice as its user is refused
(403 / PERMISSION_DENIED), with the conversation memory source or without; no route or method answers
with her words. Alice's own access still works."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import message_factory

from ragmesh.store.sqlite import SqliteStore
from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc
from tests.auth import bearer, channel, headers
from tests.conftest import answer_of, one, sse
from tests.stack import Stack

TENANT = "cubicle"
SALARY = "187,250"  # only in alice's question
SECRET = f"Please remember: my salary is {SALARY} quince-dollars a year."
ADMIN = "cubicle-admin"
MEMORY = "Conversation memory"
UNKNOWN = "0123456789abcdef0123456789abcdef"  # a well-formed id no conversation has


class Office:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.alice = stack.key(TENANT, "alice")
        self.bob = stack.key(TENANT, "bob")
        self.admin = stack.key(TENANT, ADMIN, "admin")
        self.url = stack.http_url

    def http(self, key: str, method: str, path: str, body: dict | None = None) -> httpx.Response:
        return httpx.request(method, self.url + path, json=body, headers=headers(key), timeout=60)

    def gateway(self, key: str) -> gateway_pb2_grpc.GatewayStub:
        return gateway_pb2_grpc.GatewayStub(channel(self.stack.address("gateway"), bearer(key)))

    def messages(self) -> list[str]:
        store = SqliteStore(self.stack.settings.sqlite_path)
        try:
            return [m.content for m in store.messages(self.conv)]
        finally:
            store.close()

    def title(self) -> str:
        store = SqliteStore(self.stack.settings.sqlite_path)
        try:
            return {c.conversation_id: c.title for c in store.conversations(TENANT, "alice")}[self.conv]
        finally:
            store.close()


@pytest.fixture(scope="module")
def office(stack: Stack) -> Office:
    o = Office(stack)
    events = sse(o.url + "/api/chat/ask/stream", {"question": SECRET}, headers(o.alice))
    done = next(e for e in events if e.get("done"))
    o.conv, o.answer = done["conversation_id"], done["message_id"]
    stack.call(stack.app("gateway").memory.idle())  # alice's messages are in the conversation memory
    assert SALARY in o.messages()[0]
    o.before = o.messages()
    return o


@pytest.fixture(params=["admin", "colleague"])
def attacker(request: pytest.FixtureRequest, office: Office) -> str:
    return office.admin if request.param == "admin" else office.bob


def _unharmed(o: Office) -> None:
    assert o.messages() == o.before, "alice's conversation changed"


def _no_leak(text: str) -> None:
    assert SALARY not in text and "quince" not in text, text


def _http_refused(reply: httpx.Response, status: int, code: str) -> dict:
    assert reply.status_code == status, (reply.status_code, reply.text)
    _no_leak(reply.text)
    error = reply.json()["error"]
    assert error["code"] == code, error
    return error


def _rpc_refused(call: Callable[[], Any], code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.RpcError) as info:
        result = call()
        if not isinstance(result, (str, bytes)) and hasattr(result, "__iter__"):
            list(result)
    assert info.value.code() == code, (info.value.code(), info.value.details())
    _no_leak(info.value.details() or "")
    return info.value.details() or ""


def _as_unknown(o: Office, mine: str, unknown: str) -> None:
    """Not-yours in exactly the words of unknown, but for the id each quotes."""
    assert mine.replace(o.conv, "ID") == unknown.replace(UNKNOWN, "ID"), (mine, unknown)


# -- HTTP -------------------------------------------------------------------------------------------

def test_a_colleagues_conversation_is_not_listed(office: Office, attacker: str) -> None:
    listed = office.http(attacker, "GET", "/api/conversations?limit=200")
    assert listed.status_code == 200, listed.text
    _no_leak(listed.text)
    assert office.conv not in listed.text
    owners = {c["user_id"] for c in listed.json()["conversations"]}
    assert owners <= {ADMIN, "bob"} and len(owners) <= 1, owners


def test_a_colleagues_conversation_cannot_be_read_renamed_stopped_or_deleted(office: Office, attacker: str) -> None:
    for method, path, body in (("GET", "/api/conversations/{}", None),
                               ("PATCH", "/api/conversations/{}", {"title": "read by the admin"}),
                               ("DELETE", "/api/conversations/{}", None),
                               ("POST", "/api/chat/stop", {"conversation_id": "{}"})):
        def call(conv: str) -> httpx.Response:
            sent = {k: v.format(conv) for k, v in body.items()} if body else None
            return office.http(attacker, method, path.format(conv), sent)

        mine = _http_refused(call(office.conv), 404, "NOT_FOUND")
        unknown = _http_refused(call(UNKNOWN), 404, "NOT_FOUND")
        _as_unknown(office, mine["message"], unknown["message"])
    _unharmed(office)
    assert office.title() != "read by the admin"


@pytest.mark.parametrize("path", ["/api/chat/ask", "/api/chat/ask/stream"])
@pytest.mark.parametrize("extra", [{}, {"data_sources": [MEMORY]}, {"tenant": TENANT, "data_sources": [MEMORY]},
                                   {"format": "notes", "data_sources": [MEMORY]}])
def test_an_ask_naming_a_colleague_is_refused(office: Office, attacker: str, path: str, extra: dict) -> None:
    reply = office.http(attacker, "POST", path, {"question": "What is my salary?", "user_id": "alice", **extra})
    error = _http_refused(reply, 403, "PERMISSION_DENIED")
    assert error["message"].startswith("user_id"), error
    _unharmed(office)


def test_an_ask_into_a_colleagues_conversation_is_404(office: Office, attacker: str) -> None:
    for conv in (office.conv, UNKNOWN):
        _http_refused(office.http(attacker, "POST", "/api/chat/ask", {
            "question": "Repeat everything I said.", "conversation_id": conv, "data_sources": [MEMORY]}),
            404, "NOT_FOUND")
    _unharmed(office)


def test_a_correction_cannot_name_a_colleague_or_copy_their_answer(office: Office, attacker: str) -> None:
    error = _http_refused(office.http(attacker, "POST", "/api/corrections", {
        "user_id": "alice", "question": "What is my salary?", "correction": "It is 1 dollar."}),
        403, "PERMISSION_DENIED")
    assert error["message"].startswith("user_id"), error
    for conv in (office.conv, UNKNOWN):
        _http_refused(office.http(attacker, "POST", "/api/corrections", {
            "conversation_id": conv, "message_id": office.answer, "correction": "no"}), 404, "NOT_FOUND")
    store = SqliteStore(office.stack.settings.sqlite_path)
    try:
        assert store.corrections(TENANT, "alice") == []
    finally:
        store.close()


def test_the_conversation_memory_answers_the_asker_only(office: Office, attacker: str) -> None:
    """An ask of the attacker's own, with the memory source, is narrowed to the attacker's messages."""
    reply = office.http(attacker, "POST", "/api/chat/ask", {"question": "What did I say my salary is?",
                                                            "data_sources": [MEMORY]})
    assert reply.status_code == 200, reply.text
    assert SALARY not in reply.text
    assert all(c["metadata"].get("user_id") != "alice" for c in reply.json()["citations"])


def test_no_route_or_method_answers_with_a_colleagues_words(office: Office, attacker: str) -> None:
    """Every route the bridge declares, every method, its path parameters and body naming alice's
    conversation, answer and user: none replies with her text, whatever its status."""
    spec = httpx.get(office.url + "/openapi.json", headers=headers(office.admin), timeout=30).json()
    named = {"conversation_id": office.conv, "message_id": office.answer, "user_id": "alice"}
    body = {**named, "question": "Repeat what alice said.", "title": "t", "correction": "c", "tenant": TENANT}
    tried = 0
    for path, methods in spec["paths"].items():
        if not path.startswith("/api/"):
            continue
        filled = path
        for param in [p.split("}")[0] for p in path.split("{")[1:]]:
            filled = filled.replace(f"{{{param}}}", named.get(param.split(":")[0], "x"))
        for method in methods:
            sent = body if method in ("post", "put", "patch") else None
            query = "" if sent else "?" + "&".join(f"{k}={v}" for k, v in named.items())
            reply = office.http(attacker, method.upper(), filled + query, sent)
            _no_leak(reply.text)
            tried += 1
    assert tried >= 10, spec["paths"].keys()
    _unharmed(office)


# -- gRPC -------------------------------------------------------------------------------------------

def test_grpc_lists_reads_renames_stops_and_deletes_no_colleagues_conversation(office: Office,
                                                                                attacker: str) -> None:
    gateway = office.gateway(attacker)
    listed = gateway.ListConversations(gateway_pb2.ListConversationsRequest(limit=200), timeout=30)
    assert office.conv not in {c.conversation_id for c in listed.conversations}
    _no_leak(str(listed))
    for call in (lambda conv: gateway.GetConversation(gateway_pb2.GetConversationRequest(conversation_id=conv),
                                                      timeout=30),
                 lambda conv: gateway.GetConversation(gateway_pb2.GetConversationRequest(
                     conversation_id=conv, tenant=TENANT), timeout=30),
                 lambda conv: gateway.RenameConversation(gateway_pb2.RenameConversationRequest(
                     conversation_id=conv, title="read by the admin"), timeout=30),
                 lambda conv: gateway.Stop(gateway_pb2.StopRequest(conversation_id=conv), timeout=30),
                 lambda conv: gateway.DeleteConversation(gateway_pb2.DeleteConversationRequest(
                     conversation_id=conv, tenant=TENANT), timeout=30)):
        mine = _rpc_refused(lambda: call(office.conv), grpc.StatusCode.NOT_FOUND)
        unknown = _rpc_refused(lambda: call(UNKNOWN), grpc.StatusCode.NOT_FOUND)
        _as_unknown(office, mine, unknown)
    _unharmed(office)
    assert office.title() != "read by the admin"


def test_grpc_asks_and_corrections_naming_a_colleague_are_refused(office: Office, attacker: str) -> None:
    gateway = office.gateway(attacker)
    for sources in ([], [MEMORY]):
        ask = gateway_pb2.AskRequest(question="What is my salary?", user_id="alice", data_sources=sources)
        for method in (gateway.Ask, gateway.AskNotes):
            details = _rpc_refused(lambda: method(ask, timeout=60), grpc.StatusCode.PERMISSION_DENIED)
            assert details.startswith("user_id"), details
    _rpc_refused(lambda: gateway.Ask(gateway_pb2.AskRequest(question="Repeat everything I said.",
                                                            conversation_id=office.conv), timeout=60),
                 grpc.StatusCode.NOT_FOUND)
    _rpc_refused(lambda: gateway.Correct(gateway_pb2.CorrectionRequest(
        user_id="alice", question="What is my salary?", correction="1 dollar"), timeout=30),
        grpc.StatusCode.PERMISSION_DENIED)
    _rpc_refused(lambda: gateway.Correct(gateway_pb2.CorrectionRequest(
        conversation_id=office.conv, message_id=office.answer, correction="no"), timeout=30),
        grpc.StatusCode.NOT_FOUND)
    _unharmed(office)


def _requests(o: Office) -> Iterator[tuple[str, Any, bool, bool]]:
    """(method, request naming alice's conversation, answer and user wherever it has such a field,
    client streams, server streams) for every Gateway method."""
    named = {"conversation_id": o.conv, "message_id": o.answer, "user_id": "alice",
             "question": "Repeat what alice said.", "data_sources": [MEMORY]}
    for method in gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].methods:
        cls = message_factory.GetMessageClass(method.input_type)
        fields = {f.name for f in method.input_type.fields}
        yield method.name, cls(**{k: v for k, v in named.items() if k in fields}), \
            method.client_streaming, method.server_streaming


def test_no_grpc_method_answers_with_a_colleagues_words(office: Office, attacker: str) -> None:
    gateway = office.gateway(attacker)
    for name, request, client_streams, server_streams in _requests(office):
        try:
            reply = getattr(gateway, name)(iter([request]) if client_streams else request, timeout=60)
            text = "".join(str(r) for r in reply) if server_streams else str(reply)
        except grpc.RpcError as e:
            text = e.details() or ""
        _no_leak(text)
    _unharmed(office)


# -- the author ----------------------------------------------------------------------------------------

def test_the_author_still_reads_renames_asks_into_and_deletes_her_conversation(office: Office) -> None:
    listed = office.http(office.alice, "GET", "/api/conversations").json()["conversations"]
    assert office.conv in {c["conversation_id"] for c in listed}
    read = office.http(office.alice, "GET", f"/api/conversations/{office.conv}")
    assert read.status_code == 200 and SALARY in read.text
    gateway = office.gateway(office.alice)
    assert office.conv in {c.conversation_id for c in gateway.ListConversations(
        gateway_pb2.ListConversationsRequest(), timeout=30).conversations}
    assert SALARY in gateway.GetConversation(gateway_pb2.GetConversationRequest(conversation_id=office.conv),
                                             timeout=30).messages[0].content
    renamed = office.http(office.alice, "PATCH", f"/api/conversations/{office.conv}", {"title": "Pay"})
    assert renamed.status_code == 200 and renamed.json()["title"] == "Pay"
    assert office.http(office.alice, "POST", "/api/chat/stop", {"conversation_id": office.conv}).json() == \
        {"stopped": False}
    # her memory answers her, with her own words, even with her user_id named
    events = sse(office.url + "/api/chat/ask/stream", {"question": "What is my salary in quince-dollars?",
                                                       "data_sources": [MEMORY], "user_id": "alice"},
                 headers(office.alice))
    cited = one(events, "citations")
    assert cited and all(c["collection"] == "conversations" for c in cited)
    assert SALARY in answer_of(events) + "".join(c["snippet"] for c in cited)
    assert office.http(office.alice, "DELETE", f"/api/conversations/{office.conv}").json() == {"deleted": True}
    _http_refused(office.http(office.alice, "GET", f"/api/conversations/{office.conv}"), 404, "NOT_FOUND")
