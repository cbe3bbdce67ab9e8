"""POST /api/documents: the gateway's upload router mounted on a small FastAPI app against the
stack's retriever. Multipart files and JSON text stream progress as SSE `data:` lines, a bad
file is an error event naming it while the others go in, and a bad request is an HTTP 400. The router
authenticates with the gateway's own dependency; the client sends the stack's admin key (tenant DEMO),
and the retriever client calls as the gateway does, with the service token on the caller's behalf."""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ragmesh.admission import Admission
from ragmesh.clients import ClientAuth, RetrieverClient
from ragmesh.identity.authenticator import Authenticator
from ragmesh.store.lazy import LazyStore
from services.gateway.api.auth import Identifier, caller_dependency
from services.gateway.api.documents import documents_router
from services.gateway.api.limits import AdmissionGuard
from services.gateway.library import Library
from services.gateway.limits import RateLimiter
from services.gateway.upload_memory import TenantBytes
from tests.stack import Stack
from tests.unit.test_ingest_parsers import TRANSCRIPT, docx_bytes, pdf_bytes, sentence

MAX_BYTES = 200_000


async def no_funds(tenant: str) -> list[str]:
    return []


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[TestClient]:
    clients: list[RetrieverClient] = []

    def retriever() -> RetrieverClient:  # made on first use, inside the app's event loop
        if not clients:
            clients.append(RetrieverClient(stack.address("retriever"), 10, 120, ClientAuth.service(stack.settings)))
        return clients[0]

    store = LazyStore(stack.settings)
    app = FastAPI()  # behind the bridge's front door, which identifies the caller for the router
    identifier = Identifier(Authenticator(stack.settings, store, "users"), 8, 64)
    app.add_middleware(AdmissionGuard, identifier=identifier, admission=Admission("test", 0), max_body=MAX_BYTES,
                       max_upload=10 * MAX_BYTES, body_timeout_s=60, upload_timeout_s=60, bodies_per_user=0)
    library = Library(retriever, no_funds)
    app.include_router(documents_router(retriever, library, MAX_BYTES, caller_dependency(), RateLimiter(0),
                                        TenantBytes(64 * 1024 * 1024)))
    try:
        with TestClient(app, headers=stack.headers) as test_client:
            yield test_client
    finally:
        store.close()


def events(response) -> list[dict]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    lines = [line for line in response.text.split("\n") if line]
    assert all(line.startswith("data: ") for line in lines), lines
    return [json.loads(line[len("data: "):]) for line in lines]


def test_uploaded_files_stream_their_progress_and_a_bad_file_fails_alone(client: TestClient) -> None:
    pdf = pdf_bytes([" ".join(sentence(f"upload page{n}", i) for i in range(4)) for n in (1, 2)])
    files = [
        ("files", ("report.pdf", pdf, "application/pdf")),
        ("files", ("broken.pdf", b"%PDF-1.4 nothing here", "application/pdf")),
        ("files", ("huge.txt", b"x" * (MAX_BYTES + 1), "text/plain")),
        ("files", ("memo.docx", docx_bytes([("h", "Memo"), ("p", "The canteen opens at nine.")]), "application/octet-stream")),
    ]
    got = events(client.post("/api/documents", files=files,
                             data={"collection": "ingest_http", "meta": ["team=ops"], "summarize": "false"}))
    stages: dict[str, list[str]] = {}
    for e in got[:-1]:
        stages.setdefault(e["doc_id"], []).append(e["stage"])
    assert stages == {
        "huge.txt": ["FAILED"],  # refused before it was sent
        "report.pdf": ["PARSED", "CHUNKED", "EMBEDDED", "INDEXED"],
        "broken.pdf": ["FAILED"],
        "memo.docx": ["PARSED", "CHUNKED", "EMBEDDED", "INDEXED"],
    }
    errors = {e["filename"]: e["error"] for e in got if e.get("stage") == "FAILED"}
    assert errors["broken.pdf"].startswith("broken.pdf: is not a readable PDF")
    assert errors["huge.txt"] == f"huge.txt: is {MAX_BYTES + 1:,} bytes, over the limit of {MAX_BYTES:,} bytes"
    indexed = [e for e in got if e.get("stage") == "INDEXED"]
    assert got[-1] == {"done": True, "documents": 2, "chunks": sum(e["chunks"] for e in indexed),
                       "redactions": 0, "errors": 2}
    assert all(e["doc_type"] == "USER" and e["summarized"] is False for e in indexed)


def test_json_text_and_transcript_records(client: TestClient) -> None:
    body = {"collection": "ingest_http", "metadata": {"source": "api"}, "documents": [
        {"doc_id": "note-1", "text": "Call me at 415-555-0134 about the roof repair.", "date": "2024-06-01"},
        TRANSCRIPT,
    ]}
    got = events(client.post("/api/documents", json=body))
    final = {e["doc_id"]: e for e in got if e.get("stage") in ("INDEXED", "FAILED")}
    assert final["note-1"]["stage"] == "INDEXED" and final["note-1"]["redactions"] == 1
    assert final["note-1"]["sensitivity"] == "HIGH"
    assert final["t-1"]["stage"] == "INDEXED" and final["t-1"]["filename"] == "record-2.json"
    again = events(client.post("/api/documents", json=body))  # the same content: nothing to redo
    assert [e["stage"] for e in again if "stage" in e] == ["UNCHANGED", "UNCHANGED"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"json": {"documents": [{"doc_id": "a", "text": "x"}]}}, "collection: must be"),
    ({"json": {"collection": "bad name!", "documents": [{"doc_id": "a", "text": "x"}]}}, "collection: must be"),
    ({"json": {"collection": "c", "documents": []}}, "documents: must be a non-empty list"),
    ({"json": {"collection": "c", "documents": [{"text": "no id"}]}}, "a text document needs"),
    ({"json": {"collection": "c", "summarize": "yes", "documents": [{"doc_id": "a", "text": "x"}]}}, "summarize"),
    ({"content": b"{not json", "headers": {"content-type": "application/json"}}, "body: is not valid JSON"),
    ({"content": b"hello", "headers": {"content-type": "text/plain"}}, "content-type: send files as multipart"),
    ({"data": {"collection": "c"}, "files": [("other", ("a.txt", b"x", "text/plain"))]}, "files: no file uploaded"),
    ({"data": {"collection": "c", "metadata": "[1]"}, "files": [("files", ("a.txt", b"x", "text/plain"))]}, "metadata"),
    ({"data": {"collection": "c", "meta": "novalue"}, "files": [("files", ("a.txt", b"x", "text/plain"))]}, "meta:"),
])
def test_a_bad_request_is_a_400_before_any_event(client: TestClient, kwargs: dict, message: str) -> None:
    response = client.post("/api/documents", **kwargs)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT" and message in error["message"], error
