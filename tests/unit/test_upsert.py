"""Bulk Upsert: batches are written while the next one is read, every document lands once,
and a failed write stops the load with the batches before it kept whole."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from ragmesh.store.sqlite import SqliteStore
from ragmesh.types import Chunk
from services.retriever.index import IndexRegistry
from services.retriever.ingest.commit import Committer
from services.retriever.ingest.upsert import Upserter

DIM = 8


def chunks(docs: int, per_doc: int = 3) -> list[tuple[Chunk, np.ndarray]]:
    rng = np.random.default_rng(7)
    out = []
    for d in range(docs):
        for i in range(per_doc):
            chunk = Chunk(f"c/d{d}#{i}", f"d{d}", "c", f"document {d} part {i} words", {}, "", "", "", i)
            out.append((chunk, rng.standard_normal(DIM).astype(np.float32)))
    return out


class SlowStore(SqliteStore):
    """Slow writes that note how many messages were read meanwhile; fails write `fail_at`."""

    def __init__(self, path: Path, fail_at: int = 0) -> None:
        super().__init__(path)
        self.writes = 0
        self.fail_at = fail_at
        self.read = 0  # messages the stream has handed out
        self.read_while_writing = 0

    async def stream(self, items: list[tuple[Chunk, np.ndarray]]) -> AsyncIterator[tuple[Chunk, np.ndarray]]:
        for item in items:
            await asyncio.sleep(0)  # a network stream yields to the loop between messages
            self.read += 1
            yield item

    def replace_documents(self, items):  # type: ignore[no-untyped-def]
        self.writes += 1
        if self.writes == self.fail_at:
            raise OSError("disk full")
        before = self.read
        time.sleep(0.02)
        self.read_while_writing += self.read - before
        return super().replace_documents(items)


def test_every_document_lands_once_across_overlapping_batches(tmp_path: Path) -> None:
    store = SlowStore(tmp_path / "s.db")
    registry = IndexRegistry(DIM)
    upserter = Upserter(Committer(store, registry), batch_chunks=10)
    summary = asyncio.run(upserter.upsert(store.stream(chunks(100))))
    assert (summary.documents, summary.chunks, summary.rejected) == (100, 300, 0)
    assert store.writes == 25, "batches of 4 documents (12 chunks, the first past 10)"
    assert registry.get("c").live == 300
    assert store.read_while_writing > 0, "the next batch is read while one is written"
    assert [s.chunk.chunk_id for s in store.iter_chunks()] == [c.chunk_id for c, _ in chunks(100)]


def test_a_failed_write_stops_the_load_and_keeps_the_batches_before(tmp_path: Path) -> None:
    store = SlowStore(tmp_path / "s.db", fail_at=3)
    registry = IndexRegistry(DIM)
    upserter = Upserter(Committer(store, registry), batch_chunks=10)
    with pytest.raises(OSError, match="disk full"):
        asyncio.run(upserter.upsert(store.stream(chunks(100))))
    stored = [s.chunk.doc_id for s in store.iter_chunks()]
    assert stored == [f"d{d}" for d in range(8) for _ in range(3)], "two whole batches, nothing of the third"
    assert registry.get("c").live == 24


def test_a_cancelled_load_returns_only_after_the_batch_in_flight_is_written(tmp_path: Path) -> None:
    """The caller goes away mid-write: the write's thread cannot be stopped, so the load waits
    for it; nothing is written after the cancellation has been reported."""
    store = SlowStore(tmp_path / "s.db")
    upserter = Upserter(Committer(store, IndexRegistry(DIM)), batch_chunks=10)

    async def cancel_mid_write() -> tuple[int, int]:
        load = asyncio.create_task(upserter.upsert(store.stream(chunks(100))))
        while store.writes < 2:  # the second batch is being written (each write takes 20 ms)
            await asyncio.sleep(0.001)
        load.cancel()
        with pytest.raises(asyncio.CancelledError):
            await load
        written = len(list(store.iter_chunks()))
        await asyncio.sleep(0.1)  # a write still running would land now
        return written, len(list(store.iter_chunks()))

    at_cancel, later = asyncio.run(cancel_mid_write())
    assert at_cancel == later, "the batch in flight finished before the load returned"
    assert at_cancel >= 24 and at_cancel % 12 == 0, "whole batches only"


def test_a_batch_is_bounded_in_bytes_as_well_as_chunks(tmp_path: Path) -> None:
    """Chunks of 8 floats and ~30 characters (~70 bytes): a batch is written once it holds 500 bytes,
    long before its 4096 chunks; a document past its byte bound is rejected and the load goes on."""
    store = SlowStore(tmp_path / "s.db")
    upserter = Upserter(Committer(store, IndexRegistry(DIM)), batch_bytes=500, document_bytes=1000)
    big = [(Chunk(f"c/big#{i}", "big", "c", "x" * 100, {}, "", "", "", i), np.ones(DIM, np.float32))
           for i in range(10)]
    summary = asyncio.run(upserter.upsert(store.stream(chunks(10) + big + chunks(2))))
    assert (summary.documents, summary.rejected) == (12, 1), summary  # d0 and d1 come twice
    assert summary.errors == ["big: chunk: more than 1,000 bytes in one document"]
    assert store.writes >= 4, "batches of a few documents, not one of everything"
    assert "big" not in {s.chunk.doc_id for s in store.iter_chunks()}
