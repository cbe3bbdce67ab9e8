"""Retriever gRPC servicer: protobuf to domain objects and back, nothing more."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import numpy as np

import dataclasses

from ragmesh import convert, identity
from ragmesh.errors import InvalidArgument, NotFound
from ragmesh.paging import DEFAULT_PAGE, page
from ragmesh.store import CollectionStats, DocumentStore
from ragmesh.types import ChunkContext, Document
from ragmesh.validation import (MAX_CHUNK_ID_CHARS, MAX_ID_CHARS, RESERVED_PREFIX, check_field_name, check_name,
                                check_names, check_page, check_text, shown)
from ragmesh.v1 import retriever_pb2, retriever_pb2_grpc
from services.retriever import permissions, personal, reply_metadata
from services.retriever.fusion import DEFAULT_RRF_K, Boosters
from services.retriever.ingest.pipeline import Ingestor
from services.retriever.ingest.upsert import Upserter
from services.retriever.search import SearchEngine, SearchQuery


def _opt(msg, name: str, default):
    return getattr(msg, name) if msg.HasField(name) else default


def _tenant() -> str:
    """The caller's tenant: from its key, or from the gateway's service call on a user's behalf.
    Tenant fields in requests are ignored (kept in the contract for old clients)."""
    return identity.current().require_tenant()


def _reader() -> str:
    """Whose conversation memory the caller may read (see services.retriever.personal)."""
    return personal.reader(identity.current())


def _readable(collection: str, metadata: dict[str, str]) -> bool:
    return permissions.visible(identity.current(), collection, metadata)


MAX_CHECKED_CHUNKS = 1_000  # chunks of one CheckChunks call (a scope cache holds at most top_k 50 a collection)


PIECE_FIELDS = frozenset({"content", "more_content"})


async def _pieces(messages: AsyncIterator[retriever_pb2.Document]) -> AsyncIterator[bytes]:
    """The content of the messages carrying the rest of a file sent in pieces, up to its last piece."""
    while True:
        piece = await anext(messages, None)
        if piece is None:
            raise InvalidArgument("more_content", "the stream ended before the last piece of a file sent in pieces")
        for field, _ in piece.ListFields():
            if field.name not in PIECE_FIELDS:
                raise InvalidArgument(field.name, "is set on a file's next piece: a piece after the first carries "
                                                  "only content and more_content")
        yield piece.content
        if not piece.more_content:
            return


class RetrieverServicer(retriever_pb2_grpc.RetrieverServicer):
    def __init__(self, engine: SearchEngine, ingestor: Ingestor, upserter: Upserter, store: DocumentStore,
                 configure) -> None:
        self.configure = configure
        self.engine = engine
        self.ingestor = ingestor
        self.upserter = upserter
        self.store = store

    async def Search(self, request: retriever_pb2.SearchRequest, context: grpc.aio.ServicerContext):
        b = request.boosters
        if request.fusion not in retriever_pb2.Fusion.values():  # an open enum keeps unknown numbers
            raise InvalidArgument("fusion", f"must be FUSION_RRF (0) or FUSION_LINEAR (1), got {request.fusion}")
        query = SearchQuery(
            query=request.query,
            collections=list(request.collections),
            filter=dataclasses.replace(convert.filter_from_proto(request.filter), tenant=_tenant(),
                                       readers=permissions.readers(identity.current())),
            top_k=_opt(request, "top_k", 50),
            dense_weight=_opt(request, "dense_weight", None),
            sparse_weight=_opt(request, "sparse_weight", None),
            recency_weight=_opt(request, "recency_weight", None),
            rrf_k=_opt(request, "rrf_k", DEFAULT_RRF_K),
            vector=np.asarray(request.query_vector, np.float32) if request.query_vector else None,
            variants=list(request.variants),
            fusion=retriever_pb2.Fusion.Name(request.fusion).removeprefix("FUSION_"),
            boosters=Boosters(
                time_window=b.time_window, half_life_days=b.half_life_days, decay_floor=_opt(b, "decay_floor", 0.3),
                recent_boost=b.recent_boost, recent_days=b.recent_days or 7, conversation_id=b.conversation_id,
                same_conversation_boost=b.same_conversation_boost, tag_boost=b.tag_boost,
                prefer_authoritative=b.prefer_authoritative, min_similarity=b.min_similarity,
                fallback_similarity=b.fallback_similarity, expand_parents=b.expand_parents, now=b.now,
            ),
            reader=_reader(),
        )
        outcome = await self.engine.search(query)
        return retriever_pb2.SearchResponse(
            hits=[convert.hit_to_proto(h) for h in reply_metadata.bounded(outcome.hits)],
            timings=retriever_pb2.Timings(**outcome.timings),
            candidate_count=outcome.candidate_count,
            dense_skipped=outcome.dense_skipped,
            threshold_layer=outcome.threshold_layer,
        )

    async def Ingest(
        self, request_iterator: AsyncIterator[retriever_pb2.Document], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[retriever_pb2.IngestProgress]:
        tenant, who = _tenant(), identity.current()

        uploaders: dict[str, permissions.Uploader] = {}  # per collection: the stream's documents ask once

        def uploader(doc) -> permissions.Uploader:
            if doc.collection not in uploaders:
                uploaders[doc.collection] = permissions.Uploader(who, permissions.rule(self.store, tenant,
                                                                                        doc.collection))
            return uploaders[doc.collection]

        async def received(doc: retriever_pb2.Document | None) -> Document | None:
            if doc is None:
                return None
            personal.require_writer(who, doc.collection)
            doc.tenant = tenant
            document = convert.document_from_proto(doc)
            # the caller may not upload here at all: the call is refused (PERMISSION_DENIED), as for memory
            (await asyncio.to_thread(uploader, document)).check(document.access)
            if doc.more_content:  # the rest of the file follows, piece by piece
                await self.ingestor.parsing.received(document, _pieces(request_iterator), self.ingestor.max_bytes)
            return document

        async def documents():
            # No reference to the message is kept here: it is gone once converted, and the ingest spools
            # the document's own bytes while it waits for its parse.
            while (document := await received(await anext(request_iterator, None))) is not None:
                yield document

        async for p in self.ingestor.ingest(documents(), uploader):
            yield retriever_pb2.IngestProgress(
                doc_id=p.doc_id, collection=p.collection,
                stage=retriever_pb2.IngestStage.Value(p.stage), chunks=p.chunks, error=p.error,
                filename=p.filename, doc_type=p.doc_type, redactions=p.redactions,
                sensitivity=p.sensitivity, summarized=p.summarized,
            )

    async def Upsert(
        self, request_iterator: AsyncIterator[retriever_pb2.UpsertRequest], context: grpc.aio.ServicerContext
    ) -> retriever_pb2.UpsertResponse:
        tenant, who = _tenant(), identity.current()
        permissions.require_bulk_writer(who)

        async def chunks():
            async for r in request_iterator:
                personal.require_writer(who, r.chunk.collection)
                r.chunk.tenant = tenant
                yield convert.chunk_from_proto(r.chunk), np.asarray(r.vector, np.float32) if r.vector else None

        s = await self.upserter.upsert(chunks())
        return retriever_pb2.UpsertResponse(documents=s.documents, chunks=s.chunks, rejected=s.rejected,
                                            errors=s.errors)

    async def Delete(self, request: retriever_pb2.DeleteRequest, context: grpc.aio.ServicerContext):
        where = convert.filter_from_proto(request.filter) if request.HasField("filter") else None
        who = identity.current()
        personal.require_writer(who, request.collection)
        docs, chunks = await self.ingestor.delete(_tenant(), request.collection, list(request.doc_ids), where, who)
        return retriever_pb2.DeleteResponse(documents=docs, chunks=chunks)

    async def GetDocument(self, request: retriever_pb2.GetDocumentRequest, context: grpc.aio.ServicerContext):
        check_name("collection", request.collection)
        check_text("doc_id", request.doc_id, MAX_ID_CHARS, required=True)
        record = await asyncio.to_thread(self.store.get_document, _tenant(), request.collection, request.doc_id)
        if record is None or not _readable(record.collection, record.metadata):
            raise NotFound(f"document {shown(request.doc_id)} not found in collection {request.collection!r}")
        return convert.document_info_to_proto(record)

    async def ListDocuments(self, request: retriever_pb2.ListDocumentsRequest, context: grpc.aio.ServicerContext):
        if request.collection:
            check_name("collection", request.collection)
        limit = request.limit or DEFAULT_PAGE
        check_page(limit, request.offset)
        entries = await asyncio.to_thread(self.store.documents, _tenant(), request.collection or None, limit,
                                          request.offset, author=_reader(),
                                          readers=permissions.lister(identity.current()))
        found = page(entries, limit, request.offset)
        return retriever_pb2.ListDocumentsResponse(documents=[convert.document_entry_to_proto(e) for e in found.items],
                                                   next_offset=found.next_offset)

    async def GetChunk(self, request: retriever_pb2.GetChunkRequest, context: grpc.aio.ServicerContext):
        check_text("chunk_id", request.chunk_id, MAX_CHUNK_ID_CHARS, required=True)
        tenant = _tenant()
        found = await asyncio.to_thread(self.store.chunk, tenant, request.chunk_id)
        # another tenant's, or another user's conversation memory, answers exactly as an unknown id
        if found is None or not _readable(found.chunk.collection, found.chunk.metadata):
            raise NotFound(f"chunk {shown(request.chunk_id)} not found")
        chunk = found.chunk
        parent = await asyncio.to_thread(self.store.chunk, tenant, chunk.parent_chunk_id) \
            if chunk.parent_chunk_id else None
        if parent is not None and (parent.chunk.collection, parent.chunk.doc_id) != (chunk.collection, chunk.doc_id):
            parent = None  # a parent is a chunk of the child's own document, whatever a stored chunk names
        document = await asyncio.to_thread(self.store.get_document, tenant, chunk.collection, chunk.doc_id)
        return convert.chunk_context_to_proto(ChunkContext(chunk, parent.chunk.text if parent else "", document))

    def _collections(self, all_configured: bool = False, tenant: str | None = None,
                     readers: frozenset[str] | None = None) -> list[retriever_pb2.CollectionInfo]:
        """Counts of one tenant's partitions (what `readers` may read), or (None, the service credential
        only) of every tenant's."""
        infos = []
        stats = self.store.collections(tenant, readers)
        if all_configured:  # a configured collection may hold no documents yet
            named = {c.name for c in stats}
            stats += [CollectionStats(n, 0, 0) for n in self.engine.registry.configured() if n not in named]
        for c in stats:
            infos.append(retriever_pb2.CollectionInfo(
                name=c.name, documents=c.documents, chunks=c.chunks,
                indexed_chunks=self.engine.registry.indexed(c.name, tenant, readers),
                dense_index=self.engine.registry.options(c.name).dense,
            ))
        return infos

    async def ListCollections(self, request: retriever_pb2.ListCollectionsRequest, context: grpc.aio.ServicerContext):
        if request.own_tenant:
            who = identity.current()
            infos = await asyncio.to_thread(self._collections, tenant=_tenant(), readers=permissions.lister(who))
            rules = await asyncio.to_thread(permissions.rules, self.store, _tenant())
            for info in infos:
                rule = rules.get(info.name) or permissions.built_in(info.name)
                info.members_upload = rule.members_upload
                info.default_access.CopyFrom(convert.access_to_proto(rule.default_access))
            return retriever_pb2.ListCollectionsResponse(collections=infos)
        identity.current().require_service("ListCollections (counts across tenants)")
        return retriever_pb2.ListCollectionsResponse(collections=self._collections())

    async def Stats(self, request, context: grpc.aio.ServicerContext):
        identity.current().require_service("Stats (counts across tenants)")
        return retriever_pb2.StatsResponse(
            collections=self._collections(), store=repr(self.store),
            dimensions=self.engine.registry.dimensions, searches=self.engine.searches,
        )

    async def FieldValues(self, request: retriever_pb2.FieldValuesRequest, context: grpc.aio.ServicerContext):
        check_field_name("field", request.field)
        if request.field.startswith(RESERVED_PREFIX):  # the engine's own columns: tenants, documents, access
            raise InvalidArgument("field", f"fields starting with {RESERVED_PREFIX!r} are reserved")
        collections = personal.listable(check_names("collections", list(request.collections))
                                        or self.engine.registry.names())
        values = await asyncio.to_thread(self.engine.registry.field_values, request.field, collections, _tenant(),
                                         permissions.readers(identity.current())) if collections else []
        return retriever_pb2.FieldValuesResponse(values=values)

    async def SetDocumentAccess(self, request: retriever_pb2.SetDocumentAccessRequest, context):
        who = identity.current()
        personal.require_writer(who, request.collection)
        record = await self.ingestor.set_access(who, request.collection, request.doc_id,
                                                convert.access_from_proto(request.access))
        return convert.document_info_to_proto(record)

    async def CheckChunks(self, request: retriever_pb2.CheckChunksRequest, context):
        if len(request.chunks) > MAX_CHECKED_CHUNKS:
            raise InvalidArgument("chunks", f"has {len(request.chunks):,} chunks; the limit is {MAX_CHECKED_CHUNKS:,}")
        refs = [(r.chunk_id, r.text_sha256) for r in request.chunks]
        for i, (chunk_id, _) in enumerate(refs):
            check_text(f"chunks[{i}].chunk_id", chunk_id, MAX_CHUNK_ID_CHARS, required=True)
        current = await asyncio.to_thread(permissions.current, self.store, identity.current(), refs)
        return retriever_pb2.CheckChunksResponse(current=current)

    async def SetCollectionAccess(self, request: retriever_pb2.CollectionAccess, context):
        check_name("collection", request.collection)
        rule = permissions.CollectionRule(request.collection, request.members_upload,
                                          convert.access_from_proto(request.default_access, "default_access"))
        await asyncio.to_thread(permissions.set_rule, self.store, identity.current(), rule)
        return request

    async def ConfigureCollection(self, request: retriever_pb2.ConfigureCollectionRequest, context):
        identity.current().require_service("ConfigureCollection (collections are shared by every tenant)")
        analyzer = {name: getattr(request, name) for name in ("stemming", "stopwords", "min_token_len")
                    if request.HasField(name)}
        await self.configure(request.name, request.dense_index or "flat", analyzer)
        return next(c for c in self._collections(all_configured=True) if c.name == request.name)
