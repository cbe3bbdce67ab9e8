"""Document in, indexed chunks out: parse -> per document: hash -> detect, redact, chunk ->
embed (and summarise, side by side) -> store -> index.

Each document reports its progress; a failure is reported for that document with the file
and the reason, leaves nothing behind (chunks and outline are one store transaction, and it
comes last), and the rest of the stream goes on."""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from ragmesh import metrics
from ragmesh.errors import InvalidArgument, RagmeshError
from ragmesh.store import CorpusStore
from ragmesh.types import Chunk, Document, DocumentRecord, SearchFilter, SectionOutline, StoredChunk
from ragmesh.validation import (
    MAX_DOC_IDS, MAX_FILENAME_CHARS, MAX_ID_CHARS, MAX_MIME_TYPE_CHARS, MAX_TITLE_CHARS, RESERVED_PREFIX, check_date,
    check_list, check_metadata, check_name, check_text,
)
from services.retriever import filters
from services.retriever.backend import SearchBackend
from services.retriever.ingest.commit import Committer
from services.retriever.ingest.embedding import TRANSIENT, BatchEmbedder
from services.retriever.ingest.parsed import BadRecord, Parsed
from services.retriever.ingest.sanitize import is_redacted
from services.retriever.ingest.strategies import Chunked, Sizes, chunk_document
from services.retriever.ingest.summaries import Summarizer, table_of_contents
from services.retriever.ingest.workers import ParsePool, shared_pool
from services.retriever.search import EmbedFn

log = logging.getLogger(__name__)

# Part of every content hash: a pipeline that chunks differently re-chunks unchanged documents.
PIPELINE_VERSION = 2
MAX_BYTES = 50 * 1024 * 1024


@dataclass
class Progress:
    doc_id: str
    collection: str
    stage: str  # PARSED | CHUNKED | EMBEDDED | INDEXED | UNCHANGED | FAILED
    chunks: int = 0
    error: str = ""
    filename: str = ""
    doc_type: str = ""
    redactions: int = 0
    sensitivity: str = ""
    summarized: bool = False


@dataclass(frozen=True)
class SummaryPolicy:
    """Summaries for documents of at least min_chars when enabled; a request's own
    `summarize` overrides both (bulk loads skip them, a single upload may insist)."""

    enabled: bool = True
    min_chars: int = 3000

    def wants(self, requested: bool | None, length: int) -> bool:
        return requested if requested is not None else self.enabled and length >= self.min_chars


def chunk_id(tenant: str, collection: str, doc_id: str, index: int) -> str:
    prefix = f"{tenant}/" if tenant else ""
    return f"{prefix}{collection}/{doc_id}#{index}"


def _validate(doc: Document) -> None:
    """What the client sent, before anything is parsed (limits in ragmesh.validation)."""
    check_text("filename", doc.filename, MAX_FILENAME_CHARS)
    check_text("doc_id", doc.doc_id, MAX_ID_CHARS)
    if not doc.doc_id.strip():
        raise InvalidArgument("doc_id", "must not be empty (or give a filename)")
    check_name("collection", doc.collection)
    check_date("date", doc.date)
    check_text("title", doc.title, MAX_TITLE_CHARS)
    check_text("mime_type", doc.mime_type, MAX_MIME_TYPE_CHARS)
    check_metadata("metadata", doc.metadata)


def failure(exc: RagmeshError, label: str = "") -> str:
    """Why a document failed. One that failed for a passing reason (the embedder restarting after its
    retries ran out, a full queue) says so: nothing of it was stored, and sending it again will do."""
    again = " (retryable: nothing of it was stored; send it again)" if isinstance(exc, TRANSIENT) else ""
    return f"{label}: {exc}{again}" if label else f"{exc}{again}"


def _record_metadata(p: Parsed) -> dict[str, str]:
    """A parsed record's own fields as metadata, checked like a client's. Keys starting with "__"
    (a Mongoose "__v") are dropped rather than failing the record: they name the index's own columns."""
    metadata = {k: v for k, v in p.metadata.items() if not k.startswith(RESERVED_PREFIX)}
    check_metadata("record metadata", metadata)
    return metadata


class Ingestor:
    def __init__(
        self, store: CorpusStore, registry: SearchBackend, embed: EmbedFn, *,
        min_chars: int = 400, max_chars: int = 800, embed_max_chars: int = 800, batch_size: int = 64, max_bytes: int = MAX_BYTES,
        retries: int = 4, backoff_s: float = 0.5, summarizer: Summarizer | None = None,
        summaries: SummaryPolicy = SummaryPolicy(), committer: Committer | None = None,
        parsing: ParsePool | None = None,
    ) -> None:
        """`parsing`: the worker processes files are parsed in, with their limits (default: a pool
        with the default limits, shared by every Ingestor of the process)."""
        if embed_max_chars < 100:
            raise ValueError(f"EMBED_MAX_CHARS must be at least 100, got {embed_max_chars}")
        self.store = store
        self.registry = registry
        self.committer = committer or Committer(store, registry)
        self.embedder = BatchEmbedder(embed, batch_size, retries, backoff_s)
        self.sizes = Sizes(user=(min_chars, max_chars, 1), embed_max=embed_max_chars)
        self.max_bytes = max_bytes
        self.parsing = parsing or shared_pool()
        self.summarizer = summarizer
        self.summaries = summaries

    async def ingest(self, documents: AsyncIterator[Document]) -> AsyncIterator[Progress]:
        """Documents one at a time, as they arrive: the next is not read before the one in hand is
        done, so a stream holds one document's bytes (each at most max_bytes) however long it is.
        When the caller goes away (its gRPC call is cancelled) the task running this is cancelled
        at its next await: the document in hand stops where it is (a store write under way
        completes, whole; a parse under way is killed) and no more are read."""
        async for doc in documents:
            async for progress in self.ingest_one(doc):
                metrics.ingested(progress.stage, progress.chunks)
                yield progress

    async def ingest_one(self, doc: Document) -> AsyncIterator[Progress]:
        doc = dataclasses.replace(doc, doc_id=doc.doc_id or doc.filename)
        try:
            _validate(doc)
            parsed = await self.parsing.parse(doc, self.max_bytes)
        except RagmeshError as exc:
            doc_id, filename = doc.doc_id[:MAX_ID_CHARS], doc.filename[:MAX_FILENAME_CHARS]  # not echoed whole
            log.warning("document failed", extra={"doc_id": doc_id, "error": str(exc)})
            yield Progress(doc_id, doc.collection[:64], "FAILED", error=failure(exc), filename=filename)
            return
        label = doc.filename or doc.doc_id
        for number, p in enumerate(parsed, 1):
            if isinstance(p, BadRecord):
                error = f"{label}: {p.reason}"
                log.warning("record failed", extra={"doc_id": doc.doc_id, "error": error})
                yield Progress(f"{doc.doc_id}#{number}", doc.collection, "FAILED", error=error, filename=doc.filename)
                continue
            async for progress in self._ingest(doc, p, label if len(parsed) == 1 else f"{label} ({p.doc_id})"):
                yield progress

    async def _ingest(self, doc: Document, p: Parsed, label: str) -> AsyncIterator[Progress]:
        def step(stage: str, chunks: int = 0, chunked: Chunked | None = None, **kw: object) -> Progress:
            about = {} if chunked is None else {
                "doc_type": chunked.doc_type, "redactions": chunked.redactions, "sensitivity": chunked.sensitivity}
            return Progress(p.doc_id, doc.collection, stage, chunks, filename=doc.filename, **about, **kw)

        try:
            check_text("doc_id", p.doc_id, MAX_ID_CHARS)  # a record's own id
            metadata = {**_record_metadata(p), **doc.metadata, "filetype": p.filetype}
            if doc.filename:  # a record's own filename (a factsheet's PDF) names its source better
                metadata.setdefault("filename", doc.filename)
            date, title = doc.date or p.date, doc.title or p.title[:MAX_TITLE_CHARS] or doc.filename
            digest = self._hash(p, metadata, date, title)
            existing = await asyncio.to_thread(self.store.get_document, doc.tenant, doc.collection, p.doc_id)
            if existing is not None and existing.content_hash == digest and not (doc.summarize and not existing.summary):
                yield step("UNCHANGED", existing.chunk_count, summarized=bool(existing.summary),
                           doc_type=existing.metadata.get("doc_type", ""))
                return
            yield step("PARSED")
            chunked = await asyncio.to_thread(chunk_document, p, self.sizes)
            yield step("CHUNKED", len(chunked.pieces), chunked)
            metadata |= {"doc_type": chunked.doc_type, "sensitivity": chunked.sensitivity}
            chunks = self._chunks(doc, p.doc_id, chunked, metadata, date)
            summary, sections, vectors = await self._embed_and_summarise(
                [c for c, piece in zip(chunks, chunked.pieces) if not piece.is_parent],
                self.summaries.wants(doc.summarize, len(p.text)), title, chunked)
            yield step("EMBEDDED", len(chunks), chunked)
            record = DocumentRecord(
                doc_id=p.doc_id, collection=doc.collection, tenant=doc.tenant, content_hash=digest, title=title,
                metadata=metadata, date=date, chunk_count=len(chunks), summary=summary, sections=sections,
            )
            children = iter(vectors)
            stored = [StoredChunk(c, None if piece.is_parent else next(children))
                      for c, piece in zip(chunks, chunked.pieces)]
            await asyncio.to_thread(self.committer.replace, [(record, stored)])
            yield step("INDEXED", len(chunks), chunked, summarized=bool(summary))
        except RagmeshError as exc:
            log.warning("document failed", extra={"doc_id": p.doc_id, "error": str(exc)})
            yield step("FAILED", error=failure(exc, label))
        except Exception as exc:  # a bug or a store failure must not end the other documents' ingest
            log.exception("document failed", extra={"doc_id": p.doc_id})
            yield step("FAILED", error=f"{label}: internal error ({type(exc).__name__}: {exc})")

    def _hash(self, p: Parsed, metadata: dict[str, str], date: str, title: str) -> str:
        """What the chunks are built from: same hash, nothing to redo."""
        payload = json.dumps([
            PIPELINE_VERSION, dataclasses.asdict(self.sizes), [dataclasses.asdict(s) for s in p.sections],
            p.source, metadata, date, title,
        ], sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def _chunks(self, doc: Document, doc_id: str, chunked: Chunked, metadata: dict[str, str], date: str) -> list[Chunk]:
        """Every chunk carries the document's metadata and its own section, pages, flags and index."""
        out = []
        for i, piece in enumerate(chunked.pieces):
            meta = {
                **metadata, **piece.meta, "section": piece.section,
                "page": str(piece.page) if piece.page else "", "page_end": str(piece.page_end) if piece.page_end else "",
                "redacted": str(is_redacted(piece.text)).lower(), "chunk_index": str(i),
            }
            parent = chunk_id(doc.tenant, doc.collection, doc_id, piece.parent) if piece.parent is not None else ""
            out.append(Chunk(
                chunk_id=chunk_id(doc.tenant, doc.collection, doc_id, i), doc_id=doc_id, collection=doc.collection,
                text=piece.text, metadata=meta, date=date, tenant=doc.tenant, parent_chunk_id=parent, chunk_index=i,
            ))
        return out

    async def _embed_and_summarise(
        self, children: list[Chunk], summarise: bool, title: str, chunked: Chunked,
    ) -> tuple[str, list[SectionOutline], np.ndarray]:
        """Embeds the children while the generator writes the summaries; an embedding failure
        cancels the summaries (the document fails), a generator failure only loses them."""
        task = None
        if summarise and self.summarizer is not None:
            task = asyncio.create_task(self.summarizer.outline(title, chunked.sections))
        try:
            vectors = await self.embedder([c.text for c in children])
        except BaseException:
            if task is not None:
                task.cancel()
            raise
        if task is None:
            return "", table_of_contents(chunked.sections), vectors
        summary, sections = await task
        return summary, sections, vectors

    async def delete(
        self, tenant: str, collection: str, doc_ids: list[str], where: SearchFilter | None = None,
    ) -> tuple[int, int]:
        """Deletes the named documents, or those with a chunk the filter admits; returns
        (documents, chunks) removed."""
        check_name("collection", collection)
        doc_ids = check_list("doc_ids", doc_ids, MAX_DOC_IDS, MAX_ID_CHARS)
        if "" in doc_ids:
            raise InvalidArgument(f"doc_ids[{doc_ids.index('')}]", "must not be empty")
        if where is not None:
            if doc_ids:
                raise InvalidArgument("filter", "give doc_ids or a filter, not both")
            if not (where.any_of or where.equals or where.start_date or where.end_date):
                raise InvalidArgument("filter", "needs at least one condition (to delete by id, give doc_ids)")
            filters.validate(where)
            doc_ids = await asyncio.to_thread(self.registry.matching_doc_ids, collection,
                                              dataclasses.replace(where, tenant=tenant))
        return await asyncio.to_thread(self.committer.delete, tenant, collection, doc_ids)

