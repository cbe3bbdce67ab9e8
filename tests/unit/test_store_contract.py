"""One contract suite for the Store interface, run against every backend.

Backends: SQLite on a real file in tmp_path, always; MongoDB against a real server when the
MONGODB_URI environment variable is set, otherwise against mongomock. mongomock stands in only
because no MongoDB server can be installed on this machine: it keeps data in process, has no
sessions, transactions or change streams, and is not thread-safe. So the tests of transactions,
change streams and concurrent writers run only against a real server (concurrent writers also
against SQLite) and are skipped with that reason otherwise.

Against a real server (each test uses, then drops, its own database):
    MONGODB_URI=mongodb://127.0.0.1:27017 \
        .venv/bin/python -m pytest -q tests/unit/test_store_contract.py
A replica set (`mongod --replSet rs0`, then `rs.initiate()` in mongosh) also runs the
transaction and change-stream tests.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import bson
import mongomock
import numpy as np
import pytest
from mongomock.store import ServerStore
from pymongo import MongoClient

from ragmesh.access import ACCESS_KEY, Access, principals
from ragmesh.config import Settings
from ragmesh.identity import Identity
from ragmesh.identity.keys import ApiKeyRecord, new_key
from ragmesh.store import (AccountStore, ChangeLog, ConversationStore, CorpusStore, CorrectionRecord, DocumentStore,
                           InlineReads, Store, StoreUnavailable, open_store, quick_read)
from ragmesh.store.lazy import LazyStore
from ragmesh.store.mongo import MongoStore, _chunk_doc
from ragmesh.store.sqlite import SqliteStore
from ragmesh.types import MEMORY_AUTHOR, MEMORY_COLLECTION, Chunk, DocumentRecord, SectionOutline, StoredChunk
from tests.fakes.serving import settings

REAL_URI = os.environ.get("MONGODB_URI", "")
MONGO = "mongodb" if REAL_URI else "mongomock"
NEEDS_SERVER = (
    "needs a real MongoDB server (set MONGODB_URI): mongomock has no sessions, transactions "
    "or change streams"
)
NOT_THREAD_SAFE = "mongomock is not thread-safe (mongomock issue #138); SQLite and real servers are"


@dataclass
class Backend:
    """Opens (and reopens) one store; `kind` is sqlite, mongomock or mongodb."""

    kind: str
    open: Callable[..., Store]


@pytest.fixture(params=["sqlite", MONGO])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from _backend(request.param, tmp_path)


@pytest.fixture
def mongo() -> Iterator[Backend]:
    """MongoDB only: the versioned write and what the real server adds."""
    yield from _backend(MONGO, None)


def _backend(kind: str, tmp_path: Path | None) -> Iterator[Backend]:
    opened: list[Store] = []

    def track(factory: Callable[..., Store]) -> Callable[..., Store]:
        def open_(**kwargs: object) -> Store:
            opened.append(factory(**kwargs))
            return opened[-1]
        return open_

    db_name = f"ragmesh_test_{uuid.uuid4().hex[:12]}"
    if kind == "sqlite":
        yield Backend("sqlite", track(lambda: SqliteStore(tmp_path / "store.sqlite3")))
    elif kind == "mongodb":
        yield Backend("mongodb", track(functools.partial(MongoStore, REAL_URI, db_name)))
        MongoClient(REAL_URI).drop_database(db_name)
    else:
        server = ServerStore()  # shared by every client, so reopening sees the same data
        client = functools.partial(mongomock.MongoClient, _store=server)
        yield Backend("mongomock", track(functools.partial(
            MongoStore, "mongodb://mongomock.invalid:27017", db_name, client_factory=client)))
    for store in opened:
        store.close()


def doc(doc_id: str = "d1", n: int = 2, h: str = "h1", tenant: str = "",
        collection: str = "notes") -> tuple[DocumentRecord, list[StoredChunk]]:
    record = DocumentRecord(
        doc_id, collection, tenant, h, f"Title {doc_id}", {"fund_name": "K"}, "2024-01-02", n
    )
    chunks = [
        StoredChunk(
            Chunk(f"{tenant}/{collection}/{doc_id}#{i}", doc_id, collection, f"{h} text {i}",
                  {"fund_name": "K", "i": str(i)}, "2024-01-02", tenant, "", i),
            np.full(4, i + 0.5, np.float32),
        )
        for i in range(n)
    ]
    return record, chunks


def ids(store: Store, collection: str | None = None) -> list[str]:
    return [s.chunk.chunk_id for s in store.iter_chunks(collection)]


# -- corpus ------------------------------------------------------------------------------------
def test_replace_is_whole_versioned_and_survives_reopen(backend: Backend) -> None:
    store = backend.open()
    assert store.version() == 0 and store.get_document("", "notes", "d1") is None
    assert list(store.iter_chunks()) == [] and store.collections() == []
    v1 = store.replace_document(*doc(n=3))
    v2 = store.replace_document(*doc(n=1, h="h2"))
    assert 0 < v1 < v2 == store.version()
    store.close()

    store = backend.open()
    assert ids(store) == ["/notes/d1#0"]
    assert store.get_document("", "notes", "d1") == DocumentRecord(
        "d1", "notes", "", "h2", "Title d1", {"fund_name": "K"}, "2024-01-02", 1)
    assert store.version() == v2


def test_a_documents_outline_is_written_replaced_and_deleted_with_it(backend: Backend) -> None:
    store = backend.open()
    record, chunks = doc(n=2)
    record.summary = "The whole document, briefly."
    record.sections = [SectionOutline("Chapter 1", "It begins.", 1), SectionOutline("Chapter 2", "", 3)]
    store.replace_document(record, chunks)
    store.close()
    store = backend.open()
    got = store.get_document("", "notes", "d1")
    assert got.summary == "The whole document, briefly." and got.sections == record.sections
    assert got.sections[0] == SectionOutline("Chapter 1", "It begins.", 1)

    store.replace_document(*doc(n=1, h="h2"))  # new content without an outline: the old one goes
    assert store.get_document("", "notes", "d1") == DocumentRecord(
        "d1", "notes", "", "h2", "Title d1", {"fund_name": "K"}, "2024-01-02", 1)
    store.replace_document(record, chunks)
    store.delete_documents("", "notes", ["d1"])
    store.replace_document(*doc(n=1, h="h3"))  # the same id again starts without an outline
    assert store.get_document("", "notes", "d1").sections == []


def test_chunks_round_trip_in_insertion_order(backend: Backend) -> None:
    store = backend.open()
    record, chunks = doc("d1", 3)
    chunks[2].chunk.parent_chunk_id = chunks[0].chunk.chunk_id
    chunks[0].vector = None  # parents are stored but not indexed
    store.replace_document(record, chunks)
    store.replace_document(*doc("d2", 2))
    store.replace_document(*doc("f1", 1, collection="factsheets"))
    got = list(store.iter_chunks("notes"))
    assert [s.chunk for s in got] == [c.chunk for c in chunks] + [c.chunk for c in doc("d2", 2)[1]]
    assert got[0].vector is None
    assert ids(store, "factsheets") == ["/factsheets/f1#0"]
    assert len(ids(store)) == 6 and ids(store, "missing") == []


def test_vectors_round_trip_as_float32_exactly(backend: Backend) -> None:
    store = backend.open()
    rng = np.random.default_rng(7)
    special = np.array([0.0, -0.0, 1e-45, -3.4028235e38, np.pi, 1 / 3], np.float32)
    vectors = [rng.standard_normal(384).astype(np.float32), special]
    record, chunks = doc(n=2)
    for stored, vector in zip(chunks, vectors):
        stored.vector = vector
    store.replace_document(record, chunks)
    for stored, vector in zip(store.iter_chunks(), vectors):
        assert stored.vector.dtype == np.float32 and stored.vector.shape == vector.shape
        assert stored.vector.tobytes() == vector.tobytes()  # bit for bit, -0.0 and denormals too


def test_a_failed_replace_leaves_the_old_version(backend: Backend) -> None:
    store = backend.open()
    version = store.replace_document(*doc(n=2))
    record, chunks = doc(n=2, h="h2")
    chunks.append(chunks[0])  # duplicate chunk id: the insert fails halfway
    with pytest.raises(Exception):
        store.replace_document(record, chunks)
    assert ids(store) == ["/notes/d1#0", "/notes/d1#1"]
    assert [s.chunk.text for s in store.iter_chunks()] == ["h1 text 0", "h1 text 1"]
    assert store.get_document("", "notes", "d1").content_hash == "h1"
    assert store.version() == version


def test_replace_documents_is_one_write(backend: Backend) -> None:
    store = backend.open()
    before = store.replace_document(*doc("d1", 2))
    batch = [doc("d1", 1, h="h2"), doc("d2", 2, h="h2"), doc("f1", 1, h="h2", collection="factsheets")]
    version = store.replace_documents(batch)
    assert version > before and store.version() == version
    assert [s.chunk.text for s in store.iter_chunks("notes")] == ["h2 text 0"] * 2 + ["h2 text 1"]
    assert [(c.name, c.documents, c.chunks) for c in store.collections()] == [
        ("factsheets", 1, 1), ("notes", 2, 3)]
    failing = [doc("d1", 2, h="h3"), doc("d3", 2, h="h3")]
    failing[1][1].append(failing[1][1][0])  # the second document's insert fails
    with pytest.raises(Exception):
        store.replace_documents(failing)
    assert store.get_document("", "notes", "d1").content_hash == "h2"  # no document flipped
    assert store.get_document("", "notes", "d3") is None
    assert [s.chunk.text for s in store.iter_chunks("notes")] == ["h2 text 0"] * 2 + ["h2 text 1"]
    assert store.version() == version


def test_delete_and_collection_counts(backend: Backend) -> None:
    store = backend.open()
    store.replace_document(*doc("d1", 2))
    store.replace_document(*doc("d2", 3))
    version = store.replace_document(*doc("f1", 1, collection="factsheets"))
    stats = [(c.name, c.documents, c.chunks) for c in store.collections()]
    assert stats == [("factsheets", 1, 1), ("notes", 2, 5)]
    assert store.delete_documents("", "notes", ["missing"]) == (0, 0)
    assert store.delete_documents("", "notes", []) == (0, 0)
    assert store.version() == version  # nothing removed, nothing to re-index
    assert store.delete_documents("", "notes", ["d1", "missing"]) == (1, 2)
    assert store.version() > version
    assert store.get_document("", "notes", "d1") is None
    assert ids(store, "notes") == ["/notes/d2#0", "/notes/d2#1", "/notes/d2#2"]
    assert store.delete_documents("", "factsheets", ["f1"]) == (1, 1)
    assert [(c.name, c.documents, c.chunks) for c in store.collections()] == [("notes", 1, 3)]


def test_tenants_are_isolated(backend: Backend) -> None:
    store = backend.open()
    store.replace_document(*doc("d1", 2, h="a", tenant="acme"))
    store.replace_document(*doc("d1", 1, h="b", tenant="bank"))
    assert store.get_document("acme", "notes", "d1").content_hash == "a"
    assert store.get_document("bank", "notes", "d1").content_hash == "b"
    assert store.get_document("", "notes", "d1") is None
    assert store.delete_documents("other", "notes", ["d1"]) == (0, 0)
    assert store.delete_documents("acme", "notes", ["d1"]) == (1, 2)
    left = [(s.chunk.tenant, s.chunk.chunk_id) for s in store.iter_chunks()]
    assert left == [("bank", "bank/notes/d1#0")]

    store.ensure_conversation("acme", "u1", "c1")
    store.ensure_conversation("bank", "u2", "c1")  # someone else's id: the first owner keeps it
    assert store.conversation_exists("acme", "c1") and not store.conversation_exists("bank", "c1")
    store.add_message("c1", "user", "hi", {})
    assert not store.delete_conversation("bank", "c1")
    assert [m.content for m in store.messages("c1")] == ["hi"]


# -- conversations -----------------------------------------------------------------------------
def test_messages_keep_order_limit_and_edits(backend: Backend) -> None:
    store = backend.open()
    store.ensure_conversation("t1", "u", "c1")
    store.ensure_conversation("t1", "u", "c1")  # idempotent
    roles = ["user", "assistant"] * 3
    ids_ = [
        store.add_message("c1", role, f"m{i}", {"i": i, "cites": [{"n": 1}]})
        for i, role in enumerate(roles)
    ]
    assert len(set(ids_)) == 6
    store.update_message(ids_[-1], "edited", {"i": 99})
    messages = store.messages("c1")
    assert [m.content for m in messages] == ["m0", "m1", "m2", "m3", "m4", "edited"]
    assert [m.role for m in messages] == roles
    assert [m.message_id for m in messages] == ids_
    assert messages[0].meta == {"i": 0, "cites": [{"n": 1}]} and messages[-1].meta == {"i": 99}
    assert all(m.conversation_id == "c1" for m in messages)
    assert time.strptime(messages[0].created_at, "%Y-%m-%dT%H:%M:%SZ")
    assert [m.content for m in store.messages("c1", limit=2)] == ["m4", "edited"]
    assert len(store.messages("c1", limit=50)) == 6 and store.messages("c1", limit=0) == []
    assert store.messages("other") == []
    assert store.answer_count("c1") == 3 and store.answer_count("other") == 0
    bare = store.messages("c1", with_meta=False)  # the history read before every answer
    assert [(m.message_id, m.role, m.content, m.created_at) for m in bare] == [
        (m.message_id, m.role, m.content, m.created_at) for m in messages]
    assert all(m.meta == {} for m in bare)
    assert [m.content for m in store.messages("c1", limit=1, with_meta=False)] == ["edited"]


def test_conversations_exist_and_delete_with_their_messages(backend: Backend) -> None:
    store = backend.open()
    assert not store.conversation_exists("t1", "c1")
    store.ensure_conversation("t1", "u", "c1")
    store.ensure_conversation("t1", "u", "c2")
    store.add_message("c1", "user", "q", {})
    store.add_message("c2", "user", "other", {})
    assert store.conversation_exists("t1", "c1")
    assert store.delete_conversation("t1", "c1") and not store.delete_conversation("t1", "c1")
    assert not store.conversation_exists("t1", "c1") and store.messages("c1") == []
    assert [m.content for m in store.messages("c2")] == ["other"]
    store.close()
    store = backend.open()
    assert store.conversation_exists("t1", "c2") and not store.conversation_exists("t1", "c1")


def test_change_log_and_document_chunks(backend: Backend) -> None:
    store = backend.open()
    start = store.version()
    store.replace_documents([doc("d1", 2), doc("d2", 1)])
    v2 = store.replace_document(*doc("d1", 3, h="h2"))
    store.delete_documents("", "notes", ["d2"])
    changes = store.changes_since(start)
    assert [(c.collection, c.doc_id) for c in changes] == [("notes", "d1"), ("notes", "d2"), ("notes", "d1"),
                                                            ("notes", "d2")]
    assert [c.doc_id for c in store.changes_since(v2)] == ["d2"]
    assert store.changes_since(store.version()) == []
    assert [s.chunk.chunk_id for s in store.document_chunks("", "notes", "d1")] == [
        "/notes/d1#0", "/notes/d1#1", "/notes/d1#2"]
    assert store.document_chunks("", "notes", "d2") == [] and store.document_chunks("t9", "notes", "d1") == []


def test_collection_options_round_trip(backend: Backend) -> None:
    store = backend.open()
    assert store.collection_options() == {}
    store.set_collection_options("big", {"dense": "hnsw", "analyzer": {"stemming": False}})
    store.set_collection_options("big", {"dense": "hnsw", "analyzer": {}})
    store.close()
    assert backend.open().collection_options() == {"big": {"dense": "hnsw", "analyzer": {}}}


def test_conversation_summaries_corrections_and_usage(backend: Backend) -> None:
    store = backend.open()
    assert store.conversation_summary("c1") == ""
    store.set_conversation_summary("c1", "first")
    store.set_conversation_summary("c1", "second")
    assert store.conversation_summary("c1") == "second"

    for i in range(3):
        store.add_correction(CorrectionRecord("", "t1", "u1", f"q{i}", f"wrong{i}", f"right{i}", "c1"))
    store.add_correction(CorrectionRecord("", "t2", "u1", "q", "w", "other tenant"))
    mine = store.corrections("t1", "u1")
    assert [c.correction for c in mine] == ["right2", "right1", "right0"], "newest first"
    assert [c.correction for c in store.corrections("t1", "u1", limit=1)] == ["right2"]
    assert [c.correction for c in store.corrections("t2", "u1")] == ["other tenant"]
    assert store.corrections("t1", "nobody") == []

    assert store.usage("t1", "u1", "2026-11") == (0, 0)
    assert store.add_usage("t1", "u1", "2026-11", 1, 120) == (1, 120)
    assert store.add_usage("t1", "u1", "2026-11", 1, 30) == (2, 150)
    assert store.usage("t1", "u1", "2026-12") == (0, 0) and store.usage("t2", "u1", "2026-11") == (0, 0)
    store.close()
    store = backend.open()
    assert store.usage("t1", "u1", "2026-11") == (2, 150)
    assert store.conversation_summary("c1") == "second"


def test_concurrent_writers_get_distinct_sequence_numbers(backend: Backend) -> None:
    if backend.kind == "mongomock":
        pytest.skip(NOT_THREAD_SAFE)
    stores = [backend.open(), backend.open()]  # two processes' worth of writers on one store
    stores[0].ensure_conversation("t", "u", "c")

    def write(k: int) -> None:
        for i in range(25):
            stores[k % 2].add_message("c", "user", f"{k}-{i}", {})

    threads = [threading.Thread(target=write, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    messages = stores[0].messages("c")
    assert len(messages) == 200 and len({m.content for m in messages}) == 200
    for k in range(8):  # each writer's messages stay in its own order
        mine = [m.content for m in messages if m.content.startswith(f"{k}-")]
        assert mine == [f"{k}-{i}" for i in range(25)]


# -- MongoDB: the versioned write --------------------------------------------------------------
def test_a_crash_before_the_flip_keeps_the_old_version_and_start_removes_orphans(
    mongo: Backend,
) -> None:
    store = mongo.open()
    version = store.replace_document(*doc("d1", 2))
    record, chunks = doc("d1", 3, h="h2")
    store._insert_version([(record, chunks)], None)  # step 1 of a replacement, then the "crash"
    store._insert_version([doc("new", 2)], None)  # a new document that never got its header
    assert ids(store) == ["/notes/d1#0", "/notes/d1#1"]
    assert [(c.documents, c.chunks) for c in store.collections()] == [(1, 2)]
    assert store.get_document("", "notes", "new") is None

    young = mongo.open()  # orphans this young may be a live writer's first step: kept
    assert young._chunks.count_documents({}) == 7

    store = mongo.open(orphan_grace_s=0)
    assert store._chunks.count_documents({}) == 2
    assert ids(store) == ["/notes/d1#0", "/notes/d1#1"]
    assert store.get_document("", "notes", "d1").content_hash == "h1"
    assert store.version() > version  # recovery makes indexes look again
    store.replace_document(record, chunks)  # the retried write goes through
    assert ids(store) == ["/notes/d1#0", "/notes/d1#1", "/notes/d1#2"]


def test_a_crash_after_the_flip_shows_the_new_version_only(mongo: Backend) -> None:
    store = mongo.open()
    store.replace_document(*doc("d1", 2))
    record, chunks = doc("d1", 1, h="h2")
    tag = store._insert_version([(record, chunks)], None)
    store._flip(record, tag, len(chunks), None)  # crash before the bump and the old chunks' delete
    assert [s.chunk.text for s in store.iter_chunks()] == ["h2 text 0"]
    assert [(c.documents, c.chunks) for c in store.collections()] == [(1, 1)]
    version = store.version()
    store = mongo.open(orphan_grace_s=0)
    assert store._chunks.count_documents({}) == 1
    assert store.version() > version


def test_vectors_are_stored_as_bson_binary_float32(mongo: Backend) -> None:
    store = mongo.open()
    record, chunks = doc(n=1)
    store.replace_document(record, chunks)
    raw = store._chunks.find_one({})["vector"]
    # pymongo decodes subtype 0 as bytes, mongomock keeps the Binary it was given.
    assert isinstance(raw, bytes) and getattr(raw, "subtype", 0) == 0
    assert bytes(raw) == chunks[0].vector.astype("<f4").tobytes()
    # Through real BSON too, which mongomock skips: binary subtype 0, not an array of doubles.
    decoded = bson.decode(bson.encode(_chunk_doc(chunks[0], bson.ObjectId())))
    assert type(decoded["vector"]) is bytes and len(decoded["vector"]) == 4 * 4


# -- MongoDB: connection handling --------------------------------------------------------------
def test_an_unreachable_server_is_a_clear_error_without_the_password() -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as err:
        MongoStore("mongodb://admin:s3cret@127.0.0.1:1/?authSource=admin",
                   server_selection_timeout_ms=200)
    assert time.monotonic() - started < 10
    assert "127.0.0.1:1" in str(err.value) and "s3cret" not in str(err.value)
    assert err.value.code == "UNAVAILABLE"


@pytest.mark.parametrize("uri", [
    "postgres://admin:s3cret@db:5432",
    "mongodb://admin:s3/cret@db:27017/x",  # unescaped "/" in the password
    "mongodb://admin:s3cret@db:port",
])
def test_an_invalid_uri_is_a_clear_error_without_the_password(uri: str) -> None:
    with pytest.raises(StoreUnavailable) as err:
        MongoStore(uri, server_selection_timeout_ms=200)
    assert "invalid" in str(err.value) and "db" in str(err.value)
    assert "s3" not in str(err.value) and "cret" not in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_open_store_picks_the_backend_from_settings(tmp_path: Path) -> None:
    store = open_store(Settings(data_dir=tmp_path, mongodb_uri=""))
    assert isinstance(store, SqliteStore)
    store.close()
    with pytest.raises(StoreUnavailable):
        open_store(Settings(data_dir=tmp_path, mongodb_uri="mongodb://127.0.0.1:1",
                            mongodb_timeout_ms=200))
    with pytest.raises(ValueError, match="MONGODB_TRANSACTIONS"):
        open_store(Settings(data_dir=tmp_path, mongodb_uri="mongodb://x", mongodb_transactions="maybe"))
    described = Settings(mongodb_uri="mongodb+srv://u:s3cret@cluster0.example.net/db?w=1").describe()
    assert described["mongodb_uri"] == "mongodb+srv://cluster0.example.net"


# -- MongoDB: what only a real server has ------------------------------------------------------
def _replica_set(mongo: Backend) -> MongoStore:
    if mongo.kind != "mongodb":
        pytest.skip(NEEDS_SERVER)
    store = mongo.open()
    if not store.transactions:
        pytest.skip("the server at MONGODB_URI is standalone: no transactions or change streams")
    return store


def test_a_failed_replace_in_a_transaction_leaves_no_orphans(mongo: Backend) -> None:
    store = _replica_set(mongo)
    store.replace_document(*doc(n=2))
    record, chunks = doc(n=2, h="h2")
    chunks.append(chunks[0])
    with pytest.raises(Exception):
        store.replace_document(record, chunks)
    assert store._chunks.count_documents({}) == 2  # rolled back, not merely hidden
    assert [s.chunk.text for s in store.iter_chunks()] == ["h1 text 0", "h1 text 1"]


def test_a_replacement_reaches_a_change_stream_as_one_transaction(mongo: Backend) -> None:
    store = _replica_set(mongo)
    store.replace_document(*doc(n=2))
    with store._chunks.watch(max_await_time_ms=500) as stream:
        store.replace_document(*doc(n=1, h="h2"))
        events = []
        deadline = time.monotonic() + 10
        while len(events) < 3 and time.monotonic() < deadline:
            change = stream.try_next()
            if change is not None:
                events.append(change)
    assert sorted(e["operationType"] for e in events) == ["delete", "delete", "insert"]
    assert len({(e.get("txnNumber"), str(e.get("lsid"))) for e in events}) == 1
    assert events[0]["fullDocument"]["text"] == "h2 text 0"


# -- API keys and conversation lists (issue 10) ------------------------------------------------
def key_record(key_id: str, tenant: str, user: str = "u", role: str = "member",
               created_at: str = "2026-01-01T00:00:00+00:00", **kw: str) -> ApiKeyRecord:
    return ApiKeyRecord(key_id, tenant, user, role, f"hash-of-{key_id}", created_at=created_at, **kw)


def test_api_keys_round_trip_list_and_revoke(backend: Backend) -> None:
    store = backend.open()
    assert store.api_key("0" * 16) is None and store.api_keys() == []
    _, made = new_key("pepper", "acme", "alice", "admin", expires_days=30, label="laptop", groups=["risk", "hr"])
    store.add_api_key(made)
    assert store.api_key(made.key_id) == made, "every field comes back as written"
    # Inserted out of order: listed oldest first.
    store.add_api_key(key_record("b" * 16, "acme", created_at="2025-06-01T00:00:00+00:00"))
    store.add_api_key(key_record("a" * 16, "acme", created_at="2025-07-01T00:00:00+00:00"))
    store.add_api_key(key_record("c" * 16, "umbra", "mallory", created_at="2025-01-01T00:00:00+00:00"))
    assert [r.key_id for r in store.api_keys("acme")] == ["b" * 16, "a" * 16, made.key_id]
    assert [r.key_id for r in store.api_keys("umbra")] == ["c" * 16]
    assert [r.key_id for r in store.api_keys()] == ["c" * 16, "b" * 16, "a" * 16, made.key_id]
    assert store.api_keys("nobody") == []

    assert store.revoke_api_key("a" * 16)
    revoked = store.api_key("a" * 16)
    assert revoked.revoked_at and time.strptime(revoked.revoked_at[:19], "%Y-%m-%dT%H:%M:%S")
    assert not store.revoke_api_key("a" * 16), "a second revoke changes nothing"
    assert store.api_key("a" * 16).revoked_at == revoked.revoked_at
    assert not store.revoke_api_key("f" * 16), "no such key"
    assert store.api_key("b" * 16).revoked_at == "" and store.api_key(made.key_id).revoked_at == ""
    store.close()
    store = backend.open()
    assert store.api_key("a" * 16).revoked_at == revoked.revoked_at
    assert store.api_key(made.key_id) == made


def test_a_mongo_key_made_before_groups_has_none(mongo: Backend) -> None:
    store = mongo.open()
    store._keys.insert_one({"_id": "d" * 16, "tenant": "acme", "user_id": "alice", "role": "member",
                            "secret_hash": "h", "created_at": "2025-01-01T00:00:00+00:00", "expires_at": "",
                            "revoked_at": "", "label": ""})
    assert store.api_key("d" * 16) == ApiKeyRecord("d" * 16, "acme", "alice", "member", "h",
                                                   created_at="2025-01-01T00:00:00+00:00")
    assert [r.groups for r in store.api_keys("acme")] == [()]


def test_conversation_owner(backend: Backend) -> None:
    store = backend.open()
    assert store.conversation_owner("c1") is None
    store.ensure_conversation("acme", "alice", "c1")
    store.ensure_conversation("umbra", "mallory", "c1")  # taken: the first owner keeps it
    assert store.conversation_owner("c1") == ("acme", "alice")
    store.add_message("c2", "user", "a message before any owner", {})
    assert store.conversation_owner("c2") is None, "no owner yet: nobody's"
    store.delete_conversation("acme", "c1")
    assert store.conversation_owner("c1") is None


def test_conversations_list_most_recent_first_with_the_first_question(backend: Backend) -> None:
    store = backend.open()
    assert store.conversations("acme", None) == []
    for cid, user in (("c1", "alice"), ("c2", "bob"), ("c3", "alice"), ("c4", "alice")):
        store.ensure_conversation("acme", user, cid)
        time.sleep(0.02)
    store.ensure_conversation("umbra", "alice", "u1")  # same user name, another tenant
    time.sleep(0.02)
    for cid, question in (("c2", "What did Bob ask?"), ("c1", "First question of c1"),
                          ("c3", "x" * 200)):
        store.add_message(cid, "user", question, {})
        store.add_message(cid, "assistant", f"answer in {cid}", {})
        time.sleep(0.02)
    store.add_message("c2", "user", "A later question of c2", {})  # c2 is now the most recent
    everyone = store.conversations("acme", None)
    assert [c.conversation_id for c in everyone] == ["c2", "c3", "c1", "c4"]
    assert [c.title for c in everyone] == ["What did Bob ask?", "x" * 80, "First question of c1", ""]
    assert [(c.tenant, c.user_id) for c in everyone] == [("acme", "bob"), ("acme", "alice"), ("acme", "alice"),
                                                         ("acme", "alice")]
    first = everyone[0]
    for stamp in (first.created_at, first.updated_at):
        time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")
    assert first.updated_at >= first.created_at
    assert [c.conversation_id for c in store.conversations("acme", "alice")] == ["c3", "c1", "c4"]
    assert [c.conversation_id for c in store.conversations("acme", "alice", limit=2)] == ["c3", "c1"]
    assert store.conversations("acme", "carol") == []
    assert [c.conversation_id for c in store.conversations("umbra", None)] == ["u1"]
    store.delete_conversation("acme", "c3")
    assert [c.conversation_id for c in store.conversations("acme", "alice")] == ["c1", "c4"]


def test_delete_conversation_removes_its_summary_and_corrections_only(backend: Backend) -> None:
    store = backend.open()
    for cid in ("c1", "c2"):
        store.ensure_conversation("acme", "alice", cid)
        store.add_message(cid, "user", f"q in {cid}", {})
        store.set_conversation_summary(cid, f"summary of {cid}")
        store.add_correction(CorrectionRecord("", "acme", "alice", f"q in {cid}", "wrong", f"right in {cid}", cid))
    store.add_correction(CorrectionRecord("", "acme", "alice", "q", "w", "not tied to a conversation"))
    assert not store.delete_conversation("umbra", "c1"), "another tenant cannot delete it"
    assert store.conversation_summary("c1") == "summary of c1"
    assert len(store.corrections("acme", "alice")) == 3

    assert store.delete_conversation("acme", "c1")
    assert store.conversation_summary("c1") == "" and store.messages("c1") == []
    assert sorted(c.correction for c in store.corrections("acme", "alice")) == [
        "not tied to a conversation", "right in c2"]
    assert store.conversation_summary("c2") == "summary of c2"
    assert [m.content for m in store.messages("c2")] == ["q in c2"]
    assert [c.conversation_id for c in store.conversations("acme", "alice")] == ["c2"]


def test_conversations_page_and_rename(backend: Backend) -> None:
    store = backend.open()
    for cid in ("c1", "c2", "c3"):
        store.ensure_conversation("acme", "alice", cid)
        store.add_message(cid, "user", f"first question of {cid}", {})
        time.sleep(0.02)
    assert [c.conversation_id for c in store.conversations("acme", "alice", limit=2)] == ["c3", "c2"]
    assert [c.conversation_id for c in store.conversations("acme", "alice", limit=2, offset=2)] == ["c1"]
    assert store.conversations("acme", "alice", limit=2, offset=3) == []

    assert not store.rename_conversation("umbra", "c2", "Theirs"), "another tenant cannot rename it"
    assert not store.rename_conversation("acme", "nope", "Unknown")
    assert store.rename_conversation("acme", "c2", "Brazil exposure")
    titles = {c.conversation_id: c.title for c in store.conversations("acme", "alice")}
    assert titles == {"c3": "first question of c3", "c2": "Brazil exposure", "c1": "first question of c1"}
    assert [c.conversation_id for c in store.conversations("acme", "alice")] == ["c3", "c2", "c1"], \
        "renaming is not a new message: the order stays"
    assert store.rename_conversation("acme", "c2", "")  # back to the first question
    assert store.conversations("acme", "alice", limit=2)[1].title == "first question of c2"
    store.rename_conversation("acme", "c1", "Old")
    store.delete_conversation("acme", "c1")
    store.ensure_conversation("acme", "alice", "c1")  # a reused id starts untitled
    assert store.conversations("acme", "alice", limit=1)[0].title == ""


def test_documents_list_newest_first_per_tenant_and_collection(backend: Backend) -> None:
    store = backend.open()
    store.replace_document(*doc("d1", tenant="acme"))
    time.sleep(0.02)
    record, chunks = doc("d2", n=3, tenant="acme", collection="factsheets")
    record.summary = "A summary"
    store.replace_document(record, chunks)
    time.sleep(0.02)
    store.replace_document(*doc("d3", tenant="acme"))
    store.replace_document(*doc("x1", tenant="umbra"))

    listed = store.documents("acme", None)
    assert [(e.document.collection, e.document.doc_id) for e in listed] == [
        ("notes", "d3"), ("factsheets", "d2"), ("notes", "d1")]
    assert [e.document.chunk_count for e in listed] == [2, 3, 2]
    assert [e.summarized for e in listed] == [False, True, False]
    assert listed[1].document.title == "Title d2" and listed[1].document.date == "2024-01-02"
    time.strptime(listed[0].updated_at, "%Y-%m-%dT%H:%M:%SZ")
    assert [e.document.doc_id for e in store.documents("acme", "notes")] == ["d3", "d1"]
    assert [e.document.doc_id for e in store.documents("acme", None, limit=1, offset=1)] == ["d2"]
    assert store.documents("acme", None, limit=0) == []
    assert [e.document.doc_id for e in store.documents("umbra", None)] == ["x1"]
    assert store.documents("nobody", None) == []

    assert [(c.name, c.documents, c.chunks) for c in store.collections("acme")] == [
        ("factsheets", 1, 3), ("notes", 2, 4)]
    assert [(c.name, c.documents) for c in store.collections("umbra")] == [("notes", 1)]
    assert [(c.name, c.documents) for c in store.collections()] == [("factsheets", 1), ("notes", 3)]


def test_one_chunk_by_id_current_version_own_tenant_only(backend: Backend) -> None:
    store = backend.open()
    record, chunks = doc("d1", n=2, tenant="acme")
    store.replace_document(record, chunks)
    found = store.chunk("acme", "acme/notes/d1#1")
    assert found is not None and found.chunk.text == "h1 text 1" and found.chunk.doc_id == "d1"
    assert store.chunk("umbra", "acme/notes/d1#1") is None, "another tenant's chunk is unknown"
    assert store.chunk("acme", "acme/notes/d1#9") is None
    store.replace_document(*doc("d1", n=2, h="h2", tenant="acme"))  # a new version, same chunk ids
    assert store.chunk("acme", "acme/notes/d1#1").chunk.text == "h2 text 1"
    store.delete_documents("acme", "notes", ["d1"])
    assert store.chunk("acme", "acme/notes/d1#1") is None


def _recorded_api_key(store: Store) -> tuple[Callable[[str], ApiKeyRecord | None], list[int]]:
    """store.api_key, and the list of the threads it ran on."""
    ran_on: list[int] = []

    def api_key(key_id: str) -> ApiKeyRecord | None:
        ran_on.append(threading.get_ident())
        return store.api_key(key_id)

    return api_key, ran_on


def _quick_api_key(store: Store, key_id: str) -> tuple[ApiKeyRecord | None, bool]:
    """quick_read of one key from a running event loop: (the record, whether it ran on the loop's thread)."""
    async def read() -> tuple[ApiKeyRecord | None, bool]:
        api_key, ran_on = _recorded_api_key(store)
        found = await quick_read(store, api_key, key_id)
        return found, ran_on == [threading.get_ident()]

    return asyncio.run(read())


def test_a_quick_read_runs_on_the_loop_only_for_an_embedded_store_that_is_free(backend: Backend) -> None:
    """SQLite answers a keyed read on the event loop (~10 us) when no other thread holds it; MongoDB
    always goes through a worker thread (a network round trip must not hold up the loop)."""
    store = backend.open()
    made = key_record("a" * 16, "acme")
    store.add_api_key(made)
    assert _quick_api_key(store, made.key_id) == (made, backend.kind == "sqlite")
    assert _quick_api_key(store, "0" * 16) == (None, backend.kind == "sqlite")


def test_a_quick_read_while_another_thread_writes_goes_to_a_worker_and_the_loop_runs_on(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    made = key_record("a" * 16, "acme")
    store.add_api_key(made)
    writing, done = threading.Event(), threading.Event()

    def long_write() -> None:  # another thread in the middle of a write: it holds the store's lock
        with store._tx():
            writing.set()
            done.wait(10)

    writer = threading.Thread(target=long_write)
    writer.start()
    writing.wait(10)

    async def read() -> tuple[ApiKeyRecord | None, bool]:
        api_key, ran_on = _recorded_api_key(store)
        reading = asyncio.ensure_future(quick_read(store, api_key, made.key_id))
        await asyncio.sleep(0.05)
        assert not reading.done(), "the read waits for the write, in its worker thread"
        done.set()  # the loop was free to run this: the write ends, the read goes on
        return await reading, ran_on[0] != threading.get_ident()

    assert asyncio.run(read()) == (made, True)
    writer.join(10)


# -- ids are keys within a tenant -----------------------------------------------------------------
def test_the_same_chunk_id_in_two_tenants_is_two_chunks(backend: Backend) -> None:
    store = backend.open()
    mine, chunks = doc("d1", n=1, h="mine", tenant="acme")
    theirs, squatted = doc("other", n=1, h="theirs", tenant="umbra")
    squatted[0].chunk.chunk_id = chunks[0].chunk.chunk_id  # claimed ahead, in another tenant
    store.replace_document(theirs, squatted)
    store.replace_document(mine, chunks)  # the owner's own upload is not in the way
    store.replace_document(mine, chunks)  # nor is its replacement
    assert store.chunk("acme", "acme/notes/d1#0").chunk.text == "mine text 0"
    assert store.chunk("umbra", "acme/notes/d1#0").chunk.text == "theirs text 0"
    assert sorted((s.chunk.tenant, s.chunk.chunk_id) for s in store.iter_chunks()) == [
        ("acme", "acme/notes/d1#0"), ("umbra", "acme/notes/d1#0")]
    assert store.delete_documents("umbra", "notes", ["other"]) == (1, 1)
    assert store.chunk("acme", "acme/notes/d1#0").chunk.text == "mine text 0"
    assert store.chunk("umbra", "acme/notes/d1#0") is None


def test_conversation_memory_is_listed_for_its_author_only(backend: Backend) -> None:
    store = backend.open()
    for user in ("alice", "bob"):
        record, chunks = doc(f"msg-{user}", n=1, tenant="acme", collection=MEMORY_COLLECTION)
        record.metadata = {MEMORY_AUTHOR: user, "conversation_id": f"conv-{user}"}
        store.replace_document(record, chunks)
    store.replace_document(*doc("d1", n=1, tenant="acme"))
    listed = lambda collection, author: sorted(  # noqa: E731
        e.document.doc_id for e in store.documents("acme", collection, author=author))
    assert listed(MEMORY_COLLECTION, "alice") == ["msg-alice"]
    assert listed(None, "bob") == ["d1", "msg-bob"]
    assert listed(None, "") == listed(MEMORY_COLLECTION, "") + ["d1"] == ["d1"]
    assert listed(None, None) == ["d1", "msg-alice", "msg-bob"], "internal reads see every document"


def test_document_lists_and_counts_show_only_what_the_readers_may_read(backend: Backend) -> None:
    """Access lists (ragmesh.access) narrow lists and counts in the store itself, so a page of a list
    is full of readable documents; a document written without one (before access lists) is the tenant's."""
    store = backend.open()
    shares = {"private": Access(owner="alice"), "grouped": Access(owner="alice", groups=("risk",)),
              "open": Access(owner="boss", tenant=True), "legacy": None}
    for doc_id, shared in shares.items():
        record, chunks = doc(doc_id, n=2, tenant="acme")
        if shared is not None:
            record.metadata[ACCESS_KEY] = shared.encode()
        store.replace_document(record, chunks)
    listed = lambda who: sorted(e.document.doc_id for e in store.documents(  # noqa: E731
        "acme", None, readers=principals(Identity("acme", who[0], "member", "key", who[1:]))))
    assert listed(("alice",)) == ["grouped", "legacy", "open", "private"]
    assert listed(("bob",)) == ["legacy", "open"]
    assert listed(("carol", "risk")) == ["grouped", "legacy", "open"]
    assert [(c.documents, c.chunks) for c in store.collections("acme", frozenset({"tenant", "user:bob"}))] == [(2, 4)]
    assert [(c.documents, c.chunks) for c in store.collections("acme")] == [(4, 8)]
    assert store.documents("acme", None, limit=1, readers=frozenset({"user:nobody"})) == []


def test_collection_access_rules_are_per_tenant(backend: Backend) -> None:
    store = backend.open()
    store.set_collection_access("acme", "drafts", {"members_upload": True, "default_access": "group:risk"})
    store.set_collection_access("acme", "drafts", {"members_upload": False, "default_access": "tenant"})
    assert store.collection_access("acme") == {"drafts": {"members_upload": False, "default_access": "tenant"}}
    assert store.collection_access("umbra") == {}


def test_an_old_sqlite_file_gets_its_chunk_ids_keyed_by_tenant(tmp_path: Path) -> None:
    """A file written when chunk ids were one space for every tenant: its chunks survive the
    migration in their order, and the same id can then be used by another tenant."""
    path = tmp_path / "old.sqlite3"
    old = sqlite3.connect(path)
    old.executescript("""
        CREATE TABLE chunks (chunk_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, collection TEXT NOT NULL,
          doc_id TEXT NOT NULL, chunk_index INTEGER NOT NULL, text TEXT NOT NULL, metadata TEXT NOT NULL,
          date TEXT NOT NULL, parent_chunk_id TEXT NOT NULL, vector BLOB);
        CREATE INDEX chunks_by_doc ON chunks (tenant, collection, doc_id);
        CREATE INDEX chunks_by_collection ON chunks (collection);""")
    old.executemany("INSERT INTO chunks VALUES (?,?,?,?,?,?,?,?,?,?)", [
        (f"acme/notes/d1#{i}", "acme", "notes", "d1", i, f"old {i}", "{}", "", "", None) for i in (1, 0)])
    old.commit()
    old.close()
    store = SqliteStore(path)
    assert [s.chunk.text for s in store.iter_chunks()] == ["old 1", "old 0"], "rows kept, in their order"
    record, chunks = doc("d1", n=1, h="umbra", tenant="umbra")
    chunks[0].chunk.chunk_id = "acme/notes/d1#0"
    store.replace_document(record, chunks)
    store.close()
    store = SqliteStore(path)  # reopening a migrated file changes nothing
    assert store.chunk("acme", "acme/notes/d1#0").chunk.text == "old 0"
    assert store.chunk("umbra", "acme/notes/d1#0").chunk.text == "umbra text 0"
    indexes = {r[0] for r in store._db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"chunks_by_doc", "chunks_by_collection"} <= indexes


def test_an_old_mongo_database_loses_its_global_chunk_id_index(mongo: Backend) -> None:
    store = mongo.open()
    store._chunks.drop_index("tenant_chunk_id")
    store._chunks.create_index([("chunk_id", 1), ("v", 1)], unique=True, name="chunk_id")
    store.close()
    store = mongo.open()
    assert "chunk_id" not in store._chunks.index_information()
    mine, chunks = doc("d1", n=1, tenant="acme")
    theirs, same_ids = doc("d1", n=1, tenant="umbra")
    same_ids[0].chunk.chunk_id = chunks[0].chunk.chunk_id
    store.replace_documents([(mine, chunks), (theirs, same_ids)])  # one write: one version tag for both
    assert store.chunk("umbra", chunks[0].chunk.chunk_id).chunk.tenant == "umbra"


# -- the narrow interfaces and the lazy wrapper --------------------------------------------------
INTERFACES = (DocumentStore, ChangeLog, CorpusStore, ConversationStore, AccountStore, InlineReads, Store)


def _methods(interface: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(getattr(interface, name)) for name in dir(interface)
            if not name.startswith("_") and callable(getattr(interface, name))}


def _parameters(signature: inspect.Signature) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def test_the_whole_store_is_exactly_its_narrow_interfaces() -> None:
    """Every method belongs to one narrow interface (the retriever's, the gateway's, identity's), none to
    the whole store alone but close."""
    narrow = set().union(*(_methods(i) for i in (DocumentStore, ChangeLog, ConversationStore, AccountStore,
                                                  InlineReads)))
    assert set(_methods(Store)) - narrow == {"close"}


@pytest.mark.parametrize("implementation", [SqliteStore, MongoStore])
def test_each_backend_has_every_method_of_every_interface_with_its_parameters(implementation: type) -> None:
    """The same names, kinds and defaults in the same order (a backend may add optional ones after them),
    so a caller typed against any interface can hold either backend."""
    for interface in INTERFACES:
        for name, wanted in _methods(interface).items():
            found = _parameters(inspect.signature(getattr(implementation, name)))
            assert found[:len(wanted.parameters)] == _parameters(wanted), f"{implementation.__name__}.{name}"
            extra = found[len(wanted.parameters):]
            assert all(default is not inspect.Parameter.empty for _, _, default in extra), \
                f"{implementation.__name__}.{name}: a parameter the interface does not pass has no default"


def test_the_lazy_store_refuses_until_connected_then_forwards_every_method(tmp_path: Path) -> None:
    lazy = LazyStore(settings(data_dir=tmp_path))
    with pytest.raises(StoreUnavailable, match="not connected"):
        lazy.get_document("", "notes", "d1")
    with lazy.inline_read() as now:
        assert now is False
    lazy.connect()
    try:
        assert all(callable(getattr(lazy, name)) for name in _methods(Store))
        record, chunks = doc()
        version = lazy.replace_document(record, chunks)
        assert lazy.version() == version and lazy.get_document("", "notes", "d1") == record
        assert [s.chunk.chunk_id for s in lazy.iter_chunks("notes")] == [c.chunk.chunk_id for c in chunks]
        lazy.ensure_conversation("acme", "ann", "c1")
        lazy.add_message("c1", "user", "hello", {"k": "v"})
        assert [m.meta for m in lazy.messages("c1", with_meta=False)] == [{}]  # keyword arguments pass through
    finally:
        lazy.close()
