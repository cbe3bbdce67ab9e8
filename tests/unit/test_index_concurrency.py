"""Searches running while a document is replaced over and over see the old version or
the new one, never a mix; deletes and compaction keep the index and filters exact."""
from __future__ import annotations

import threading

import numpy as np

from ragmesh.types import Chunk, SearchFilter, StoredChunk
from services.retriever.index import COMPACT_MIN_DEAD, IndexRegistry

DIM = 8
RNG = np.random.default_rng(7)


def document(doc_id: str, version: str, n: int, tenant: str = "") -> tuple[tuple[str, str], list[StoredChunk]]:
    chunks = [
        StoredChunk(Chunk(f"{doc_id}#{i}", doc_id, "c", f"shared words {version} part {i}", {"v": version},
                          "2024-01-01", tenant, chunk_index=i), RNG.standard_normal(DIM).astype(np.float32))
        for i in range(n)
    ]
    return (tenant, doc_id), chunks


def test_search_during_replace_never_returns_a_mix() -> None:
    registry = IndexRegistry(DIM)
    registry.apply("c", [document("other", "zzz", 5), document("doc", "old", 4)])
    stop = threading.Event()
    mixes: list[set[str]] = []
    searches = [0]

    def reader() -> None:
        query = np.ones((1, DIM), np.float32)
        while not stop.is_set():
            found = registry.get("c").search(["shared words"], query, 50, SearchFilter())
            doc_chunks = [c for c in found.chunks.values() if c.doc_id == "doc"]
            versions = {c.metadata["v"] for c in doc_chunks}
            chunks_seen = {found.chunks[int(s)].chunk_id for s in found.sparse[0][0]
                           if found.chunks[int(s)].doc_id == "doc"}
            if len(versions) > 1 or len(chunks_seen) not in (0, 4, 6):
                mixes.append(versions)
            searches[0] += 1

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for t in readers:
        t.start()
    for i in range(300):
        version, n = ("new", 6) if i % 2 == 0 else ("old", 4)
        registry.apply("c", [document("doc", version, n)])
    stop.set()
    for t in readers:
        t.join()
    assert searches[0] > 50, "readers barely ran"
    assert not mixes, f"{len(mixes)} searches saw a half-replaced document: {mixes[:3]}"


def test_deletes_tombstone_and_compaction_keeps_results() -> None:
    registry = IndexRegistry(DIM)
    registry.apply("c", [document(f"d{i}", "v", 2, tenant="t1") for i in range(COMPACT_MIN_DEAD)])
    registry.apply("c", [document("keep", "kept", 3, tenant="t1")])
    before = registry.get("c", "t1")
    query = before.stored_chunks(("t1", "keep"))[0].vector
    registry.apply("c", [(("t1", f"d{i}"), []) for i in range(COMPACT_MIN_DEAD)])
    after = registry.get("c", "t1")
    assert after is not before, "mostly-dead collection should have been compacted"
    assert len(after) == after.live == 3
    found = after.search(["kept"], query.reshape(1, -1), 10, SearchFilter(tenant="t1"))
    dense_slots = found.dense[0][0]
    assert {found.chunks[int(s)].doc_id for s in dense_slots} == {"keep"}
    assert found.chunks[int(dense_slots[0])].chunk_id == "keep#0"
    assert len(found.sparse[0][0]) == 3
    assert after.search(["kept"], query.reshape(1, -1), 10, SearchFilter()).admitted == 0, "tenant scope applies"


def test_a_document_given_twice_in_one_write_ends_as_its_later_version() -> None:
    registry = IndexRegistry(DIM)
    registry.apply("c", [document("doc", "first", 2)])
    registry.apply("c", [document("doc", "second", 3), document("other", "o", 1), document("doc", "third", 4)])
    index = registry.get("c")
    assert index.live == 5 and index.sparse.doc_freq("third") == 4
    assert index.sparse.doc_freq("first") == index.sparse.doc_freq("second") == 0
