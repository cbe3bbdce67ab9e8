"""Which vector conversation memory sends with a question (`Memory._remember`): the question's search
vector only where the embedder would give the stored text that very vector as a memory: the text as stored
(no citation markers stripped), surely within the backend's shared short path (ASCII, at most 62
characters besides spaces, with the model's two markers 64 tokens), on a backend that shares it. The
answer is always embedded by the retriever."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ragmesh.errors import Unavailable
from ragmesh.store.sqlite import SqliteStore
from ragmesh.v1 import retriever_pb2
from services.gateway.memory import Memory

VECTOR = np.full(384, 1 / np.sqrt(384), np.float32)


class Retriever:
    """Keeps what memory sends, as the retriever would take it."""

    def __init__(self) -> None:
        self.sent: list[retriever_pb2.Document] = []

    async def ingest(self, documents: AsyncIterator[retriever_pb2.Document]) -> AsyncIterator[retriever_pb2.IngestProgress]:
        async for doc in documents:
            self.sent.append(doc)
            yield retriever_pb2.IngestProgress(doc_id=doc.doc_id, stage=retriever_pb2.INDEXED)


class Embedder:
    def __init__(self, backend: str = "OnnxMiniLMEmbedder", down: bool = False) -> None:
        self.backend, self.down = backend, down

    async def info(self) -> SimpleNamespace:
        if self.down:
            raise Unavailable("embedder: restarting")
        return SimpleNamespace(backend=self.backend)


def _sent(tmp_path: Path, question: str, embedder: Embedder | None = None) -> dict[str, list[float]]:
    """Role -> the vector sent with that message."""
    store = SqliteStore(tmp_path / "m.db")
    store.ensure_conversation("t", "u", "c")
    retriever = Retriever()
    memory = Memory(store, retriever, None, embedder or Embedder())  # type: ignore[arg-type]  # no generator used
    asyncio.run(memory._remember("t", "u", "c", [("q1", "user", question), ("a1", "assistant", "It sails at 9.")],
                                 VECTOR))
    return {doc.metadata["role"]: list(doc.vector) for doc in retriever.sent}


def test_a_short_question_goes_with_its_vector_and_the_answer_without(tmp_path: Path) -> None:
    sent = _sent(tmp_path, "When does the ferry sail on Sundays?")
    assert np.allclose(sent["user"], VECTOR) and sent["assistant"] == []


@pytest.mark.parametrize("question, why", [
    ("x" * 63, "past 62 characters besides spaces"),
    ("When does the ferry sail? [1]", "stored without its citation marker: another text"),
    ("Quand part le bac à Noël ?", "not ASCII: a character may make several tokens"),
])
def test_a_question_the_vector_may_not_fit_is_embedded_by_the_retriever(tmp_path: Path, question: str,
                                                                         why: str) -> None:
    assert _sent(tmp_path, question)["user"] == [], why


def test_62_characters_besides_spaces_still_fit(tmp_path: Path) -> None:
    assert _sent(tmp_path, " ".join(["x" * 31, "y" * 31]))["user"] != []


@pytest.mark.parametrize("embedder", [Embedder("SentenceTransformersEmbedder"), Embedder("GeminiEmbedder"),
                                      Embedder(down=True)])
def test_on_a_backend_that_embeds_questions_otherwise_no_vector_goes(tmp_path: Path, embedder: Embedder) -> None:
    assert _sent(tmp_path, "When does the ferry sail on Sundays?", embedder)["user"] == []
