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
        query = np.ones(DIM, np.float32)
        while not stop.is_set():
            ix = registry.get("c")
            lists = ix.search("shared words", query, 50, SearchFilter())
            versions = {ix.chunk(int(s)).metadata["v"] for s in np.concatenate([lists.dense[0], lists.sparse[0]])
                        if ix.chunk(int(s)).doc_id == "doc"}
            chunks_seen = {ix.chunk(int(s)).chunk_id for s in lists.sparse[0] if ix.chunk(int(s)).doc_id == "doc"}
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
    registry.apply("c", [document(f"d{i}", "v", 2) for i in range(COMPACT_MIN_DEAD)])
    registry.apply("c", [document("keep", "kept", 3, tenant="t1")])
    before = registry.get("c")
    query = before.stored_chunks(("t1", "keep"))[0].vector
    registry.apply("c", [((  "", f"d{i}"), []) for i in range(COMPACT_MIN_DEAD)])
    after = registry.get("c")
    assert after is not before, "mostly-dead collection should have been compacted"
    assert len(after) == after.live == 3
    lists = after.search("kept", query, 10, SearchFilter(tenant="t1"))
    assert {after.chunk(int(s)).doc_id for s in lists.dense[0]} == {"keep"}
    assert after.chunk(int(lists.dense[0][0])).chunk_id == "keep#0"
    assert len(lists.sparse[0]) == 3
    assert after.search("kept", query, 10, SearchFilter()).admitted == 0, "tenant scope always applies"
