"""Gateway gRPC servicer: AskRequest to AskInput, pipeline events to ChatEvents."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from ragmesh import convert
from ragmesh.clients import RetrieverClient
from ragmesh.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, retriever_pb2
from ragmesh.store import CorrectionRecord
from services.gateway.history import History
from services.gateway.memory import Memory
from services.gateway.pipeline import AskPipeline, Event
from services.gateway.request import AskInput


def ask_from_proto(r: gateway_pb2.AskRequest) -> AskInput:
    return AskInput(
        question=r.question, data_sources=list(r.data_sources), start_date=r.start_date,
        end_date=r.end_date, selected_funds=list(r.selected_funds), conversation_id=r.conversation_id,
        model=r.model, tenant=r.tenant, user_id=r.user_id,
        top_k=r.top_k if r.HasField("top_k") else None, document_ids=list(r.document_ids),
    )


def event_to_proto(event: Event) -> gateway_pb2.ChatEvent:
    kind, value = event.kind, event.value
    if kind == "strategy":
        return gateway_pb2.ChatEvent(strategy=gateway_pb2.Strategy(
            route=value.route, retrieval=value.retrieval, reason=value.reason, cache_hit=value.cache_hit,
            collections=value.collections, filter=convert.filter_to_proto(value.filter), k=value.k,
            candidate_count=value.candidate_count, retrieval_ms=value.retrieval_ms,
            conversation_id=value.conversation_id, cache_key=value.cache_key, chunks=value.chunks,
            dense_skipped=value.dense_skipped, unavailable=value.unavailable,
            threshold_layer=value.threshold_layer, time_hint=value.time_hint,
            detected_funds=value.detected_funds, context_chars=value.context_chars,
            corrections=value.corrections, model=value.model,
        ))
    if kind == "citations":
        return gateway_pb2.ChatEvent(citations=gateway_pb2.Citations(
            items=[convert.citation_to_proto(c) for c in value.citations], web_queries=value.web_queries))
    if kind == "done":
        usage = common_pb2.Usage(**value.get("usage", {}))
        return gateway_pb2.ChatEvent(done=gateway_pb2.ChatDone(**{**value, "usage": usage}))
    if kind == "error":
        return gateway_pb2.ChatEvent(error=gateway_pb2.ErrorInfo(**value))
    return gateway_pb2.ChatEvent(**{kind: value})


class GatewayServicer(gateway_pb2_grpc.GatewayServicer):
    def __init__(self, pipeline: AskPipeline, history: History, retriever: RetrieverClient, memory: Memory) -> None:
        self.pipeline = pipeline
        self.history = history
        self.retriever = retriever
        self.memory = memory

    async def Ask(self, request: gateway_pb2.AskRequest, context: grpc.aio.ServicerContext):
        ask = self.pipeline.prepare(ask_from_proto(request))
        async for event in self.pipeline.run(ask):
            yield event_to_proto(event)

    async def Stop(self, request: gateway_pb2.StopRequest, context: grpc.aio.ServicerContext):
        return gateway_pb2.StopResponse(stopped=self.pipeline.stop(request.conversation_id))

    async def GetConversation(self, request: gateway_pb2.GetConversationRequest, context):
        messages = await asyncio.to_thread(self.history.messages, request.conversation_id)
        return gateway_pb2.Conversation(
            conversation_id=request.conversation_id,
            messages=[
                gateway_pb2.Message(
                    message_id=m.message_id, role=m.role, content=m.content, created_at=m.created_at,
                    meta={k: str(v) for k, v in m.meta.items() if k in ("model", "route")},
                )
                for m in messages
            ],
        )

    async def DeleteConversation(self, request: gateway_pb2.DeleteConversationRequest, context):
        deleted = await asyncio.to_thread(self.history.store.delete_conversation, request.tenant,
                                          request.conversation_id)
        return gateway_pb2.DeleteConversationResponse(deleted=deleted)

    async def Ingest(
        self, request_iterator: AsyncIterator[retriever_pb2.Document], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[retriever_pb2.IngestProgress]:
        async for progress in self.retriever.ingest(request_iterator):
            yield progress

    async def Correct(self, request: gateway_pb2.CorrectionRequest, context: grpc.aio.ServicerContext):
        record = CorrectionRecord("", request.tenant, request.user_id, request.question, request.wrong_answer,
                                  request.correction, request.conversation_id)
        correction_id = await asyncio.to_thread(self.memory.record_correction, record, request.message_id)
        return gateway_pb2.CorrectionResponse(correction_id=correction_id)
