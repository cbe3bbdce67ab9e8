"""Asking (streamed as Server-Sent Events, or whole as JSON), stopping, and corrections."""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from ragmesh.identity import Identity
from ragmesh.store import CorrectionRecord
from services.gateway.conversations import Conversations
from services.gateway.events import event_json
from services.gateway.memory import Memory
from services.gateway.notes_contract import notes_answer, notes_json
from services.gateway.pipeline import AskPipeline
from services.gateway.request import MAX_DOCUMENT_IDS, MAX_FUNDS, MAX_NAME_CHARS, AskInput
from services.gateway.whole_answer import whole_answer, whole_json

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _whole(value: object) -> object:
    """50.0 is the integer 50 in JSON; 50.5, "50" and true are not."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Integer = Annotated[int, BeforeValidator(_whole)]


# The fields are checked by AskInput.validate (400 naming the field); strict types (no "5" for 5) and
# the list lengths are checked here, so that the OpenAPI document says exactly what is accepted: a list
# longer than its limit is refused even when repeats would be dropped (data_sources, each one of five
# values, has no length limit). services/gateway/api/openapi.py documents the rest of the limits.
class AskBody(BaseModel):
    model_config = ConfigDict(strict=True)

    question: str = ""
    data_sources: list[str] = Field(default_factory=list)
    start_date: str | None = ""
    end_date: str | None = ""
    selected_funds: list[str] = Field(default_factory=list, max_length=MAX_FUNDS)
    conversation_id: str | None = ""
    model: str | None = ""
    tenant: str = ""  # ignored unless it is the credential's own
    user_id: str = ""  # another user of the tenant: admin keys only
    top_k: Integer | None = None
    document_ids: list[str] = Field(default_factory=list, max_length=MAX_DOCUMENT_IDS)
    persona: str | None = ""
    context_window: str | None = ""
    format: str | None = ""  # "notes": POST /api/chat/ask answers in 002's contract (the stream's events stay)

    def to_input(self) -> AskInput:
        return AskInput(
            question=self.question, data_sources=self.data_sources, start_date=self.start_date or "",
            end_date=self.end_date or "", selected_funds=self.selected_funds,
            conversation_id=self.conversation_id or "", model=self.model or "", tenant=self.tenant,
            user_id=self.user_id, top_k=self.top_k, document_ids=self.document_ids, persona=self.persona or "",
            context_window=self.context_window or "", response_format=self.format or "ragmesh",
        )


class StopBody(BaseModel):
    model_config = ConfigDict(strict=True)

    conversation_id: str = Field(max_length=MAX_NAME_CHARS)


class CorrectionBody(BaseModel):  # the texts are checked by Memory.record_correction (CORRECTION_LIMITS)
    model_config = ConfigDict(strict=True)

    correction: str
    tenant: str = Field("", max_length=MAX_NAME_CHARS)
    user_id: str = Field("", max_length=MAX_NAME_CHARS)
    conversation_id: str = ""
    message_id: str = ""
    question: str = ""
    wrong_answer: str = ""


def chat_router(pipeline: AskPipeline, memory: Memory, conversations: Conversations,
                caller: Callable[..., Awaitable[Identity]]) -> APIRouter:
    router = APIRouter()

    @router.post("/api/chat/ask/stream")
    async def ask_stream(body: AskBody, who: Identity = Depends(caller)) -> StreamingResponse:
        prepared = await pipeline.prepare(body.to_input(), who)  # bad input: 400 before the stream starts

        async def sse() -> AsyncIterator[str]:
            async with aclosing(pipeline.run(prepared)) as events:
                async for event in events:
                    yield f"data: {json.dumps(event_json(event))}\n\n"

        return StreamingResponse(sse(), media_type="text/event-stream", headers=SSE_HEADERS)

    @router.post("/api/chat/ask")
    async def ask(body: AskBody, who: Identity = Depends(caller)) -> dict:
        prepared = await pipeline.prepare(body.to_input(), who)
        whole = await whole_answer(pipeline, prepared)  # an error event: raised, answered with its status
        return notes_json(notes_answer(whole)) if prepared.ask.response_format == "notes" else whole_json(whole)

    @router.post("/api/chat/stop")
    async def stop(body: StopBody, who: Identity = Depends(caller)) -> dict:
        return {"stopped": await conversations.stop(who, body.conversation_id)}

    @router.post("/api/corrections")
    async def correct(body: CorrectionBody, who: Identity = Depends(caller)) -> dict:
        author = who.acting_for(body.tenant, body.user_id)
        record = CorrectionRecord("", author.tenant, author.user, body.question, body.wrong_answer, body.correction,
                                  body.conversation_id)
        correction_id = await asyncio.to_thread(memory.record_correction, author, record, body.message_id)
        return {"correction_id": correction_id}

    return router
