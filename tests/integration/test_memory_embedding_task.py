"""What the embedder's model is asked for conversation memory, over the real stack: a turn is remembered with its
question's search vector (nothing of it embedded again, the answer not at all); a turn that comes without one is
embedded on the fastest document encoder (Task DOCUMENT_FAST), while the corpus keeps DOCUMENT. A task value the
embedder does not know is the caller's error."""
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
UNVECTORED_TURN = "User: Which pier do the winter ferries use?\n\nThe new pier, from March."  # sent with no vector
# More than the model's short path holds in tokens: a long question too is remembered with its search's vector.
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


def test_a_turn_is_remembered_with_its_search_vector_and_an_upload_embedded_as_document(
        stack: Stack, recorder: Recorder) -> None:
    key = stack.key(TENANT, "analyst", "admin")
    reply = httpx.post(stack.http_url + "/api/chat/ask", headers=headers(key), timeout=120, json={"question": QUESTION})
    assert reply.status_code == 200, reply.text
    answer = reply.json()["answer"]
    stack.call(stack.app("gateway").memory.idle(), timeout=60)
    assert recorder.tasks_of(QUESTION) == {"QUERY"}, recorder.calls  # its search's, once
    assert recorder.tasks_of(answer[:40]) == set(), (answer, recorder.calls)  # found by its words

    turn = retriever_pb2.Document(doc_id="unvectored", collection=MEMORY_COLLECTION, text=UNVECTORED_TURN,
                                  metadata={"user_id": "analyst", "conversation_id": "none"}, summarize=False)
    doc = retriever_pb2.Document(doc_id="timetable", collection="documents", text=UPLOAD, summarize=False)
    for sent, metadata in ((turn, stack.service_metadata(TENANT, "analyst")), (doc, bearer(key))):
        with channel(stack.address("retriever"), metadata) as ch:
            progress = list(retriever_pb2_grpc.RetrieverStub(ch).Ingest(iter([sent]), timeout=120))
            assert [p.error for p in progress if p.error] == [] and progress[-1].stage == retriever_pb2.INDEXED
    assert recorder.tasks_of(UNVECTORED_TURN) == {"DOCUMENT_FAST"}, recorder.calls
    assert recorder.tasks_of(UPLOAD) == {"DOCUMENT"}, recorder.calls
    with channel(stack.address("retriever"), bearer(key)) as ch:
        retriever_pb2_grpc.RetrieverStub(ch).Delete(retriever_pb2.DeleteRequest(collection="documents",
                                                                                 doc_ids=["timetable"]), timeout=30)


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


def _remembered(stack: Stack, question: str) -> list[np.ndarray]:
    """The vectors the retriever stored for the chunks of TENANT's remembered turn that asked `question`."""
    chunks = [s for s in stack.app("retriever").store.iter_chunks(MEMORY_COLLECTION) if s.chunk.tenant == TENANT]
    turn = {s.chunk.doc_id for s in chunks if s.chunk.text.startswith(f"User: {question}")}
    assert len(turn) == 1, (question, turn)
    return [s.vector for s in chunks if s.chunk.doc_id in turn and s.vector is not None]


def test_a_turn_long_or_short_is_found_by_its_question_search_vector(stack: Stack, recorder: Recorder) -> None:
    """The embedder is asked for the question once (its search), for the answer never; each of the turn's
    chunks is stored with the question's vector."""
    key = stack.key(TENANT, "reuser", "admin")
    for question in ("When does the ferry sail on Sundays in winter?", LONG_QUESTION):
        _ask(stack, key, question)
        assert recorder.tasks_of(question) == {"QUERY"}, recorder.calls
        expected = recorder.real([question], "QUERY")[0]
        vectors = _remembered(stack, question)
        assert vectors and all(np.allclose(v, expected, atol=1e-6) for v in vectors), question


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


def test_a_follow_up_searched_in_other_words_is_remembered_by_its_question_as_asked(
        stack: Stack, recorder: Recorder) -> None:
    """Its search's vector is of the rewritten question: the turn is found by the question as asked, embedded
    as a question."""
    first = httpx.post(stack.http_url + "/api/chat/ask", headers=stack.headers, timeout=120,
                       json={"question": "Who left Northwind in early 2025?"})
    assert first.status_code == 200, first.text
    follow_up = "And at Harborview?"
    reply = httpx.post(stack.http_url + "/api/chat/ask", headers=stack.headers, timeout=120, json={
        "question": follow_up, "conversation_id": first.json()["conversation_id"]})
    assert reply.status_code == 200, reply.text
    stack.call(stack.app("gateway").memory.idle(), timeout=60)
    searched = [t for task, texts in recorder.calls if task == "QUERY" for t in texts if "Harborview" in t]
    assert searched and follow_up not in searched[:1], recorder.calls  # searched in other words
    assert [task for task, texts in recorder.calls if follow_up in texts] == ["QUERY"], recorder.calls
