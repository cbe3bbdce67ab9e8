"""Document in, indexed chunks out: validate -> hash -> chunk -> embed -> store -> index.

Each document reports its progress; a failure is reported for that document,
leaves nothing behind (the store write is one transaction and comes last), and
the rest of the stream goes on."""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from ragmesh.errors import InvalidArgument, RagmeshError
from ragmesh.store import Store
from ragmesh.types import Chunk, Document, DocumentRecord, StoredChunk
from ragmesh.validation import check_date, check_name
from services.retriever.index import IndexRegistry
from services.retriever.ingest.chunker import chunk_text
from services.retriever.search import EmbedFn

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 5_000_000


@dataclass
class Progress:
    doc_id: str
    collection: str
    stage: str  # PARSED | CHUNKED | EMBEDDED | INDEXED | UNCHANGED | FAILED
    chunks: int = 0
    error: str = ""


def content_hash(doc: Document) -> str:
    """What the chunks are built from: same hash, nothing to redo."""
    payload = json.dumps([doc.text, doc.metadata, doc.date, doc.title], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def chunk_id(doc: Document, index: int) -> str:
    prefix = f"{doc.tenant}/" if doc.tenant else ""
    return f"{prefix}{doc.collection}/{doc.doc_id}#{index}"


def validate(doc: Document) -> None:
    if not doc.doc_id.strip():
        raise InvalidArgument("doc_id", "must not be empty")
    check_name("collection", doc.collection)
    if not doc.text.strip():
        raise InvalidArgument("text", f"document {doc.doc_id!r} has no text")
    if len(doc.text) > MAX_TEXT_CHARS:
        raise InvalidArgument("text", f"document {doc.doc_id!r} is over {MAX_TEXT_CHARS} characters")
    check_date("date", doc.date)


class Ingestor:
    def __init__(
        self, store: Store, registry: IndexRegistry, embed: EmbedFn,
        min_chars: int = 400, max_chars: int = 800, batch_size: int = 64,
    ) -> None:
        self.store = store
        self.registry = registry
        self.embed = embed
        self.min_chars = min_chars
        self.max_chars = max_chars
        self.batch_size = batch_size

    async def ingest(self, documents: AsyncIterator[Document]) -> AsyncIterator[Progress]:
        async for doc in documents:
            async for progress in self.ingest_one(doc):
                yield progress

    async def ingest_one(self, doc: Document) -> AsyncIterator[Progress]:
        def step(stage: str, chunks: int = 0, error: str = "") -> Progress:
            return Progress(doc.doc_id, doc.collection, stage, chunks, error)

        try:
            validate(doc)
            digest = content_hash(doc)
            existing = await asyncio.to_thread(self.store.get_document, doc.tenant, doc.collection, doc.doc_id)
            if existing is not None and existing.content_hash == digest:
                yield step("UNCHANGED", existing.chunk_count)
                return
            yield step("PARSED")
            texts = chunk_text(doc.text, self.min_chars, self.max_chars)
            chunks = [
                Chunk(
                    chunk_id=chunk_id(doc, i), doc_id=doc.doc_id, collection=doc.collection,
                    text=text, metadata=dict(doc.metadata), date=doc.date, tenant=doc.tenant,
                    chunk_index=i,
                )
                for i, text in enumerate(texts)
            ]
            yield step("CHUNKED", len(chunks))
            vectors = await self._embed(texts)
            yield step("EMBEDDED", len(chunks))
            record = DocumentRecord(
                doc_id=doc.doc_id, collection=doc.collection, tenant=doc.tenant, content_hash=digest,
                title=doc.title, metadata=dict(doc.metadata), date=doc.date, chunk_count=len(chunks),
            )
            stored = [StoredChunk(c, v) for c, v in zip(chunks, vectors)]
            await asyncio.to_thread(self.store.replace_document, record, stored)
            await asyncio.to_thread(self.registry.apply, doc.collection, [((doc.tenant, doc.doc_id), stored)])
            yield step("INDEXED", len(chunks))
        except RagmeshError as exc:
            log.warning("document failed", extra={"doc_id": doc.doc_id, "error": str(exc)})
            yield step("FAILED", error=str(exc))

    async def _embed(self, texts: list[str]) -> np.ndarray:
        parts = [
            await self.embed(texts[i : i + self.batch_size], "DOCUMENT")
            for i in range(0, len(texts), self.batch_size)
        ]
        return np.concatenate(parts) if parts else np.zeros((0, self.registry.dimensions), np.float32)

    async def delete(self, tenant: str, collection: str, doc_ids: list[str]) -> tuple[int, int]:
        check_name("collection", collection)
        removed = await asyncio.to_thread(self.store.delete_documents, tenant, collection, doc_ids)
        await asyncio.to_thread(self.registry.apply, collection, [((tenant, d), []) for d in doc_ids])
        return removed
