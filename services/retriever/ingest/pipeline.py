"""Document in, indexed chunks out: parse -> per document: hash -> detect, redact, chunk ->
embed (and summarise, side by side) -> store -> index, the store and index writes of a
stream's documents grouped (batch.py: one commit carries every document that became ready
while the previous commit ran).

Each document reports its progress; a failure is reported for that document with the file
and the reason, leaves nothing behind (chunks and outline are one store transaction, and it
comes last), and the rest of the stream goes on."""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np

from ragmesh import access, metrics
from ragmesh.access import Access
from ragmesh.errors import InvalidArgument, NotFound, PermissionDenied, RagmeshError
from ragmesh.identity import SERVICE, Identity
from ragmesh.store import CorpusStore
from ragmesh.types import (MEMORY_AUTHOR, MEMORY_COLLECTION, Chunk, Document, DocumentRecord, SearchFilter,
                           SectionOutline, StoredChunk)
from ragmesh.validation import (
    MAX_DOC_IDS, MAX_FILENAME_CHARS, MAX_ID_CHARS, MAX_MIME_TYPE_CHARS, MAX_TITLE_CHARS, RESERVED_PREFIX, check_date,
    check_list, check_metadata, check_name, check_text, check_unit_vector, shown,
)
from services.retriever import filters, permissions, personal
from services.retriever.backend import SearchBackend
from services.retriever.ingest import batch
from services.retriever.ingest.batch import CommitBatch, Ready
from services.retriever.ingest.commit import Committer
from services.retriever.ingest.embedding import TRANSIENT, BatchEmbedder, task_for
from services.retriever.ingest.parsed import RECORD_FILETYPE, BadRecord, Parsed
from services.retriever.ingest.sanitize import is_redacted
from services.retriever.ingest.strategies import Chunked, Sizes, chunk_document
from services.retriever.ingest.summaries import Summarizer, table_of_contents
from services.retriever.ingest.workers import ParsePool, shared_pool
from services.retriever.permissions import Uploader
from services.retriever.search import EmbedFn
from services.retriever.searched import TITLE_KEY, searched_text

log = logging.getLogger(__name__)

# Part of every content hash: a pipeline that chunks differently re-chunks unchanged documents.
# 4: every chunk carries its document's title, and is embedded after it (searched.py)
PIPELINE_VERSION = 4
MAX_BYTES = 50 * 1024 * 1024
# Characters of chunk text the records sharing one embedding call hold at most (unless one record alone holds
# more): one slice of the embedder's for a tenant alone (services/embedder/app.py), so a call of short
# documents costs one round trip and runs whole (16 KB a call made the demo corpus's calls pass
# EMBED_TIMEOUT_S on a busy machine).
GROUP_CHARS = 4096
NEXT_AT_HAND_S = 0.005  # how long the group waits for the stream's next document before it is embedded
# Embedding calls a stream keeps under way beyond the one it waits for, while it reads and chunks the next
# documents: the embedder finds the next call queued when one ends (no core idles through a round trip and
# the stream's chunking), and takes queued calls of one tenant together (up to its batch of texts), so its
# threads share out more texts a call. Measured with SciFact through Retriever/Ingest (bench/scifact_eval.py).
CALLS_AHEAD = 2


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


def _failed(doc_id: str, exc: Exception, label: str) -> str:
    """A document's error, logged: what was wrong with it, or an internal error (a bug, a store failure)."""
    if isinstance(exc, RagmeshError):
        log.warning("document failed", extra={"doc_id": doc_id, "error": str(exc)})
        return failure(exc, label)
    log.error("document failed", extra={"doc_id": doc_id}, exc_info=exc)
    return f"{label}: internal error ({type(exc).__name__}: {exc})"


def _record_metadata(p: Parsed) -> dict[str, str]:
    """A parsed record's own fields as metadata, checked like a client's. Keys starting with "__"
    (a Mongoose "__v") are dropped rather than failing the record: they name the index's own columns."""
    metadata = {k: v for k, v in p.metadata.items() if not k.startswith(RESERVED_PREFIX)}
    check_metadata("record metadata", metadata)
    return metadata


class _Steps:
    """A record's progress reports (its chunking's findings once it is chunked)."""

    def __init__(self, doc: Document, doc_id: str) -> None:
        self.doc, self.doc_id = doc, doc_id
        self.chunked: Chunked | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return self.doc.tenant, self.doc.collection, self.doc_id

    def __call__(self, stage: str, chunks: int = 0, **kw: object) -> Progress:
        c = self.chunked
        about = {} if c is None or stage == "FAILED" else {
            "doc_type": c.doc_type, "redactions": c.redactions, "sensitivity": c.sensitivity}
        return Progress(self.doc_id, self.doc.collection, stage, chunks, filename=self.doc.filename, **about | kw)


@dataclass
class _Prepared:
    """A record chunked, waiting for its embedding (its summaries under way, when it has them)."""

    step: _Steps
    label: str
    record: DocumentRecord  # without its summary yet
    chunks: list[Chunk]
    summary: asyncio.Task | None
    given: np.ndarray | None = None  # its searched chunks' vectors, from the one sent with it: not embedded

    @property
    def children(self) -> list[Chunk]:
        """The chunks that are embedded and searched (parents are stored for expansion only)."""
        assert self.step.chunked is not None
        return [c for c, piece in zip(self.chunks, self.step.chunked.pieces) if not piece.is_parent]

    @cached_property
    def embedded_chars(self) -> int:
        """Characters of its children's texts as they are embedded (each after its title)."""
        return sum(len(searched_text(c)) for c in self.children)

    def cancel(self) -> None:
        if self.summary is not None:
            self.summary.cancel()


def _failure_step(d: _Prepared, exc: Exception) -> Progress:
    return d.step("FAILED", error=_failed(d.record.doc_id, exc, d.label))


@dataclass
class _Call:
    """A group's embedding call under way."""

    docs: list[_Prepared]
    vectors: asyncio.Future

    def cancel(self) -> None:
        self.vectors.cancel()
        for d in self.docs:
            d.cancel()


class _Group:
    """Records read ahead to share one embedding call: full at the embedder's batch of texts
    (or GROUP_CHARS), so a call carries many short documents and one long document alone; and the
    calls of earlier groups still under way (at most CALLS_AHEAD while the stream reads on)."""

    def __init__(self, texts: int) -> None:
        self.texts = texts
        self.docs: list[_Prepared] = []
        self.calls: deque[_Call] = deque()

    @classmethod
    def of(cls, d: _Prepared) -> "_Group":
        group = cls(1)
        group.docs.append(d)
        return group

    def add(self, d: _Prepared) -> None:
        self.docs.append(d)

    @property
    def full(self) -> bool:
        texts = sum(len(d.children) for d in self.docs)
        return texts >= self.texts or sum(d.embedded_chars for d in self.docs) >= GROUP_CHARS

    def fits(self, d: _Prepared) -> bool:
        """Whether `d` joins the group within its texts and GROUP_CHARS (a group's first always does): a
        call the embedder runs whole, not cut into a slice and a tail of a text or two that keeps one
        core busy while the other idles. A call has one embedding task (task_for its documents' collections)."""
        docs = [*self.docs, d]
        return not self.docs or (task_for(self.docs[0].record.collection) == task_for(d.record.collection)
                                 and sum(len(e.children) for e in docs) <= self.texts
                                 and sum(e.embedded_chars for e in docs) <= GROUP_CHARS)

    @property
    def pending(self) -> bool:
        """Documents not embedded yet: gathered, or in a call under way."""
        return bool(self.docs or self.calls)

    def holds(self, key: tuple[str, str, str]) -> bool:
        return any(d.step.key == key for d in [*self.docs, *(d for call in self.calls for d in call.docs)])

    def take(self) -> list[_Prepared]:
        docs, self.docs = self.docs, []
        return docs

    def cancel(self) -> None:
        for d in self.take():
            d.cancel()
        while self.calls:
            self.calls.popleft().cancel()


async def _arrives(following: asyncio.Future) -> bool:
    """Whether the stream's next document is at hand (already sent): the group waits for it."""
    await asyncio.wait([following], timeout=NEXT_AT_HAND_S)
    return following.done()


def _searched_title(p: Parsed, title: str) -> str:
    """The title a document's chunks are searched after (searched.py): its title, but none for a JSON record (a
    meeting note, a factsheet, a transcript). A record's title is made of its own fields (fund, manager, date),
    which are filter columns and which its chunks' text already names; put before every chunk, they made a fund's
    chunks alike to both searches and cost the labelled conversations 3 to 7 facts (docs/benchmarks.md)."""
    return "" if p.filetype == RECORD_FILETYPE else title


def _given(doc: Document, chunked: Chunked, chunks: list[Chunk]) -> np.ndarray | None:
    """The vectors of the searched chunks, from the one sent with the document, or None and they are embedded
    as any other's. A conversation memory turn is found by what was asked: the question's vector stands for each
    of its chunks (the answer's words are found by keyword). Any other document's vector is taken only when it
    is the embedder's for its one chunk: the text is one searched chunk whose searched text is the document's
    text as sent (nothing redacted, split off or put before it)."""
    children = [c for c, piece in zip(chunks, chunked.pieces) if not piece.is_parent]
    if doc.vector is None:
        return None
    if doc.collection == MEMORY_COLLECTION:
        return np.tile(doc.vector, (len(children), 1))
    if len(children) != 1 or searched_text(children[0]) != doc.text:
        return None
    return doc.vector[np.newaxis]


async def _no_vectors(dimensions: int) -> np.ndarray:
    """A call's vectors when every document in it brought its own."""
    return np.zeros((0, dimensions), np.float32)


def _counted(progress: Progress) -> Progress:
    metrics.ingested(progress.stage, progress.chunks)
    return progress


class Ingestor:
    def __init__(
        self, store: CorpusStore, registry: SearchBackend, embed: EmbedFn, *,
        min_chars: int = 400, max_chars: int = 800, embed_max_chars: int = 800, batch_size: int = 64, max_bytes: int = MAX_BYTES,
        retries: int = 4, backoff_s: float = 0.5, summarizer: Summarizer | None = None,
        summaries: SummaryPolicy = SummaryPolicy(), committer: Committer | None = None,
        parsing: ParsePool | None = None, commit_rows: int = batch.ROWS, commit_bytes: int = batch.BYTES,
    ) -> None:
        """`parsing`: the worker processes files are parsed in, with their limits (default: a pool
        with the default limits, shared by every Ingestor of the process). `commit_rows` and
        `commit_bytes` bound the documents waiting for a commit."""
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
        self.commit_rows, self.commit_bytes = commit_rows, commit_bytes

    async def ingest(self, documents: AsyncIterator[Document],
                     uploader: Callable[[Document], Uploader] | None = None) -> AsyncIterator[Progress]:
        """Documents in the order they arrive, read ahead only while what is read makes one
        embedding call (`_Group`: up to the embedder's batch of texts, and never past a document
        that is not at hand yet), so a stream holds a call's worth of documents besides those
        waiting for their commit (bounded in chunks and bytes, see batch.py). A document is
        INDEXED once its commit ends; while the stream waits for its next document, the group is
        embedded and the commit under way reaped, so a client waiting for INDEXED before it sends
        more is answered. When the caller goes away (its gRPC call is cancelled) the task running
        this is cancelled at its next await: the documents in hand stop where they are (a commit
        under way completes, whole; a parse under way is killed), those not committed are not
        stored, and no more are read. `uploader` gives each document's rules (who uploads, into which
        collection: services.retriever.permissions); None is the platform, uploading for nobody."""
        uploader = uploader or self._platform
        commits: CommitBatch[Progress] = CommitBatch(self.committer, self.commit_rows, self.commit_bytes)
        group = _Group(self.embedder.batch_size)
        source = aiter(self._waiting(documents))
        following: asyncio.Future | None = None
        try:
            while True:
                following = asyncio.ensure_future(anext(source, None))
                if group.pending and not await _arrives(following):
                    async for progress in self._embed(group, commits):
                        yield _counted(progress)
                while not following.done():  # the commit under way ends, or the next document comes
                    for progress in await commits.turn():
                        yield _counted(progress)
                    if commits.writing is None:
                        await following
                        break
                    await asyncio.wait([following, commits.writing], return_when=asyncio.FIRST_COMPLETED)
                doc, following = following.result(), None
                if doc is None:
                    break
                async for progress in self._ingest_one(doc, uploader, group, commits):
                    yield _counted(progress)
                for progress in await commits.turn():
                    yield _counted(progress)
            async for progress in self._embed(group, commits):
                yield _counted(progress)
            for progress in await commits.settle():
                yield _counted(progress)
        finally:
            if following is not None:
                following.cancel()
            group.cancel()
            await commits.close()

    async def _waiting(self, documents: AsyncIterator[Document]) -> AsyncIterator[Document]:
        """The documents as they wait for their parse: a file's bytes on disk (ParsePool.waiting), so
        the documents of a tenant's streams waiting for its parse turn hold no memory."""
        async for doc in documents:
            await self.parsing.waiting(doc)
            yield doc

    def _platform(self, doc: Document) -> Uploader:
        return Uploader(Identity(doc.tenant, "", SERVICE, "service_token"),
                        permissions.rule(self.store, doc.tenant, doc.collection))

    async def _ingest_one(self, doc: Document, uploader: Callable[[Document], Uploader], group: "_Group",
                          commits: CommitBatch[Progress]) -> AsyncIterator[Progress]:
        doc = dataclasses.replace(doc, doc_id=doc.doc_id or doc.filename)
        try:
            _validate(doc)
            rules = await asyncio.to_thread(uploader, doc)
            rules.check(doc.access)
            if doc.vector is not None:  # the platform's own (the gateway's question), never a tenant's
                rules.who.require_service("vector")
                check_unit_vector("vector", doc.vector, self.registry.dimensions)
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
            async for progress in self._prepare(doc, p, label if len(parsed) == 1 else f"{label} ({p.doc_id})",
                                                rules, group, commits):
                yield progress
            if group.full:
                async for progress in self._embed(group, commits, CALLS_AHEAD):
                    yield progress

    async def _prepare(self, doc: Document, p: Parsed, label: str, rules: Uploader, group: "_Group",
                       commits: CommitBatch[Progress]) -> AsyncIterator[Progress]:
        """A record up to its chunks, which join the group to embed (or UNCHANGED, or FAILED)."""
        p.doc_id = rules.doc_id(p.doc_id)
        step = _Steps(doc, p.doc_id)
        try:
            check_text("doc_id", p.doc_id, MAX_ID_CHARS)  # a record's own id
            metadata = {**_record_metadata(p), **doc.metadata, "filetype": p.filetype}
            if doc.filename:  # a record's own filename (a factsheet's PDF) names its source better
                metadata.setdefault("filename", doc.filename)
            date, title = doc.date or p.date, doc.title or p.title[:MAX_TITLE_CHARS] or doc.filename
            digest = self._hash(p, metadata, date, title)
            if group.holds(step.key) or commits.holds(step.key):  # its previous version is not stored yet
                async for progress in self._embed(group, commits):
                    yield progress
                for progress in await commits.settle():
                    yield progress
            existing = await asyncio.to_thread(self.store.get_document, doc.tenant, doc.collection, p.doc_id)
            if existing is not None and not rules.may_replace(existing):
                raise PermissionDenied(f"doc_id {shown(p.doc_id)} is another user's document: only its uploader or "
                                       "an admin may replace it")
            readers = rules.access(doc.access, existing)
            if existing is not None and existing.content_hash == digest and not (doc.summarize and not existing.summary):
                if access.of_metadata(existing.metadata) != readers:  # same content, new readers: nothing embedded
                    await asyncio.to_thread(self._restamp, existing, readers)
                yield step("UNCHANGED", existing.chunk_count, summarized=bool(existing.summary),
                           doc_type=existing.metadata.get("doc_type", ""))
                return
            metadata[access.ACCESS_KEY] = readers.encode()  # after the hash: who reads is not content
            yield step("PARSED")
            chunked = await asyncio.to_thread(chunk_document, p, self.sizes)
            step.chunked = chunked
            yield step("CHUNKED", len(chunked.pieces))
            metadata |= {"doc_type": chunked.doc_type, "sensitivity": chunked.sensitivity}
            chunks = self._chunks(doc, p.doc_id, chunked, metadata, date, _searched_title(p, title))
            record = DocumentRecord(doc_id=p.doc_id, collection=doc.collection, tenant=doc.tenant,
                                    content_hash=digest, title=title, metadata=metadata, date=date,
                                    chunk_count=len(chunks))
            summary = None
            if self.summaries.wants(doc.summarize, len(p.text)) and self.summarizer is not None:
                summary = asyncio.create_task(self.summarizer.outline(title, chunked.sections))
            prepared = _Prepared(step, label, record, chunks, summary, _given(doc, chunked, chunks))
        except Exception as exc:  # a bug or a store failure must not end the other documents' ingest
            yield step("FAILED", error=_failed(p.doc_id, exc, label))
            return
        if not group.fits(prepared):  # the group's call goes first: it stays within one embedder slice
            async for progress in self._embed(group, commits, CALLS_AHEAD):
                yield progress
        group.add(prepared)

    async def _embed(self, group: "_Group", commits: CommitBatch[Progress], ahead: int = 0) -> AsyncIterator[Progress]:
        """Starts the group's embedding call (its children in one call, split at the embedder's batch
        size) while the generator writes their summaries, then ends the calls under way, oldest first,
        until at most `ahead` remain; each document then waits for its commit."""
        docs = group.take()
        if docs:
            texts = [searched_text(c) for d in docs if d.given is None for c in d.children]
            task = task_for(docs[0].record.collection)
            vectors = self.embedder(texts, task) if texts else _no_vectors(self.registry.dimensions)
            group.calls.append(_Call(docs, asyncio.ensure_future(vectors)))
        while len(group.calls) > ahead:
            async for progress in self._embedded(group.calls.popleft(), commits):
                yield progress

    async def _embedded(self, call: _Call, commits: CommitBatch[Progress]) -> AsyncIterator[Progress]:
        """A call's documents once it ends, to their commit. An embedding failure fails the documents
        (each alone, unless it is a passing one: the others of a call one text spoiled are embedded
        again), a generator failure only loses the summaries."""
        docs = call.docs
        try:
            vectors = await call.vectors
        except Exception as exc:
            if len(docs) > 1 and not isinstance(exc, TRANSIENT):
                for d in docs:
                    async for progress in self._embed(_Group.of(d), commits):
                        yield progress
                return
            for d in docs:
                d.cancel()
                yield d.step("FAILED", error=_failed(d.record.doc_id, exc, d.label))
            return
        except BaseException:
            call.cancel()
            raise
        start = 0
        for d in docs:
            if d.given is not None:
                mine = d.given
            else:
                mine = vectors[start:start + len(d.children)]
                start += len(d.children)
            if d.summary is None:
                summary, sections = "", table_of_contents(d.step.chunked.sections)
            else:
                summary, sections = await d.summary
            record = dataclasses.replace(d.record, summary=summary, sections=sections)
            yield d.step("EMBEDDED", len(d.chunks))
            children = iter(mine)
            stored = [StoredChunk(c, None if piece.is_parent else next(children))
                      for c, piece in zip(d.chunks, d.step.chunked.pieces)]
            commits.add(Ready(record, stored, d.step("INDEXED", len(d.chunks), summarized=bool(summary)),
                              partial(_failure_step, d)))

    def _hash(self, p: Parsed, metadata: dict[str, str], date: str, title: str) -> str:
        """What the chunks are built from: same hash, nothing to redo."""
        payload = json.dumps([
            PIPELINE_VERSION, dataclasses.asdict(self.sizes), [dataclasses.asdict(s) for s in p.sections],
            p.source, metadata, date, title,
        ], sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def _chunks(self, doc: Document, doc_id: str, chunked: Chunked, metadata: dict[str, str], date: str,
                title: str) -> list[Chunk]:
        """Every chunk carries the document's metadata and the title it is searched after (a title the client
        sent in the metadata wins) and its own section (chapter and paragraph in a document with chapters),
        pages, flags and index."""
        titled = {TITLE_KEY: title} if title else {}
        out = []
        for i, piece in enumerate(chunked.pieces):
            meta = {
                **titled, **metadata, **piece.meta, "section": piece.section, **piece.place,
                "page": str(piece.page) if piece.page else "", "page_end": str(piece.page_end) if piece.page_end else "",
                "redacted": str(is_redacted(piece.text)).lower(), "chunk_index": str(i),
            }
            parent = chunk_id(doc.tenant, doc.collection, doc_id, piece.parent) if piece.parent is not None else ""
            out.append(Chunk(
                chunk_id=chunk_id(doc.tenant, doc.collection, doc_id, i), doc_id=doc_id, collection=doc.collection,
                text=piece.text, metadata=meta, date=date, tenant=doc.tenant, parent_chunk_id=parent, chunk_index=i,
            ))
        return out

    def _restamp(self, record: DocumentRecord, readers: Access) -> None:
        chunks = self.store.document_chunks(record.tenant, record.collection, record.doc_id)
        self.committer.replace([permissions.restamped(record, chunks, readers)])

    async def set_access(self, who: Identity, collection: str, doc_id: str, new: Access) -> DocumentRecord:
        """Replaces who may read a document (its uploader or an admin); the next search on every replica
        sees it (the store's change log carries it). Its chunks keep their vectors: nothing is embedded."""
        check_name("collection", collection)
        check_text("doc_id", doc_id, MAX_ID_CHARS, required=True)
        tenant = who.require_tenant()
        record = await asyncio.to_thread(self.store.get_document, tenant, collection, doc_id)
        current = permissions.require_manager(who, record, doc_id, collection)
        permissions.checked_change(who, current, new)
        assert record is not None  # require_manager raised otherwise
        readers = new.with_owner(new.owner or current.owner)
        if readers != current:
            await asyncio.to_thread(self._restamp, record, readers)
        return dataclasses.replace(record, metadata={**record.metadata, access.ACCESS_KEY: readers.encode()})

    async def delete(
        self, tenant: str, collection: str, doc_ids: list[str], where: SearchFilter | None = None,
        who: Identity | None = None,
    ) -> tuple[int, int]:
        """Deletes the named documents, or those with a chunk the filter admits; returns
        (documents, chunks) removed. With `who`, only what it manages: a named document it may not
        read is skipped as an unknown one, one it reads but does not own is PermissionDenied, and
        deleting by filter takes an admin."""
        check_name("collection", collection)
        doc_ids = check_list("doc_ids", doc_ids, MAX_DOC_IDS, MAX_ID_CHARS)
        if "" in doc_ids:
            raise InvalidArgument(f"doc_ids[{doc_ids.index('')}]", "must not be empty")
        if who is not None and where is not None and not access.privileged(who):
            if collection != MEMORY_COLLECTION:
                raise PermissionDenied("deleting by filter needs an admin key")
            where = dataclasses.replace(where, equals={**where.equals, MEMORY_AUTHOR: who.user})  # its author's own
        if who is not None and doc_ids:
            doc_ids = await asyncio.to_thread(self._managed, who, tenant, collection, doc_ids)
        if where is not None:
            if doc_ids:
                raise InvalidArgument("filter", "give doc_ids or a filter, not both")
            if not (where.any_of or where.equals or where.start_date or where.end_date):
                raise InvalidArgument("filter", "needs at least one condition (to delete by id, give doc_ids)")
            filters.validate(where)
            doc_ids = await asyncio.to_thread(self.registry.matching_doc_ids, collection,
                                              dataclasses.replace(where, tenant=tenant))
        return await asyncio.to_thread(self.committer.delete, tenant, collection, doc_ids)

    def _managed(self, who: Identity, tenant: str, collection: str, doc_ids: list[str]) -> list[str]:
        managed = []
        for doc_id in doc_ids:
            record = self.store.get_document(tenant, collection, doc_id)
            if collection == MEMORY_COLLECTION:  # personal: its author's (the platform writes it for them)
                if record is not None and personal.readable(collection, record.metadata, personal.reader(who)):
                    managed.append(doc_id)
                continue
            try:
                permissions.require_manager(who, record, doc_id, collection)
            except NotFound:
                continue  # unknown, or not the caller's to see: deleting it removes nothing
            managed.append(doc_id)
        return managed

