"""Replicas on one store follow each other's writes through the change log: own writes are
not replayed, deletes propagate, and a store that pushes changes wakes the follower at once."""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np

from ragmesh.store.sqlite import SqliteStore
from ragmesh.types import Chunk, DocumentRecord, StoredChunk
from services.retriever.freshness import Follower
from services.retriever.index import IndexRegistry
from services.retriever.ingest.commit import Committer


def document(doc_id: str, text: str) -> tuple[DocumentRecord, list[StoredChunk]]:
    record = DocumentRecord(doc_id, "c", "", f"hash-{text}", chunk_count=1)
    return record, [StoredChunk(Chunk(f"c/{doc_id}#0", doc_id, "c", text), np.ones(4, np.float32))]


def replica(path: Path, store_type: type = SqliteStore) -> tuple[Committer, Follower]:
    store = store_type(path)
    committer = Committer(store, IndexRegistry(4))
    follower = Follower(committer, interval_s=60)
    follower.start_from(store.version())
    return committer, follower


def texts(committer: Committer) -> list[str]:
    index = committer.registry.get("c")
    return sorted(c.text for c in index.chunks if c is not None) if index else []


def test_replicas_converge_and_skip_their_own_writes(tmp_path: Path) -> None:
    a, follow_a = replica(tmp_path / "s.db")
    b, follow_b = replica(tmp_path / "s.db")
    a.replace([document("d1", "alpha"), document("d2", "beta")])
    assert follow_a.catch_up() == 0, "a's own write is indexed already"
    assert follow_b.catch_up() == 2 and texts(b) == texts(a) == ["alpha", "beta"]
    b.replace([document("d1", "gamma")])
    b.delete("", "c", ["d2"])
    assert follow_a.catch_up() == 2 and texts(a) == texts(b) == ["gamma"]
    follow_b.catch_up()  # b replays its own delete (harmless): deletes do not report their version
    assert follow_a.catch_up() == follow_b.catch_up() == 0 and texts(a) == texts(b) == ["gamma"]


class PushingStore(SqliteStore):
    """A store that pushes changes (as a MongoDB change stream does on a replica set)."""

    pushed = threading.Event()

    def watch_changes(self, on_change, stop: threading.Event) -> bool:
        while not stop.is_set():
            if self.pushed.wait(0.05):
                self.pushed.clear()
                on_change()
        return True


def test_a_pushed_change_wakes_the_follower_before_its_interval(tmp_path: Path) -> None:
    writer, _ = replica(tmp_path / "s.db")
    reader, follower = replica(tmp_path / "s.db", PushingStore)

    async def scenario() -> list[str]:
        task = asyncio.create_task(follower.run())  # interval 60 s: only the push can wake it
        await asyncio.sleep(0.1)
        writer.replace([document("d1", "pushed")])
        PushingStore.pushed.set()
        for _ in range(100):
            if texts(reader):
                break
            await asyncio.sleep(0.05)
        task.cancel()
        return texts(reader)

    assert asyncio.run(scenario()) == ["pushed"]
