"""Every limit is declared once: the bounds the served OpenAPI document states are the bounds both edges
hold, read off the document and probed on HTTP and on gRPC. A field at its documented bound passes (the
request then fails on another field, or on an unknown conversation), one past it is refused naming it;
so a limit written a second time anywhere (a route, the servicer, the domain check, the proto) with
another value fails here. And the document is the models' own: no request constraint is added after
FastAPI generates it.

And every Ask field reaches every edge: each edge names the Ask fields it carries and those it leaves out
(with why), which together are the declaration's; a field it carries, sent with a value the declaration
refuses, is refused naming it (the edge handed it to the declaration); and through both native edges each
field reaches the domain's AskInput. Adding an edge is one entry in EDGES.

And the scope a cached search is reused under is declared once (services/gateway/scope.py): every Ask field
sets it or is listed as not setting it, and its key is made of every field it has."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format

from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc
from services.gateway.api import mcp_tools, openai_request
from services.gateway.api.chat import StopBody
from services.gateway.api.conversations import RenameBody
from services.gateway.correction_request import CorrectionBody
from ragmesh.errors import InvalidArgument
from services.gateway.request import AskInput, AskRequest
from services.gateway.scope import ASKED, NOT_SCOPING, READ_FROM_QUESTION, Scope
from services.gateway.servicer import ASK_LEFT_OUT, ask_from_proto
from services.gateway.transcript_request import TranscriptBody
from tests.auth import bearer, channel, headers
from tests.stack import DEMO, Stack

UNKNOWN = "0" * 32  # a well-formed conversation id no conversation has
# Dates out of order: checked once every field passed, so their refusal (naming end_date) means they did.
POISON = {"start_date": "2024-02-01", "end_date": "2024-01-01"}
# An item of a list of objects, where a bounded list is probed.
ITEMS = {"conversation_history": lambda i: {"question": f"q{i}"}}
Send = Callable[[dict[str, Any]], tuple[str, str]]  # a request's fields -> (outcome, message)


@pytest.fixture(scope="module")
def document(stack: Stack) -> dict:
    return httpx.get(stack.http_url + "/openapi.json", timeout=30).json()


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    return stack.key(DEMO, "declared-once")


@pytest.fixture(scope="module")
def stub(stack: Stack, key: str) -> gateway_pb2_grpc.GatewayStub:
    return gateway_pb2_grpc.GatewayStub(channel(stack.address("gateway"), bearer(key)))


def bounds(schema: dict) -> Iterator[tuple[str, str, int]]:
    """(field, kind, bound) for each bounded property: maxLength / maxItems / maximum, and an array's items
    (maxLength 0 is "empty", an alternative to a date, not a limit)."""
    for name, prop in schema["properties"].items():
        for branch in prop.get("anyOf", [prop]):
            for kind in ("maxLength", "maxItems", "maximum"):
                if branch.get(kind):
                    yield name, kind, branch[kind]
            if "maxLength" in branch.get("items", {}):
                yield f"{name}[0]", "maxLength", branch["items"]["maxLength"]


def sized(field: str, kind: str, size: int) -> dict[str, Any]:
    """A value of `field` exactly `size` long (characters, distinct items, or the number)."""
    name = field.removesuffix("[0]")
    if field.endswith("[0]"):
        return {name: ["x" * size]}
    if kind == "maxItems":
        return {name: [ITEMS.get(name, lambda i: f"d{i}")(i) for i in range(size)]}
    return {name: int(size)} if kind == "maximum" else {name: "x" * size}


def http_sender(stack: Stack, key: str, method: str, path: str) -> Send:
    def send(body: dict[str, Any]) -> tuple[str, str]:
        reply = httpx.request(method, stack.http_url + path, json=body, headers=headers(key), timeout=30)
        error = reply.json().get("error", {})
        return error.get("code", str(reply.status_code)), error.get("message", "")
    return send


def grpc_sender(call: Callable, message: type, streaming: bool = False) -> Send:
    def send(fields: dict[str, Any]) -> tuple[str, str]:
        try:
            reply = call(message(**fields), timeout=30)
            if streaming:
                list(reply)
        except grpc.RpcError as exc:
            return exc.code().name, exc.details()
        return "OK", ""
    return send


def openai_sender(stack: Stack, key: str) -> Send:
    """Ask fields as a chat completion: the question and the history in `messages`, the persona a system
    message, the filters extension fields."""
    def send(fields: dict[str, Any]) -> tuple[str, str]:
        rest = dict(fields)
        messages = [{"role": "system", "content": rest.pop("persona")}] if "persona" in rest else []
        for turn in rest.pop("conversation_history", []):
            messages += [{"role": "user", "content": turn["question"]},
                         {"role": "assistant", "content": turn.get("answer", "")}]
        messages.append({"role": "user", "content": rest.pop("question")})
        reply = httpx.post(stack.http_url + "/v1/chat/completions", json={"messages": messages, **rest},
                           headers=headers(key), timeout=30)
        error = reply.json().get("error") or {}
        return ("INVALID_ARGUMENT" if reply.status_code == 400 else str(reply.status_code)), error.get("message", "")
    return send


def mcp_sender(stack: Stack, key: str) -> Send:
    """Ask fields as the arguments of the MCP `ask` tool (JSON-RPC over streamable HTTP); a tool error reads
    `<code>: <field>: ...`."""
    def send(fields: dict[str, Any]) -> tuple[str, str]:
        reply = httpx.post(stack.http_url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                                          "params": {"name": "ask", "arguments": fields}},
                           headers={**headers(key), "accept": "application/json, text/event-stream"}, timeout=30)
        result = reply.json()["result"]
        code, _, message = result["content"][0]["text"].partition(": ") if result["isError"] else ("OK", "", "")
        return code, message
    return send


def assert_bounds_held(schema: dict, send: Send, base: dict[str, Any], passed: str, skip: set[str] = set()) -> int:
    """Each documented bound: at it, the request gets past the field (`passed`: the code or the field that
    fails next); one past it, INVALID_ARGUMENT naming the field."""
    probed = 0
    for field, kind, bound in bounds(schema):
        if field.removesuffix("[0]") in skip:
            continue
        code, message = send({**base, **sized(field, kind, bound)})
        assert passed in (code, message.split(":")[0]), (field, bound, code, message)
        code, message = send({**base, **sized(field, kind, bound + 1)})
        assert code == "INVALID_ARGUMENT" and message.startswith(field), (field, bound + 1, code, message)
        probed += 1
    return probed


def test_an_ask_is_held_to_its_documented_bounds_on_both_edges(stack: Stack, key: str, document: dict,
                                                               stub: gateway_pb2_grpc.GatewayStub) -> None:
    schema = document["components"]["schemas"]["AskRequest"]
    base = {"question": "What changed?", **POISON}
    assert_bounds_held(schema, http_sender(stack, key, "POST", "/api/chat/ask"), base, "end_date")
    probed = assert_bounds_held(schema, grpc_sender(stub.Ask, gateway_pb2.AskRequest, streaming=True), base,
                                "end_date")
    assert probed >= 10  # question, funds (count, each), conversation, tenant, user, top_k, documents (2), persona


def test_a_correction_and_a_rename_are_held_to_their_documented_bounds_on_both_edges(
        stack: Stack, key: str, document: dict, stub: gateway_pb2_grpc.GatewayStub) -> None:
    """Past the checks, an unknown conversation is NOT_FOUND: the field at its bound was accepted."""
    schemas = document["components"]["schemas"]
    correction = {"correction": "The right figure is 4%.", "question": "What was it?", "conversation_id": UNKNOWN}
    personal = {"tenant", "user_id"}  # another tenant or user is a 403 before the conversation is looked up
    for send in (http_sender(stack, key, "POST", "/api/corrections"),
                 grpc_sender(stub.Correct, gateway_pb2.CorrectionRequest)):
        assert assert_bounds_held(schemas["CorrectionBody"], send, correction, "NOT_FOUND", personal) >= 5
    rename = {"title": "Brazil"}
    http_rename = http_sender(stack, key, "PATCH", f"/api/conversations/{UNKNOWN}")
    assert assert_bounds_held(schemas["RenameBody"], http_rename, rename, "NOT_FOUND") == 1
    grpc_rename = grpc_sender(stub.RenameConversation, gateway_pb2.RenameConversationRequest)
    assert assert_bounds_held(schemas["RenameBody"], grpc_rename, {**rename, "conversation_id": UNKNOWN},
                              "NOT_FOUND") == 1


def test_a_transcript_is_held_to_its_documented_bounds_on_both_edges(stack: Stack, document: dict) -> None:
    """A date that is no calendar day is checked after every bounded field: its refusal means they passed."""
    admin = stack.key(DEMO, "declared-once-admin", "admin")
    schema = document["components"]["schemas"]["TranscriptBody"]
    base = {"raw_text": "The call.", "date": "2024-02-30"}
    assert assert_bounds_held(schema, http_sender(stack, admin, "POST", "/api/transcripts"), base, "date") >= 7
    stub = gateway_pb2_grpc.GatewayStub(channel(stack.address("gateway"), bearer(admin)))
    assert assert_bounds_held(schema, grpc_sender(stub.IngestTranscript, gateway_pb2.TranscriptRequest), base, "date",
                              skip={"polished_text"}) >= 6  # polished_text: the HTTP body's older name only


def test_the_documented_request_schemas_are_the_models_own(document: dict) -> None:
    """build() adds nothing to what the models declare (but the models a deployment offers, which only it
    knows): a limit restated in the document would show here."""
    schemas = document["components"]["schemas"]
    for model in (AskRequest, StopBody, CorrectionBody, RenameBody, TranscriptBody):
        declared = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, nested in declared.pop("$defs", {}).items():  # the document holds them beside the model
            assert schemas[name] == nested, name
        for prop in declared["properties"].values():  # FastAPI leaves a null default out
            if "default" in prop and prop["default"] is None:
                del prop["default"]
        served = schemas[model.__name__]
        if model is AskRequest:
            served = {**served, "properties": {**served["properties"], "model": declared["properties"]["model"]}}
        assert served == declared, model.__name__


def named_first(field: str, message: str) -> bool:
    """A refusal names the field first (`<field>: ...`), as the native edges do."""
    return message.startswith(field)


@dataclass(frozen=True)
class Edge:
    """An edge an Ask arrives by: the Ask fields it takes from its callers, those it leaves out (field ->
    why), how a request with some Ask fields is sent through it ((stack, key) -> Send: the outcome as a
    gRPC code name, INVALID_ARGUMENT for a 400 or a tool error), and whether a refusal's message names an
    Ask field (an edge that carries a field in a shape of its own may name it otherwise)."""

    name: str
    carries: frozenset[str]
    leaves_out: Mapping[str, str]
    sender: Callable[[Stack, str], Send]
    names: Callable[[str, str], bool] = named_first


EDGES = (
    # The body is the declaration itself (test_the_documented_request_schemas_are_the_models_own).
    Edge("http", frozenset(AskRequest.model_fields), {},
         lambda stack, key: http_sender(stack, key, "POST", "/api/chat/ask")),
    # ask_from_proto copies the message's fields by name: those the proto declares.
    Edge("grpc", frozenset(gateway_pb2.AskRequest.DESCRIPTOR.fields_by_name), ASK_LEFT_OUT,
         lambda stack, key: grpc_sender(gateway_pb2_grpc.GatewayStub(channel(stack.address("gateway"),
                                                                             bearer(key))).Ask,
                                        gateway_pb2.AskRequest, streaming=True)),
    # The OpenAI-compatible edge: its module's table of how each Ask field travels there (a message, an
    # extension field, or not carried and why); a refusal names `messages[i].content` and then the field.
    Edge("openai", frozenset(f for f, how in openai_request.ASK_FIELDS.items() if not how.startswith("not carried")),
         {f: how for f, how in openai_request.ASK_FIELDS.items() if how.startswith("not carried")},
         openai_sender, lambda field, message: field in message),
    # The MCP server's tools: ASK_FIELDS in services/gateway/api/mcp_tools.py says which Ask field each of
    # a tool's arguments is; `ask` takes them all.
    Edge("mcp", frozenset(mcp_tools.ASK_FIELDS["ask"].values()), {}, mcp_sender),
)
ASK_FIELDS = frozenset(AskRequest.model_fields)
BASE = {"question": "What changed?"}
# One value of each Ask field that the declaration refuses (naming the field), and one it accepts that
# makes a difference to the domain's AskInput. A new field needs both, or the tests below fail.
REFUSED: dict[str, Any] = {
    "question": " ", "data_sources": ["Fax"], "start_date": "2024-02-30", "end_date": "someday",
    "selected_funds": [f"Fund {i}" for i in range(51)], "conversation_id": "-x", "model": "no-such-model",
    "tenant": "t" * 129, "user_id": "u" * 129, "top_k": 0, "document_ids": ["notes/ "], "persona": "p" * 501,
    "context_window": "2h", "conversation_history": [{"question": "Why?", "answer": "a" * 20_001}], "format": "xml",
}
ACCEPTED: dict[str, Any] = {
    "question": "What did Kestrel buy?", "data_sources": ["Documents"], "start_date": "2024-01-01",
    "end_date": "2024-12-31", "selected_funds": ["Kestrel Emerging Markets"], "conversation_id": "c1",
    "model": "extractive", "tenant": "demo", "user_id": "ana", "top_k": 7, "document_ids": ["documents/memo"],
    "persona": "You are terse.", "context_window": "1w",
    "conversation_history": [{"question": "Who manages Kestrel?", "answer": "Ana [1]."}], "format": "notes",
}


@pytest.mark.parametrize("edge", EDGES, ids=lambda e: e.name)
def test_every_edge_accounts_for_every_ask_field(edge: Edge) -> None:
    """What an edge carries and what it leaves out are the declaration's fields, each once, each left out
    with a reason: a field added to the declaration (or the proto) and not to an edge fails here."""
    assert edge.carries <= ASK_FIELDS, f"{edge.name} carries undeclared {sorted(edge.carries - ASK_FIELDS)}"
    assert not edge.carries & set(edge.leaves_out), f"{edge.name} both carries and leaves out"
    assert edge.carries | set(edge.leaves_out) == ASK_FIELDS, \
        f"{edge.name} neither carries nor leaves out {sorted(ASK_FIELDS - edge.carries - set(edge.leaves_out))}"
    assert all(why.strip() for why in edge.leaves_out.values())


@pytest.mark.parametrize("field", sorted(ASK_FIELDS))
def test_each_field_has_a_value_the_declaration_refuses_naming_it_and_one_it_takes(field: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        AskRequest.checked({**BASE, field: REFUSED[field]})
    assert str(refused.value).startswith(field), str(refused.value)
    assert AskRequest.checked({**BASE, field: ACCEPTED[field]}).to_input() != AskRequest.checked(BASE).to_input()


@pytest.mark.parametrize("field", sorted(ASK_FIELDS))
def test_every_ask_field_reaches_the_domain_input_alike_through_both_native_edges(field: str) -> None:
    """The HTTP body (the declaration's model, then to_input) and the gRPC message (ask_from_proto) make the
    same AskInput, and the field changed it; one it keeps by name has the value sent."""
    sent = {**BASE, field: ACCEPTED[field]}
    over_http = AskRequest.checked(sent).to_input()
    message = gateway_pb2.AskRequest(**{k: v for k, v in sent.items() if k not in ASK_LEFT_OUT})
    assert ask_from_proto(message, sent.get("format", "")) == over_http
    if field in AskInput.__dataclass_fields__ and field != "conversation_history":
        assert getattr(over_http, field) == ACCEPTED[field]


def test_every_ask_field_an_edge_carries_reaches_the_declaration(stack: Stack, key: str) -> None:
    """Sent with a value the declaration refuses, each field an edge carries is refused naming it: the edge
    handed it to the declaration rather than dropping it."""
    for edge in EDGES:
        send = edge.sender(stack, key)
        for field in sorted(edge.carries):
            code, message = send({**BASE, field: REFUSED[field]})
            assert code == "INVALID_ARGUMENT" and edge.names(field, message), (edge.name, field, code, message)


def test_every_ask_field_sets_the_scope_or_is_listed_as_not_setting_it() -> None:
    """A filter added to the Ask is either a field of the scope (so in the cache key) or says why hits found
    under another value of it answer as well; each Scope field is set by the request or read from the question."""
    assert not set(ASKED) & set(NOT_SCOPING)
    assert set(ASKED) | set(NOT_SCOPING) == ASK_FIELDS, sorted(ASK_FIELDS - set(ASKED) - set(NOT_SCOPING))
    assert set(ASKED.values()) | READ_FROM_QUESTION == {f.name for f in dataclasses.fields(Scope)}
    assert all(why.strip() for why in NOT_SCOPING.values())


@pytest.mark.parametrize("field", sorted(ASKED))
def test_each_scoping_field_of_the_ask_is_in_the_key(field: str) -> None:
    """ASKED says which Scope field an Ask field sets: Scope.asked reads it, so another value is another key."""
    default, changed = (Scope.asked(AskRequest.checked(sent).to_input())
                        for sent in (BASE, {**BASE, field: ACCEPTED[field]}))
    assert changed.key != default.key
    assert getattr(changed, ASKED[field]) != getattr(default, ASKED[field])


def test_a_field_added_to_the_scope_is_in_the_key() -> None:
    """The key is made of the declaration's fields, none named: an `authors` filter added is in it."""
    widened = dataclasses.make_dataclass("WithAuthors", [("authors", tuple, ())], bases=(Scope,), frozen=True)
    assert widened(authors=("Ana",)).key != widened(authors=("Bo",)).key != widened().key == Scope().key
    assert Scope(funds=("A", "B")).key != Scope(funds=("A",)).key != Scope(documents=("A",)).key
