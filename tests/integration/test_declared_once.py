"""Every limit is declared once: the bounds the served OpenAPI document states are the bounds both edges
hold, read off the document and probed on HTTP and on gRPC. A field at its documented bound passes (the
request then fails on another field, or on an unknown conversation), one past it is refused naming it;
so a limit written a second time anywhere (a route, the servicer, the domain check, the proto) with
another value fails here. And the document is the models' own: no request constraint is added after
FastAPI generates it."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import httpx
import pytest

from ragmesh.v1 import gateway_pb2, gateway_pb2_grpc
from services.gateway.api.chat import StopBody
from services.gateway.api.conversations import RenameBody
from services.gateway.correction_request import CorrectionBody
from services.gateway.request import AskRequest
from services.gateway.transcript_request import TranscriptBody
from tests.auth import bearer, channel, headers
from tests.stack import DEMO, Stack

UNKNOWN = "0" * 32  # a well-formed conversation id no conversation has
POISON = {"context_window": "bogus"}  # a field checked after every bounded one: its refusal means they passed
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
        return {name: [f"d{i}" for i in range(size)]}
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
    assert_bounds_held(schema, http_sender(stack, key, "POST", "/api/chat/ask"), base, "context_window")
    probed = assert_bounds_held(schema, grpc_sender(stub.Ask, gateway_pb2.AskRequest, streaming=True), base,
                                "context_window")
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
        for prop in declared["properties"].values():  # FastAPI leaves a null default out
            if "default" in prop and prop["default"] is None:
                del prop["default"]
        served = schemas[model.__name__]
        if model is AskRequest:
            served = {**served, "properties": {**served["properties"], "model": declared["properties"]["model"]}}
        assert served == declared, model.__name__


def test_gateway_ask_request_carries_the_fields_the_model_declares() -> None:
    """The proto and the model name the same fields (format: the notes contract is its own method, AskNotes)."""
    proto = set(gateway_pb2.AskRequest.DESCRIPTOR.fields_by_name)
    assert proto == set(AskRequest.model_fields) - {"format"}
