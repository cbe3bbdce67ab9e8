"""A turn's memory (its question and answer, one record in the `conversations` collection) is written a moment
after the answer, not at once: a follow-up asked straight away then has the embedder to itself instead of
queueing behind the previous turn's memory (issue 15; make bench's pipeline part measured REUSE's
question embedding at p50 28 ms before, 11 ms after). Waiting for the memory (graceful shutdown, tests)
still writes it: nothing is dropped."""
from __future__ import annotations

import httpx
import pytest

from ragmesh.store.sqlite import SqliteStore
from ragmesh.types import MEMORY_COLLECTION
from tests.stack import Stack

SETTLE_S = 3.0  # far longer than the test takes between the answer and its first look


def _remembered(stack: Stack, conversation_id: str) -> list[str]:
    store = SqliteStore(stack.settings.sqlite_path)
    try:
        return [e.document.metadata["role"] for e in store.documents("demo", MEMORY_COLLECTION, limit=1000)
                if e.document.metadata.get("conversation_id") == conversation_id]
    finally:
        store.close()


def test_a_turns_memory_is_written_after_the_settle_time_and_waiting_for_it_writes_it(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = stack.app("gateway").memory
    stack.call(memory.idle(), timeout=60)  # earlier tests' background work is not counted as this turn's
    monkeypatch.setattr(memory, "settle_s", SETTLE_S)
    ingests: list[int] = []  # the memory's ingest calls to the retriever, when they start
    real_ingest = memory.retriever.ingest

    def ingest(*args, **kwargs):
        ingests.append(1)
        return real_ingest(*args, **kwargs)

    monkeypatch.setattr(memory.retriever, "ingest", ingest)
    reply = httpx.post(stack.http_url + "/api/chat/ask", headers=stack.headers, timeout=120,
                       json={"question": "What did the Alpha fund say about emerging markets?"})
    assert reply.status_code == 200, reply.text
    conversation = reply.json()["conversation_id"]
    assert ingests == [] and _remembered(stack, conversation) == [], "not yet: the next question goes first"
    stack.call(memory.idle(), timeout=60)
    assert ingests == [1] and _remembered(stack, conversation) == ["turn"]


def test_a_conversation_deleted_on_another_replica_while_its_memory_waits_keeps_none(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """The delete ran on another replica (it removed the conversation and found no memory yet, and it
    cannot wait for this replica's work): the messages embedded afterwards are removed again."""
    memory = stack.app("gateway").memory
    stack.call(memory.idle(), timeout=60)
    monkeypatch.setattr(memory, "settle_s", SETTLE_S)
    reply = httpx.post(stack.http_url + "/api/chat/ask", headers=stack.headers, timeout=120,
                       json={"question": "What did the Alpha fund say about its emerging markets exposure?"})
    assert reply.status_code == 200, reply.text
    conversation = reply.json()["conversation_id"]
    store = SqliteStore(stack.settings.sqlite_path)
    try:
        assert store.delete_conversation("demo", conversation)  # the other replica's delete
    finally:
        store.close()
    stack.call(memory.idle(), timeout=60)
    assert _remembered(stack, conversation) == []
