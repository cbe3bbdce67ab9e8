"""The SQLite store on a real file: atomic document replacement, version counter, conversations."""
import asyncio
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from ragmesh.identity import Identity, keys
from ragmesh.identity.authenticator import Authenticator
from ragmesh.store.lazy import LazyStore
from ragmesh.store.sqlite import SqliteStore
from ragmesh.types import Chunk, DocumentRecord, StoredChunk
from tests.unit.test_identity import make_settings


def doc(doc_id: str = "d1", n: int = 2, h: str = "h1") -> tuple[DocumentRecord, list[StoredChunk]]:
    record = DocumentRecord(doc_id, "notes", "", h, "T", {"fund_name": "K"}, "2024-01-02", n)
    chunks = [StoredChunk(Chunk(f"notes/{doc_id}#{i}", doc_id, "notes", f"text {i}", {"fund_name": "K"},
                                "2024-01-02", "", "", i), np.full(4, i, np.float32)) for i in range(n)]
    return record, chunks


def test_replace_is_whole_and_survives_reopen(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    v1 = store.replace_document(*doc(n=3))
    v2 = store.replace_document(*doc(n=1, h="h2"))
    assert v2 > v1
    store.close()
    store = SqliteStore(tmp_path / "s.db")
    chunks = list(store.iter_chunks("notes"))
    assert [c.chunk.chunk_id for c in chunks] == ["notes/d1#0"]
    assert chunks[0].vector.dtype == np.float32 and chunks[0].vector.shape == (4,)
    assert store.get_document("", "notes", "d1").content_hash == "h2"
    assert store.version() == v2


def test_chunks_are_read_in_pages_in_insertion_order(tmp_path: Path) -> None:
    """A rebuild pages through the table; every chunk comes back once, in order, page edges included."""
    store = SqliteStore(tmp_path / "s.db")
    for d in ("d1", "d2", "d3"):
        store.replace_document(*doc(d, n=3))
    everything = [c.chunk.chunk_id for c in store.iter_chunks()]
    assert len(everything) == 9
    for page in (1, 2, 3, 4, 9, 10):
        assert [c.chunk.chunk_id for c in store.iter_chunks(page=page)] == everything
    record, chunks = doc("o", n=2)
    record.collection = "other"
    for c in chunks:
        c.chunk.collection = "other"
    store.replace_document(record, chunks)
    assert [c.chunk.doc_id for c in store.iter_chunks("other", page=1)] == ["o", "o"]


def test_a_failed_replace_leaves_the_old_version(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.replace_document(*doc(n=2))
    record, chunks = doc(n=2, h="h2")
    chunks.append(chunks[0])  # duplicate chunk id: the insert fails halfway
    with pytest.raises(Exception):
        store.replace_document(record, chunks)
    assert [c.chunk.chunk_id for c in store.iter_chunks()] == ["notes/d1#0", "notes/d1#1"]
    assert store.get_document("", "notes", "d1").content_hash == "h1"


def test_delete_and_collection_counts(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.replace_document(*doc("d1", 2))
    store.replace_document(*doc("d2", 3))
    assert [(c.name, c.documents, c.chunks) for c in store.collections()] == [("notes", 2, 5)]
    assert store.delete_documents("", "notes", ["d1", "missing"]) == (1, 2)
    assert store.delete_documents("other-tenant", "notes", ["d2"]) == (0, 0)
    assert [(c.documents, c.chunks) for c in store.collections()] == [(1, 3)]


def test_messages_keep_order_and_tenant(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.ensure_conversation("t1", "u", "c1")
    ids = [store.add_message("c1", role, f"m{i}", {"i": i}) for i, role in enumerate(["user", "assistant"] * 3)]
    store.update_message(ids[-1], "edited", {"i": 99})
    messages = store.messages("c1")
    assert [m.content for m in messages] == ["m0", "m1", "m2", "m3", "m4", "edited"]
    assert [m.content for m in store.messages("c1", limit=2)] == ["m4", "edited"]
    assert store.conversation_exists("t1", "c1") and not store.conversation_exists("t2", "c1")
    assert not store.delete_conversation("t2", "c1")
    assert store.delete_conversation("t1", "c1") and store.messages("c1") == []


def test_an_old_file_gets_key_groups_and_its_keys_still_work(tmp_path: Path) -> None:
    """A file written before keys had groups: the api_keys table gains the column at start, its keys
    keep authenticating (with no groups), and new keys keep theirs."""
    settings = make_settings(tmp_path, api_key_pepper="pepper-1")
    path, pepper = settings.sqlite_path, settings.api_key_pepper
    old_key, old_record = keys.new_key(pepper, "acme", "alice", "admin", label="old laptop")
    old = sqlite3.connect(path)
    old.execute("""CREATE TABLE api_keys (
      key_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, user_id TEXT NOT NULL, role TEXT NOT NULL,
      secret_hash TEXT NOT NULL, created_at TEXT NOT NULL, expires_at TEXT NOT NULL, revoked_at TEXT NOT NULL,
      label TEXT NOT NULL)""")
    old.execute("INSERT INTO api_keys VALUES (?,?,?,?,?,?,?,?,?)",
                (old_record.key_id, "acme", "alice", "admin", old_record.secret_hash, old_record.created_at, "", "",
                 "old laptop"))
    old.commit()
    old.close()
    store = LazyStore(settings)
    users = Authenticator(settings, store, "users")  # opens the store on its first key, as a service does
    assert asyncio.run(users.authenticate({"authorization": f"Bearer {old_key}"})) == Identity(
        "acme", "alice", "admin", "key")
    assert store.api_key(old_record.key_id) == old_record, "every field kept; no groups"
    new_key, new_record = keys.new_key(pepper, "acme", "bob", "member", groups=["risk", "research"])
    store.add_api_key(new_record)
    assert asyncio.run(users.authenticate({"authorization": f"Bearer {new_key}"})).groups == ("research", "risk")
    assert store.revoke_api_key(old_record.key_id)
    store.close()
    reopened = SqliteStore(path)  # a migrated file opens as it is
    assert [r.groups for r in reopened.api_keys("acme")] == [(), ("research", "risk")]
    assert reopened.api_key(old_record.key_id).revoked_at
    columns = [row[1] for row in reopened._db.execute("PRAGMA table_info(api_keys)")]
    assert columns.count("group_names") == 1
    reopened.close()
