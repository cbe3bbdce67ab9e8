"""Conversation memory is embedded on the fastest document encoder (Task DOCUMENT_FAST: half the CPU of an
answer's memory writes) while the corpus keeps DOCUMENT: what the embedder's model is asked, over the real
stack (the gateway's memory ingest through the retriever, and a corpus upload). A task value the embedder
does not know is the caller's error."""
from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import httpx
import numpy as np
import pytest

from ragmesh.v1 import embedder_pb2, embedder_pb2_grpc, retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel, headers
from tests.stack import Stack

TENANT = "embedtask"  # a tenant of its own: nothing of the demo corpus's is embedded again
QUESTION = "What did the harbour committee decide about the ferry timetable?"
UPLOAD = "The harbour committee moved the winter ferry timetable to half-hourly sailings from December."


class Recorder:
    """The embedder's model, recording each call's task and texts on the way through."""

    def __init__(self, embed) -> None:  # noqa: ANN001 - the backend's bound embed
        self.real = embed
        self.calls: list[tuple[str, list[str]]] = []
        self.lock = threading.Lock()

    def __call__(self, texts: list[str], task: str) -> np.ndarray:
        with self.lock:
            self.calls.append((task, list(texts)))
        return self.real(texts, task)

    def tasks_of(self, text: str) -> set[str]:
        with self.lock:
            return {task for task, texts in self.calls if any(text in t for t in texts)}


@pytest.fixture
def recorder(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    stack.call(stack.app("gateway").memory.idle(), timeout=60)  # earlier tests' memory is not recorded
    backend = stack.app("embedder").backend
    recording = Recorder(backend.embed)
    monkeypatch.setattr(backend, "embed", recording)
    yield recording


def test_memory_is_embedded_as_document_fast_and_an_upload_as_document(stack: Stack, recorder: Recorder) -> None:
    key = stack.key(TENANT, "analyst", "admin")
    reply = httpx.post(stack.http_url + "/api/chat/ask", headers=headers(key), timeout=120, json={"question": QUESTION})
    assert reply.status_code == 200, reply.text
    answer = reply.json()["answer"]
    stack.call(stack.app("gateway").memory.idle(), timeout=60)
    assert recorder.tasks_of(QUESTION) == {"QUERY", "DOCUMENT_FAST"}, recorder.calls  # asked, then remembered
    assert recorder.tasks_of(answer[:40]) == {"DOCUMENT_FAST"}, (answer, recorder.calls)

    doc = retriever_pb2.Document(doc_id="timetable", collection="documents", text=UPLOAD, summarize=False)
    with channel(stack.address("retriever"), bearer(key)) as ch:
        stub = retriever_pb2_grpc.RetrieverStub(ch)
        progress = list(stub.Ingest(iter([doc]), timeout=120))
        assert [p.error for p in progress if p.error] == [] and progress[-1].stage == retriever_pb2.INDEXED, progress
        stub.Delete(retriever_pb2.DeleteRequest(collection="documents", doc_ids=["timetable"]), timeout=30)
    assert recorder.tasks_of(UPLOAD) == {"DOCUMENT"}, recorder.calls


def _embed(stack: Stack, task: int) -> tuple[grpc.StatusCode, str]:
    with channel(stack.address("embedder"), stack.service_metadata()) as ch:
        try:
            embedder_pb2_grpc.EmbedderStub(ch).Embed(embedder_pb2.EmbedRequest(texts=["harbour"], task=task), timeout=60)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as exc:
            return exc.code(), exc.details()


def test_a_task_the_embedder_does_not_know_is_refused_naming_the_field(stack: Stack) -> None:
    """proto3 keeps an unknown enum value as its number: it used to be embedded as a document."""
    code, details = _embed(stack, 7)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("task: "), details
    for known in embedder_pb2.Task.values():  # TASK_UNSPECIFIED is a document, as before
        assert _embed(stack, known) == (grpc.StatusCode.OK, "")
