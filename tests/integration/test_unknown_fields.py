"""A field a body does not declare is refused, naming it, on every JSON route of every edge: a client
written to another contract (a misspelt `top_K`, a field of a newer version) learns at once that it is
not heard, instead of getting an answer that silently ignored it."""
from __future__ import annotations

import json

import httpx
import pytest

from tests.auth import headers
from tests.stack import Stack

UNKNOWN = "colour"
# One valid body per JSON route of /openapi.json ("{conversation}" is filled in); a route added without an
# entry here fails test_every_json_route_is_tried.
BODIES: dict[tuple[str, str], dict] = {
    ("post", "/api/chat/ask"): {"question": "Who manages Kestrel?"},
    ("post", "/api/chat/ask/stream"): {"question": "Who manages Kestrel?"},
    ("post", "/api/chat/stop"): {"conversation_id": "{conversation}"},
    ("post", "/api/corrections"): {"question": "Who manages Kestrel?", "wrong_answer": "Bob",
                                   "correction": "Ana", "conversation_id": "{conversation}"},
    ("patch", "/api/conversations/{conversation_id}"): {"title": "Kestrel"},
    ("post", "/api/transcripts"): {"raw_text": "We talked about Kestrel."},
    ("post", "/api/documents"): {"collection": "documents", "documents": [
        {"doc_id": "unknown-fields", "text": "A memo about Kestrel."}]},
    ("put", "/api/documents/{collection}/{doc_id}/access"): {"users": ["ana"]},
    ("put", "/api/collections/{collection}/access"): {"members_upload": True, "default_access": {"users": []}},
}
PATHS = {"{collection}": "documents", "{doc_id}": "unknown-fields"}
TENANT = "fields"  # a tenant of its own: the collection rule it sets reaches no other test


@pytest.fixture(scope="module")
def admin(stack: Stack) -> str:
    return stack.key(TENANT, "fields-admin", "admin")


@pytest.fixture(scope="module")
def conversation(stack: Stack, admin: str) -> str:
    reply = httpx.post(stack.http_url + "/api/chat/ask", headers=headers(admin), timeout=60,
                       json={"question": "Who manages Kestrel?"})
    assert reply.status_code == 200, reply.text
    return reply.json()["conversation_id"]


def json_routes(stack: Stack) -> set[tuple[str, str]]:
    document = httpx.get(stack.http_url + "/openapi.json", timeout=30).json()
    return {(method, path) for path, ops in document["paths"].items() for method, op in ops.items()
            if "application/json" in op.get("requestBody", {}).get("content", {})}


def test_every_json_route_is_tried(stack: Stack) -> None:
    assert json_routes(stack) == set(BODIES)


@pytest.mark.parametrize("method, path", sorted(BODIES), ids=lambda v: v)
def test_an_unknown_field_is_refused_naming_it(stack: Stack, admin: str, conversation: str, method: str,
                                               path: str) -> None:
    url = path.replace("{conversation_id}", conversation)
    for placeholder, value in PATHS.items():
        url = url.replace(placeholder, value)
    body = json.loads(json.dumps(BODIES[method, path]).replace("{conversation}", conversation))
    reply = httpx.request(method.upper(), stack.http_url + url, json={**body, UNKNOWN: "red"},
                          headers=headers(admin), timeout=60)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["message"].startswith(f"{UNKNOWN}:"), reply.text


def test_the_body_without_it_is_taken(stack: Stack, admin: str, conversation: str) -> None:
    """The bodies above are valid: the refusal is the unknown field's, not another fault's."""
    for (method, path), body in BODIES.items():
        if path.endswith("/stream") or path.endswith("/stop"):
            continue
        url = path.replace("{conversation_id}", conversation)
        for placeholder, value in PATHS.items():
            url = url.replace(placeholder, value)
        body = json.loads(json.dumps(body).replace("{conversation}", conversation))
        reply = httpx.request(method.upper(), stack.http_url + url, json=body, headers=headers(admin), timeout=60)
        assert reply.status_code < 300, (method, path, reply.text)


def test_a_text_document_with_an_unknown_field_is_refused_naming_it(stack: Stack, admin: str) -> None:
    """A record (no `text`) is the retriever's to parse, its fields its own; a text document is declared."""
    reply = httpx.post(stack.http_url + "/api/documents", headers=headers(admin), timeout=60, json={
        "collection": "documents", "documents": [{"doc_id": "d", "text": "A memo.", "titel": "Memo"}]})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["message"].startswith("documents[0].titel:"), reply.text


def test_the_openai_edge_refuses_an_unknown_parameter(stack: Stack, admin: str) -> None:
    reply = httpx.post(stack.http_url + "/v1/chat/completions", headers=headers(admin), timeout=60, json={
        "model": "ragmesh", "messages": [{"role": "user", "content": "Who manages Kestrel?"}], UNKNOWN: "red"})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == UNKNOWN, reply.text
