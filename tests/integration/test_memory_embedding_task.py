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

from ragmesh.types import MEMORY_COLLECTION
from ragmesh.v1 import embedder_pb2, embedder_pb2_grpc, gateway_pb2_grpc, retriever_pb2, retriever_pb2_grpc
from tests.auth import bearer, channel, headers
from tests.stack import Stack

TENANT = "embedtask"  # a tenant of its own: nothing of the demo corpus's is embedded again
QUESTION = "What did the harbour committee decide about the ferry timetable?"
UPLOAD = "The harbour committee moved the winter ferry timetable to half-hourly sailings from December."
# More characters than the model's short path surely holds in tokens: embedded again as a memory.
LONG_QUESTION = ("Which decisions did the harbour committee take about the winter ferry timetable, the new pier "
                 "and the fares for residents, and when do they apply?")


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
    assert recorder.tasks_of(QUESTION) == {"QUERY"}, recorder.calls  # remembered with its search's vector
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


def _ask(stack: Stack, key: str, question: str) -> str:
    reply = httpx.post(stack.http_url + "/api/chat/ask", headers=headers(key), timeout=120, json={"question": question})
    assert reply.status_code == 200, reply.text
    stack.call(stack.app("gateway").memory.idle(), timeout=60)
    return reply.json()["answer"]


def _remembered(stack: Stack, text: str) -> np.ndarray:
    """The vector the retriever stored for a message of TENANT's conversation memory."""
    stored = [s for s in stack.app("retriever").store.iter_chunks(MEMORY_COLLECTION)
              if s.chunk.tenant == TENANT and s.chunk.text == text]
    assert len(stored) == 1, stored
    return stored[0].vector


def test_a_short_question_is_remembered_with_its_search_vector_and_a_long_one_embedded_again(
        stack: Stack, recorder: Recorder) -> None:
    """The embedder is asked for the question once (its search); the vector stored is the one the embedder
    gives the question as a memory. A question that may be past the short path is embedded again."""
    key = stack.key(TENANT, "reuser", "admin")
    question = "When does the ferry sail on Sundays in winter?"
    _ask(stack, key, question)
    assert recorder.tasks_of(question) == {"QUERY"}, recorder.calls
    expected = recorder.real([question], "DOCUMENT_FAST")[0]
    assert np.allclose(_remembered(stack, question), expected, atol=1e-6)
    _ask(stack, key, LONG_QUESTION)
    assert recorder.tasks_of(LONG_QUESTION) == {"QUERY", "DOCUMENT_FAST"}, recorder.calls


def _sent(stack: Stack, metadata, values: list[float] | None,  # noqa: ANN001 - gRPC metadata
          doc_id: str = "planted") -> retriever_pb2.IngestProgress:
    """Retriever.Ingest of one short text with `values` as its vector, as `metadata` calls."""
    doc = retriever_pb2.Document(doc_id=doc_id, collection="documents", text="The ferry is free.", vector=values,
                                 summarize=False)
    with channel(stack.address("retriever"), metadata) as ch:
        return list(retriever_pb2_grpc.RetrieverStub(ch).Ingest(iter([doc]), timeout=120))[-1]


def test_only_the_service_credential_sends_a_vector_and_it_must_be_the_embedders_kind(stack: Stack) -> None:
    dims = stack.app("retriever").registry.dimensions
    unit = [1.0] + [0.0] * (dims - 1)
    admin = bearer(stack.key(TENANT, "uploader", "admin"))
    assert _sent(stack, admin, None).stage == retriever_pb2.INDEXED  # the same text without a vector: taken
    refused = _sent(stack, admin, unit)  # a tenant's key, an admin's too, cannot choose what is searched
    assert refused.stage == retriever_pb2.FAILED and refused.error.startswith("vector is a platform"), refused
    service = stack.service_metadata(TENANT)
    for values, why in (([1.0] * 3, "dimensions"), ([float("nan")] + [0.0] * (dims - 1), "finite"),
                        ([0.5] * dims, "length 1")):
        bad = _sent(stack, service, values)
        assert bad.stage == retriever_pb2.FAILED and bad.error.startswith("vector: ") and why in bad.error, bad
    assert _sent(stack, service, unit, "platforms").stage == retriever_pb2.INDEXED
    stored = stack.app("retriever").store.document_chunks(TENANT, "documents", "platforms")
    assert [s.vector.tolist() for s in stored] == [unit]


def test_a_client_of_the_gateway_cannot_plant_a_vector(stack: Stack) -> None:
    key = stack.key(TENANT, "planter", "admin")
    dims = stack.app("retriever").registry.dimensions
    doc = retriever_pb2.Document(doc_id="planted", collection="documents", text="The ferry is free.",
                                 vector=[1.0] + [0.0] * (dims - 1))
    with channel(stack.address("gateway"), bearer(key)) as ch:
        with pytest.raises(grpc.RpcError) as refused:
            list(gateway_pb2_grpc.GatewayStub(ch).Ingest(iter([doc]), timeout=120))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and refused.value.details().startswith("vector:")
    reply = httpx.post(stack.http_url + "/api/documents", headers=headers(key), timeout=120, json={
        "collection": "documents", "documents": [{"doc_id": "planted", "text": "The ferry is free.", "vector": [1.0]}]})
    assert reply.status_code == 400 and "vector" in reply.text, reply.text


def test_a_follow_up_searched_in_other_words_is_embedded_again_as_asked(stack: Stack, recorder: Recorder) -> None:
    """Its search's vector is of the rewritten question, not of the text memory stores."""
    first = httpx.post(stack.http_url + "/api/chat/ask", headers=stack.headers, timeout=120,
                       json={"question": "Who left Northwind in early 2025?"})
    assert first.status_code == 200, first.text
    follow_up = "And at Harborview?"
    reply = httpx.post(stack.http_url + "/api/chat/ask", headers=stack.headers, timeout=120, json={
        "question": follow_up, "conversation_id": first.json()["conversation_id"]})
    assert reply.status_code == 200, reply.text
    stack.call(stack.app("gateway").memory.idle(), timeout=60)
    searched = [t for task, texts in recorder.calls if task == "QUERY" for t in texts if "Harborview" in t]
    assert searched and follow_up not in searched, recorder.calls  # searched in other words
    assert recorder.tasks_of(follow_up) == {"DOCUMENT_FAST"}, recorder.calls
