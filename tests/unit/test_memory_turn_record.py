"""What conversation memory sends for a turn (`Memory._remember`): one record holding the question and the answer
(its citation markers stripped), with the question's vector: its search's when it had one, else embedded now as a
question; with the embedder down, no vector (the retriever then embeds the text). Nothing of the answer is
embedded by the gateway, and no turn is summarized (a long answer would cost a generator call nothing reads)."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from ragmesh.errors import Unavailable
from ragmesh.store.sqlite import SqliteStore
from ragmesh.v1 import retriever_pb2
from services.gateway.memory import Memory

DIMS = 384
VECTOR = np.full(DIMS, 1 / np.sqrt(DIMS), np.float32)
EMBEDDED = np.eye(DIMS, dtype=np.float32)[0]
QUESTION, ANSWER = "When does the ferry sail on Sundays?", "It sails at 9 [1] and at 17 [2]."


class Retriever:
    """Keeps what memory sends, as the retriever would take it."""

    def __init__(self) -> None:
        self.sent: list[retriever_pb2.Document] = []

    async def ingest(self, documents: AsyncIterator[retriever_pb2.Document]) -> AsyncIterator[retriever_pb2.IngestProgress]:
        async for doc in documents:
            self.sent.append(doc)
            yield retriever_pb2.IngestProgress(doc_id=doc.doc_id, stage=retriever_pb2.INDEXED)


class Embedder:
    def __init__(self, down: bool = False) -> None:
        self.down = down
        self.asked: list[tuple[list[str], str]] = []

    async def embed(self, texts: list[str], task: str = "DOCUMENT", timeout: float | None = None) -> np.ndarray:
        self.asked.append((texts, task))
        if self.down:
            raise Unavailable("embedder: restarting")
        return np.stack([EMBEDDED] * len(texts))


def _sent(tmp_path: Path, vector: np.ndarray | None, embedder: Embedder,
          messages: list[tuple[str, str, str]] | None = None) -> list[retriever_pb2.Document]:
    store = SqliteStore(tmp_path / "m.db")
    store.ensure_conversation("t", "u", "c")
    retriever = Retriever()
    memory = Memory(store, retriever, None, embedder)  # type: ignore[arg-type]  # no generator used
    turn = messages if messages is not None else [("q1", "user", QUESTION), ("a1", "assistant", ANSWER)]
    asyncio.run(memory._remember("t", "u", "c", turn, vector))
    return retriever.sent


def test_a_turn_is_one_record_of_question_and_answer_with_its_search_vector(tmp_path: Path) -> None:
    embedder = Embedder()
    [turn] = _sent(tmp_path, VECTOR, embedder)
    assert turn.doc_id == "q1" and turn.collection == "conversations" and turn.metadata["role"] == "turn"
    assert turn.text == f"User: {QUESTION}\n\nIt sails at 9 and at 17."  # the markers cite nothing here
    assert turn.metadata["user_id"] == "u" and turn.metadata["conversation_id"] == "c"
    assert np.allclose(turn.vector, VECTOR) and embedder.asked == []
    assert turn.HasField("summarize") and not turn.summarize  # however long the answer: no generator call


def test_a_turn_whose_search_had_no_vector_embeds_its_question_as_a_question(tmp_path: Path) -> None:
    embedder = Embedder()
    [turn] = _sent(tmp_path, None, embedder)
    assert embedder.asked == [([QUESTION], "QUERY")] and np.allclose(turn.vector, EMBEDDED)


def test_with_the_embedder_down_the_turn_goes_without_a_vector(tmp_path: Path) -> None:
    [turn] = _sent(tmp_path, None, Embedder(down=True))
    assert list(turn.vector) == [] and ANSWER.split(" [")[0] in turn.text


@pytest.mark.parametrize("messages, text", [
    ([("q1", "user", QUESTION), ("a1", "assistant", "  ")], f"User: {QUESTION}"),
    ([("q1", "user", " "), ("a1", "assistant", "")], None),
])
def test_a_blank_answer_leaves_the_question_and_a_blank_turn_nothing(tmp_path: Path, messages, text) -> None:  # noqa: ANN001
    sent = _sent(tmp_path, VECTOR, Embedder(), messages)
    assert [d.text for d in sent] == ([text] if text else [])
