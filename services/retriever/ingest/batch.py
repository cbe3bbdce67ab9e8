"""The documents of one ingest stream, committed together (group commit): a document ready to
store waits while the previous commit runs, and the documents that became ready meanwhile go
in the next one (the next ones, past the bounds below), so a search backend whose writes cost per
call (Milvus: the record of each document's keys, an upsert) takes one call for many documents,
and the next documents are parsed and embedded while a commit is written. Documents arriving slowly are committed one by one, at once.

Bounds: what waits is at most `rows` chunks or `bytes` (then the stream waits for the commit
under way); one commit in flight. Consistency is the Committer's: each commit is one store
transaction, then one backend write, so a search sees a document's old or new version, and a
crash between the two is repaired at the next start. A document whose previous version is still
waiting or being written is read again only after that commit (the caller asks `holds`)."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ragmesh.errors import InvalidArgument
from ragmesh.types import DocumentRecord, StoredChunk
from services.retriever.ingest.commit import Committer

log = logging.getLogger(__name__)

T = TypeVar("T")  # what the caller reports for a document once its commit ends
DocumentKey = tuple[str, str, str]  # (tenant, collection, doc_id)
ROWS = 2048  # chunks waiting at most ...
BYTES = 16 << 20  # ... and bytes (texts, vectors, metadata), as the Milvus backend's upsert calls


@dataclass
class Ready(Generic[T]):
    """A document ready to store, with what to report once its commit succeeded or failed."""

    record: DocumentRecord
    chunks: list[StoredChunk]
    indexed: T
    failed: Callable[[Exception], T]

    @property
    def key(self) -> DocumentKey:
        return self.record.tenant, self.record.collection, self.record.doc_id

    def size(self) -> int:
        """Bytes it holds, near enough to bound a batch by."""
        return sum(len(s.chunk.text) + sum(len(k) + len(v) for k, v in s.chunk.metadata.items()) + 128
                   + (0 if s.vector is None else s.vector.nbytes) for s in self.chunks)


class CommitBatch(Generic[T]):
    def __init__(self, committer: Committer, rows: int = ROWS, max_bytes: int = BYTES) -> None:
        self.committer = committer
        self.rows, self.max_bytes = rows, max_bytes
        self.waiting: list[tuple[Ready[T], int]] = []  # with its size in bytes
        self.waiting_rows = self.waiting_bytes = 0
        self.writing: asyncio.Task[list[T]] | None = None
        self.written: set[DocumentKey] = set()  # documents of the commit under way

    def holds(self, key: DocumentKey) -> bool:
        """Whether a version of the document is waiting or being written."""
        return key in self.written or any(r.key == key for r, _ in self.waiting)

    def add(self, ready: Ready[T]) -> None:
        size = ready.size()
        self.waiting.append((ready, size))
        self.waiting_rows += len(ready.chunks)
        self.waiting_bytes += size

    @property
    def full(self) -> bool:
        return self.waiting_rows >= self.rows or self.waiting_bytes >= self.max_bytes

    async def turn(self) -> list[T]:
        """Reports of a commit that ended; starts the next when none runs (after the one under
        way when the waiting documents fill the batch)."""
        done: list[T] = []
        if self.writing is not None and (self.writing.done() or self.full):
            done = await self._reap()
        if self.writing is None and self.waiting:
            items = self._next_commit()
            self.written = {r.key for r in items}
            self.writing = asyncio.create_task(asyncio.to_thread(self._write, items))
        return done

    def _next_commit(self) -> list[Ready[T]]:
        """The oldest waiting documents within the bounds (at least one): documents that became
        ready while the stream waited for a commit go in the ones after it, never past the bounds."""
        taken = rows = size = 0
        for ready, nbytes in self.waiting:
            if taken and (rows + len(ready.chunks) > self.rows or size + nbytes > self.max_bytes):
                break
            taken, rows, size = taken + 1, rows + len(ready.chunks), size + nbytes
        items = [r for r, _ in self.waiting[:taken]]
        del self.waiting[:taken]
        self.waiting_rows -= rows
        self.waiting_bytes -= size
        return items

    async def settle(self) -> list[T]:
        """Everything waiting committed; their reports."""
        done: list[T] = []
        while self.writing is not None or self.waiting:
            if self.writing is not None:
                done += await self._reap()
            done += await self.turn()
        return done

    async def _reap(self) -> list[T]:
        assert self.writing is not None
        try:
            return await asyncio.shield(self.writing)  # a cancelled stream does not cut a commit short
        finally:
            if self.writing.done():
                self.writing, self.written = None, set()

    async def close(self) -> None:
        """The stream ended early (its caller went away): the commit under way ends before the
        call does; documents still waiting were never reported INDEXED and are not stored."""
        self.waiting, self.waiting_rows, self.waiting_bytes = [], 0, 0
        if self.writing is not None:
            await asyncio.wait([self.writing])
            self.writing = None

    def _write(self, items: list[Ready[T]]) -> list[T]:
        try:
            self.committer.replace([(r.record, r.chunks) for r in items])
            return [r.indexed for r in items]
        except InvalidArgument as exc:  # a document's chunk ids are another's: the others are written alone
            if len(items) == 1:
                return [items[0].failed(exc)]
            return [report for r in items for report in self._write([r])]
        except Exception as exc:  # noqa: BLE001 - each document says why it failed; the stream goes on
            return [r.failed(exc) for r in items]
