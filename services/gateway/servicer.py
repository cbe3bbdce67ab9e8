"""Gateway gRPC servicer: AskRequest to AskInput, pipeline events to ChatEvents. The caller's
identity comes from the server interceptor (ragmesh.identity.current). Requests are checked by the
declarations the HTTP bridge parses with: an Ask by AskRequest (ask_from_proto), a correction
and a transcript by their models, a conversation id by the rule of the HTTP path parameter, who may
read a document and a collection's rules by the access models (document_request.py)."""
from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import asdict

import grpc
from google.protobuf import json_format

from ragmesh import convert, identity
from ragmesh.clients import RetrieverClient
from ragmesh.errors import InvalidArgument
from ragmesh.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, retriever_pb2
from ragmesh.models import WEB_SEARCH_MODELS
from ragmesh.paging import DEFAULT_PAGE
from ragmesh.store import CorrectionRecord, MessageRecord
from ragmesh.types import Citation
from ragmesh.validation import check_writable
from services.gateway.conversations import Conversations
from services.gateway.correction_request import CorrectionBody
from services.gateway.document_request import AccessChange, AccessRequest, CollectionAccessRequest
from services.gateway.events import Event
from services.gateway.library import CollectionRules, Library
from services.gateway.memory import Memory
from services.gateway.meta import describe
from services.gateway.notes_contract import notes_answer
from services.gateway.pipeline import AskPipeline
from services.gateway.request import AskInput, AskRequest, checked_conversation_id
from services.gateway.strategy import Strategy, strategy_json
from services.gateway.transcript_request import TranscriptBody
from services.gateway.transcripts import Transcripts
from services.gateway.upload_memory import FilePiece, Uploads, spooled_pieces
from services.gateway.whole_answer import whole_answer


# The Ask fields gateway.proto's AskRequest leaves out, and why; every other field is copied from the message
# by name (tests/integration/test_declared_once.py holds the proto and the declaration to this).
ASK_LEFT_OUT = {"format": "the notes contract is a method of its own, AskNotes"}


def ask_from_proto(r: gateway_pb2.AskRequest, response_format: str = "") -> AskInput:
    """The request checked by the declaration the HTTP body is parsed with, as a domain input: the message's
    fields as its JSON has them (an unset `optional` field left out, so the declaration's default applies;
    a field the declaration lacks is refused naming it)."""
    sent = json_format.MessageToDict(r, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    return AskRequest.checked({**sent, "format": response_format}).to_input()


def event_to_proto(event: Event) -> gateway_pb2.ChatEvent:
    kind, value = event.kind, event.value
    if kind == "strategy":
        return gateway_pb2.ChatEvent(strategy=strategy_to_proto(value))
    if kind == "citations":
        return gateway_pb2.ChatEvent(citations=gateway_pb2.Citations(
            items=[convert.citation_to_proto(c) for c in value.citations], web_queries=value.web_queries))
    if kind == "done":
        usage = common_pb2.Usage(**value.usage)
        return gateway_pb2.ChatEvent(done=gateway_pb2.ChatDone(**{**asdict(value), "usage": usage}))
    if kind == "error":
        return gateway_pb2.ChatEvent(error=gateway_pb2.ErrorInfo(**value))
    return gateway_pb2.ChatEvent(**{kind: value})


def strategy_to_proto(s: Strategy) -> gateway_pb2.Strategy:
    """The strategy event's message, built from its JSON (both derive from the one Strategy definition);
    a field the message lacks fails here (ValueError), not silently."""
    return gateway_pb2.Strategy(**_proto_fields(strategy_json(s)))


def strategy_from_json(stored: dict) -> gateway_pb2.Strategy:
    """A stored answer's strategy (its JSON, kept in the answer's meta) as the strategy event had it;
    fields a newer gateway added and this one does not know are skipped."""
    return json_format.ParseDict(_proto_fields(stored), gateway_pb2.Strategy(), ignore_unknown_fields=True)


def _proto_fields(strategy: dict) -> dict:
    """A strategy's JSON with its filter as the Filter message has it (`in`: field -> StringList)."""
    f = strategy.get("filter") or {}
    return {**strategy, "filter": {"tenant": f.get("tenant", ""), "start_date": f.get("start_date", ""),
                                   "end_date": f.get("end_date", ""),
                                   "in": {k: {"values": v} for k, v in (f.get("in") or {}).items()}}}


def access_fields(p: common_pb2.Access) -> dict:
    """An Access message as the access models read it (an owner only when one is named: an upload and a
    collection's default may not name one)."""
    fields = {"users": list(p.users), "groups": list(p.groups), "tenant": p.tenant}
    return fields | {"owner": p.owner} if p.owner else fields


def message_to_proto(m: MessageRecord) -> gateway_pb2.Message:
    """A stored message with what an answer needs to be shown again: its citations, the chunk map that
    resolves their #chk_ refs, its strategy and its web searches."""
    meta = m.meta or {}
    fields = {f.name for f in dataclasses.fields(Citation)}
    return gateway_pb2.Message(
        message_id=m.message_id, role=m.role, content=m.content, created_at=m.created_at,
        meta={k: str(meta[k]) for k in ("model", "route", "retrieval", "failed") if meta.get(k)},
        citations=[convert.citation_to_proto(Citation(**{k: v for k, v in c.items() if k in fields}))
                   for c in meta.get("citations", [])],
        strategy=strategy_from_json(meta["strategy"]) if meta.get("strategy") else None,
        chunk_map=meta.get("chunk_map", {}), web_queries=meta.get("web_queries", []),
    )


class GatewayServicer(gateway_pb2_grpc.GatewayServicer):
    def __init__(self, pipeline: AskPipeline, conversations: Conversations, retriever: RetrieverClient,
                 memory: Memory, transcripts: Transcripts, library: Library, uploads: Uploads) -> None:
        self.uploads = uploads
        self.pipeline = pipeline
        self.library = library
        self.transcripts = transcripts
        self.conversations = conversations
        self.retriever = retriever
        self.memory = memory

    async def Ask(self, request: gateway_pb2.AskRequest, context: grpc.aio.ServicerContext):
        prepared = await self.pipeline.prepare(ask_from_proto(request), identity.current())
        async for event in self.pipeline.run(prepared):
            yield event_to_proto(event)

    async def Stop(self, request: gateway_pb2.StopRequest, context: grpc.aio.ServicerContext):
        stopped = await self.conversations.stop(identity.current(), checked_conversation_id(request.conversation_id))
        return gateway_pb2.StopResponse(stopped=stopped)

    async def ListConversations(self, request: gateway_pb2.ListConversationsRequest, context):
        found = await self.conversations.list(identity.current(), request.limit if request.HasField("limit") else None,
                                              request.offset)
        return gateway_pb2.ListConversationsResponse(conversations=[
            gateway_pb2.ConversationSummary(conversation_id=c.conversation_id, user_id=c.user_id, title=c.title,
                                            created_at=c.created_at, updated_at=c.updated_at) for c in found.items],
            next_offset=found.next_offset)

    async def RenameConversation(self, request: gateway_pb2.RenameConversationRequest, context):
        title = await self.conversations.rename(identity.current(), checked_conversation_id(request.conversation_id),
                                                request.title)
        return gateway_pb2.RenameConversationResponse(conversation_id=request.conversation_id, title=title)

    async def GetConversation(self, request: gateway_pb2.GetConversationRequest, context):
        conversation_id = checked_conversation_id(request.conversation_id)
        messages = await self.conversations.messages(identity.current(), conversation_id)
        return gateway_pb2.Conversation(conversation_id=request.conversation_id,
                                        messages=[message_to_proto(m) for m in messages])

    async def DeleteConversation(self, request: gateway_pb2.DeleteConversationRequest, context):
        who = identity.current().acting_for(request.tenant, "")
        await self.conversations.delete(who, checked_conversation_id(request.conversation_id))  # NotFound: not yours
        return gateway_pb2.DeleteConversationResponse(deleted=True)

    async def Ingest(
        self, request_iterator: AsyncIterator[retriever_pb2.Document], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[retriever_pb2.IngestProgress]:
        who = identity.current()  # the retriever decides where it may upload, into its own tenant
        await self.pipeline.rate.check(who.tenant, who.user)  # an upload counts with the user's asks
        async for progress in self.retriever.ingest(_writable(request_iterator, self.uploads, who.tenant)):
            yield progress

    async def Correct(self, request: gateway_pb2.CorrectionRequest, context: grpc.aio.ServicerContext):
        sent = CorrectionBody.checked(json_format.MessageToDict(request, preserving_proto_field_name=True))
        author = identity.current().acting_for(sent.tenant, sent.user_id)
        record = CorrectionRecord("", author.tenant, author.user, sent.question, sent.wrong_answer, sent.correction,
                                  sent.conversation_id)
        correction_id = await asyncio.to_thread(self.memory.record_correction, author, record, sent.message_id)
        return gateway_pb2.CorrectionResponse(correction_id=correction_id)

    async def ListModels(self, request: gateway_pb2.ListModelsRequest, context: grpc.aio.ServicerContext):
        models = await self.pipeline.models.configured()
        return gateway_pb2.ListModelsResponse(models=models, default_model=self.pipeline.default_model,
                                              web_search_models=[m for m in models if m in WEB_SEARCH_MODELS])

    async def IngestTranscript(self, request: gateway_pb2.TranscriptRequest, context: grpc.aio.ServicerContext):
        sent = TranscriptBody.checked(json_format.MessageToDict(request, preserving_proto_field_name=True))
        done = await self.transcripts.ingest(identity.current(), sent.to_input())
        return gateway_pb2.TranscriptResponse(
            doc_id=done.doc_id, collection=done.collection, chunks=done.chunks, tags=done.tags,
            tagged_by=done.tagged_by, note=done.note, stage=done.stage)

    async def ListDocuments(self, request: retriever_pb2.ListDocumentsRequest, context):
        found = await self.library.documents(identity.current(), request.collection, request.limit or DEFAULT_PAGE,
                                             request.offset)
        return retriever_pb2.ListDocumentsResponse(
            documents=[convert.document_entry_to_proto(e) for e in found.items], next_offset=found.next_offset)

    async def GetDocument(self, request: retriever_pb2.GetDocumentRequest, context):
        return convert.document_info_to_proto(
            await self.library.document(identity.current(), request.collection, request.doc_id))

    async def DeleteDocument(self, request: gateway_pb2.DeleteDocumentRequest, context):
        documents, chunks = await self.library.delete_document(identity.current(), request.collection, request.doc_id)
        return retriever_pb2.DeleteResponse(documents=documents, chunks=chunks)

    async def SetDocumentAccess(self, request: retriever_pb2.SetDocumentAccessRequest, context):
        change = AccessChange.checked_at("access", access_fields(request.access))
        return convert.document_info_to_proto(await self.library.set_document_access(
            identity.current(), request.collection, request.doc_id, change.to_access()))

    async def SetCollectionAccess(self, request: retriever_pb2.CollectionAccess, context):
        sent = CollectionAccessRequest.checked({"members_upload": request.members_upload,
                                                "default_access": access_fields(request.default_access)})
        done = await self.library.set_collection_access(identity.current(), CollectionRules(
            request.collection, sent.members_upload, sent.default_access.to_access()))
        return retriever_pb2.CollectionAccess(collection=done.collection, members_upload=done.members_upload,
                                              default_access=convert.access_to_proto(done.default_access))

    async def GetChunk(self, request: retriever_pb2.GetChunkRequest, context):
        return convert.chunk_context_to_proto(await self.library.chunk(identity.current(), request.chunk_id))

    async def ListCollections(self, request: retriever_pb2.ListCollectionsRequest, context):
        lines = await self.library.collections(identity.current())
        return retriever_pb2.ListCollectionsResponse(collections=[
            retriever_pb2.CollectionInfo(name=c.name, documents=c.documents, chunks=c.chunks, data_source=c.data_source,
                                         members_upload=c.members_upload,
                                         default_access=convert.access_to_proto(c.default_access))
            for c in lines])

    async def ListFunds(self, request: gateway_pb2.ListFundsRequest, context):
        return gateway_pb2.ListFundsResponse(funds=await self.library.funds(identity.current()))

    async def GetMeta(self, request: gateway_pb2.GetMetaRequest, context):
        who = identity.current()
        m = await describe(who, self.pipeline.models.configured, self.pipeline.default_model, self.library)
        return gateway_pb2.Meta(models=m.models, default_model=m.default_model, web_search_models=m.web_search_models,
                                data_sources=m.data_sources, funds=m.funds,
                                identity=gateway_pb2.Caller(tenant=who.tenant, user=who.user, role=who.role,
                                                            groups=who.groups))

    async def AskNotes(self, request: gateway_pb2.AskRequest, context):
        ask = ask_from_proto(request, "notes")
        n = notes_answer(await whole_answer(self.pipeline, await self.pipeline.prepare(ask, identity.current())))
        r = n.retrieval
        return gateway_pb2.NotesAnswer(
            answer=n.answer, conversation_id=n.conversation_id, model=n.model,
            citations=[gateway_pb2.NoteCitation(**asdict(c)) for c in n.citations],
            retrieval=gateway_pb2.NotesRetrieval(k=r.k, strategy=r.strategy, candidate_count=r.candidate_count,
                                                 rerank_count=r.rerank_count, time_ms=r.time_ms))


async def _writable(documents: AsyncIterator[retriever_pb2.Document], uploads: Uploads, tenant: str
                    ) -> AsyncIterator[retriever_pb2.Document | FilePiece]:
    """The client's documents, refusing (and so ending the stream at) one for a collection it may not write
    or whose access the upload's declaration refuses (the retriever decides who may share how). Each is
    read within its tenant's share of receiving (RESOURCE_EXHAUSTED past it: services/gateway/upload_memory),
    spooled as it arrives and read back piece by piece as it is sent, within its tenant's share of memory."""
    while True:
        receiving = uploads.receiving.take_now(tenant, uploads.message_bytes)
        try:
            doc = await anext(documents, None)
            if doc is None:
                return
            check_writable("collection", doc.collection)
            if doc.HasField("access"):
                AccessRequest.checked_at("access", access_fields(doc.access))
            if doc.vector:  # the retriever keeps a vector the platform sends: a client's would be searched as real
                raise InvalidArgument("vector", "is the platform's own field; send the text and it is embedded")
            if doc.more_content:  # what this hop makes of a file: its client sends it whole
                raise InvalidArgument("more_content", "send each file whole in one message (up to the method's "
                                                      "message limit); the gateway sends it on in pieces")
            sent = await spooled_pieces(doc, uploads.spool, uploads.memory, tenant) if doc.content else [doc]
            del doc  # a file is on disk now
        finally:
            uploads.receiving.give(tenant, receiving)
        for message in sent:
            yield message
