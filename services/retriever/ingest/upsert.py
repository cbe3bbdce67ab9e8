"""Bulk loads of chunks that already carry vectors (migrations from another vector
store, corpora embedded elsewhere). A document's chunks arrive together in the stream
and replace its stored chunks; documents are written and indexed in batches, each
batch in one store transaction."""
from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import numpy as np

from ragmesh.errors import InvalidArgument
from ragmesh.types import Chunk, DocumentRecord, StoredChunk
from ragmesh.validation import (
    MAX_CHUNK_ID_CHARS, MAX_CHUNK_METADATA_BYTES, MAX_CHUNK_METADATA_KEYS, MAX_ID_CHARS, check_date, check_metadata,
    check_name, check_text, shown,
)
from services.retriever.ingest.commit import Committer

log = logging.getLogger(__name__)

MAX_ERRORS = 100
SHOWN_ID_CHARS = 40  # of a rejected document's id, in its error
# Bounds on what one document may bring (the others are in ragmesh.validation); a document past
# one is rejected (counted and reported), and the load goes on.
MAX_CHUNK_CHARS = 100_000  # a searched chunk (its text is analysed for BM25)
MAX_PARENT_CHARS = 1_000_000  # a parent, stored for expansion only (a JSON record's complete source)
MAX_CHUNKS_PER_DOCUMENT = 100_000  # a document's chunks are held in memory until its last arrives
MAX_DOCUMENT_BYTES = 256 << 20  # ... and so are its bytes (texts, metadata, vectors)
BATCH_BYTES = 32 << 20  # a batch is written once it holds this many bytes, or batch_chunks chunks


@dataclass
class UpsertSummary:
    documents: int = 0
    chunks: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)


class Upserter:
    def __init__(self, committer: Committer, batch_chunks: int = 4096, batch_bytes: int = BATCH_BYTES,
                 document_bytes: int = MAX_DOCUMENT_BYTES) -> None:
        self.committer = committer
        self.registry = committer.registry
        self.batch_chunks = batch_chunks
        self.batch_bytes = batch_bytes
        self.document_bytes = document_bytes

    async def upsert(self, stream: AsyncIterator[tuple[Chunk, np.ndarray | None]]) -> UpsertSummary:
        """Reads the stream while the previous batch is written: one batch in flight at most,
        so memory stays at two batches (bounded in chunks and in bytes) and the document being
        read, and a failed write stops the load at that batch."""
        summary = UpsertSummary()
        batch: list[tuple[DocumentRecord, list[StoredChunk]]] = []
        batched = batched_bytes = 0  # chunks and bytes in `batch`
        current: list[StoredChunk] = []
        current_bytes = 0
        writing: asyncio.Task | None = None

        def close_document() -> None:
            nonlocal batched, batched_bytes, current_bytes
            if not current:
                return
            try:
                batch.append((self._record(current), list(current)))
                batched += len(current)
                batched_bytes += current_bytes
            except InvalidArgument as exc:
                reject(current[0].chunk.doc_id, str(exc))
            current.clear()
            current_bytes = 0

        async def hand_over() -> None:
            nonlocal batch, batched, batched_bytes, writing
            if writing is not None:
                await asyncio.shield(writing)  # cancelling the load must not cancel a write mid-way
            writing = asyncio.create_task(self._write(batch, summary)) if batch else None
            batch, batched, batched_bytes = [], 0, 0

        def reject(doc_id: str, error: str) -> None:
            summary.rejected += 1
            if len(summary.errors) < MAX_ERRORS:
                # the document's id as given (the caller reads the errors by it), cut short
                name = doc_id if len(doc_id) <= SHOWN_ID_CHARS else doc_id[:SHOWN_ID_CHARS] + "..."
                summary.errors.append(f"{name}: {error}")

        skipping: tuple[str, str, str] | None = None  # a document rejected for its length: its later chunks go
        try:
            async for chunk, vector in stream:
                if skipping is not None:
                    if _key(chunk) == skipping:
                        continue
                    skipping = None
                if current and _key(current[0].chunk) != _key(chunk):
                    close_document()
                    if batched >= self.batch_chunks or batched_bytes >= self.batch_bytes:
                        await hand_over()
                size = _size(chunk, vector)
                over = (f"{MAX_CHUNKS_PER_DOCUMENT:,} chunks" if len(current) == MAX_CHUNKS_PER_DOCUMENT else
                        f"{self.document_bytes:,} bytes" if current_bytes + size > self.document_bytes else "")
                if over:
                    reject(chunk.doc_id, f"chunk: more than {over} in one document")
                    skipping = _key(chunk)
                    current.clear()
                    current_bytes = 0
                    continue
                current.append(StoredChunk(chunk, vector))
                current_bytes += size
            close_document()
            await hand_over()
            if writing is not None:
                await asyncio.shield(writing)
        except BaseException as exc:
            # The caller went away or the stream broke: the batch in flight finishes first (its
            # thread cannot be stopped), so nothing writes after the error has been reported.
            if writing is not None:
                await asyncio.wait([writing])
                failed = None if writing.cancelled() else writing.exception()
                if failed is not None and failed is not exc:
                    log.error("an upsert batch failed while the load was ending", extra={"error": repr(failed)})
            raise
        return summary

    def _record(self, chunks: list[StoredChunk]) -> DocumentRecord:
        """The document's header, once every chunk is checked: any bad chunk rejects the document."""
        first = chunks[0].chunk
        check_text("chunk.doc_id", first.doc_id, MAX_ID_CHARS, required=True)
        check_name("chunk.collection", first.collection)
        ids = [s.chunk.chunk_id for s in chunks]
        if not all(ids) or len(set(ids)) != len(ids):
            raise InvalidArgument("chunk.chunk_id", "every chunk needs a chunk_id, unique within its document")
        parents = {s.chunk.parent_chunk_id for s in chunks if s.chunk.parent_chunk_id}
        own = set(ids)
        dimensions = self.registry.dimensions
        for s in chunks:
            c = s.chunk
            check_text("chunk.chunk_id", c.chunk_id, MAX_CHUNK_ID_CHARS)
            name = shown(c.chunk_id)
            check_text("chunk.parent_chunk_id", c.parent_chunk_id, MAX_CHUNK_ID_CHARS)
            # Decided from this document alone, so the answer never says whether the id is used elsewhere.
            if c.parent_chunk_id and (c.parent_chunk_id not in own or c.parent_chunk_id == c.chunk_id):
                raise InvalidArgument("chunk.parent_chunk_id", f"chunk {name}: a parent must be another chunk "
                                                               "of the same document, sent with it")
            check_date("chunk.date", c.date)
            check_metadata("chunk.metadata", c.metadata, MAX_CHUNK_METADATA_KEYS, MAX_CHUNK_METADATA_BYTES)
            if not c.text.strip():
                raise InvalidArgument("chunk.text", f"chunk {name} has no text")
            limit = MAX_CHUNK_CHARS if s.vector is not None else MAX_PARENT_CHARS
            if len(c.text) > limit:
                raise InvalidArgument("chunk.text", f"chunk {name} has {len(c.text):,} characters; the limit is "
                                                    f"{limit:,}{'' if s.vector is not None else ' for a parent'}")
            if s.vector is not None:
                if len(s.vector) != dimensions:
                    raise InvalidArgument("vector", f"chunk {name} has {len(s.vector)} dimensions, "
                                                    f"the collection needs {dimensions}")
                if not np.isfinite(s.vector).all():
                    raise InvalidArgument("vector", f"chunk {name} holds NaN or infinity: every value must be finite")
            elif c.chunk_id not in parents:
                raise InvalidArgument("vector", f"chunk {name} has no vector and is no "
                                                "chunk's parent (parents are stored, not searched)")
        digest = hashlib.sha256("\x1f".join(f"{s.chunk.chunk_id}\x1e{s.chunk.text}" for s in chunks).encode())
        return DocumentRecord(
            doc_id=first.doc_id, collection=first.collection, tenant=first.tenant,
            content_hash=digest.hexdigest(), metadata=dict(first.metadata), date=first.date,
            chunk_count=len(chunks),
        )

    async def _write(self, batch: list[tuple[DocumentRecord, list[StoredChunk]]], summary: UpsertSummary) -> None:
        await asyncio.to_thread(self.committer.replace, batch)
        summary.documents += len(batch)
        summary.chunks += sum(len(c) for _, c in batch)


def _size(chunk: Chunk, vector: np.ndarray | None) -> int:
    """What a chunk holds in memory, near enough to bound a stream by (characters count as bytes)."""
    strings = (chunk.chunk_id, chunk.doc_id, chunk.text, chunk.date, chunk.parent_chunk_id)
    return (sum(map(len, strings)) + sum(len(k) + len(v) for k, v in chunk.metadata.items())
            + (0 if vector is None else vector.nbytes))


def _key(chunk: Chunk) -> tuple[str, str, str]:
    return chunk.tenant, chunk.collection, chunk.doc_id
