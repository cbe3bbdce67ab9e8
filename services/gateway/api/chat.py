"""Asking (streamed as Server-Sent Events, or whole as JSON), stopping, and corrections."""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse
from pydantic import ConfigDict, Field

from ragmesh.identity import Identity
from ragmesh.store import CorrectionRecord
from ragmesh.validation import NOT_BLANK
from services.gateway.conversations import Conversations
from services.gateway.events import event_json
from services.gateway.memory import CORRECTION_LIMITS, Memory
from services.gateway.notes_contract import notes_answer, notes_json
from services.gateway.pipeline import AskPipeline
from services.gateway.api.openapi import streams
from services.gateway.api.schemas import Answer, CorrectionRecorded, NotesAnswer, Stopped, returns
from services.gateway.request import MAX_NAME_CHARS, AskRequest, ConversationId, Declared, MaybeConversationId, Name
from services.gateway.whole_answer import whole_answer, whole_json

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _text(limit: int, description: str) -> Any:
    """An optional text field (empty when left out) of at most `limit` characters."""
    return Field("", max_length=limit, description=description)


class StopBody(Declared):
    conversation_id: ConversationId


# The cross-field rules memory.record_correction checks, as JSON Schema: the question, or the message whose
# question it was; a message_id needs its conversation.
CORRECTION_RULES = {
    "anyOf": [{"required": ["question"], "properties": {"question": {"pattern": NOT_BLANK}}},
              {"required": ["message_id", "conversation_id"],
               "properties": {"message_id": {"minLength": 1}, "conversation_id": {"minLength": 1}}}],
    "if": {"required": ["message_id"], "properties": {"message_id": {"minLength": 1}}},
    "then": {"required": ["conversation_id"], "properties": {"conversation_id": {"minLength": 1}}},
}


class CorrectionBody(Declared):
    model_config = ConfigDict(json_schema_extra=CORRECTION_RULES)

    correction: str = Field(max_length=CORRECTION_LIMITS["correction"], pattern=NOT_BLANK,
                            description="What the right answer is")
    tenant: Name = Field("", description="Empty or the credential's own tenant (403 otherwise)")
    user_id: Name = Field("", description="Empty or the caller; an admin key may name another user of its tenant")
    conversation_id: MaybeConversationId = Field("", description=(
        "One of the caller's own conversations (404 otherwise); needed with message_id"))
    message_id: str = _text(MAX_NAME_CHARS, "The wrong answer's message in conversation_id (404 when there is none)")
    question: str = _text(CORRECTION_LIMITS["question"], "The question answered wrongly; may be empty with message_id")
    wrong_answer: str = _text(CORRECTION_LIMITS["wrong_answer"], "Empty with message_id: that answer")


def chat_router(pipeline: AskPipeline, memory: Memory, conversations: Conversations,
                caller: Callable[..., Awaitable[Identity]]) -> APIRouter:
    router = APIRouter()

    @router.post("/api/chat/ask/stream", summary="Ask, the answer streamed as Server-Sent Events",
                 **streams("AskEvent", 403, 404))
    async def ask_stream(body: AskRequest, who: Identity = Depends(caller)) -> StreamingResponse:
        prepared = await pipeline.prepare(body.to_input(), who)  # bad input: 400 before the stream starts

        async def sse() -> AsyncIterator[str]:
            async with aclosing(pipeline.run(prepared)) as events:
                async for event in events:
                    yield f"data: {json.dumps(event_json(event))}\n\n"

        return StreamingResponse(sse(), media_type="text/event-stream", headers=SSE_HEADERS)

    @router.post("/api/chat/ask", summary="Ask, the answer whole as JSON",
                 **returns(Answer | NotesAnswer, 403, 404, 502))
    async def ask(body: AskRequest, who: Identity = Depends(caller)) -> dict:
        prepared = await pipeline.prepare(body.to_input(), who)
        whole = await whole_answer(pipeline, prepared)  # an error event: raised, answered with its status
        return notes_json(notes_answer(whole)) if prepared.ask.response_format == "notes" else whole_json(whole)

    @router.post("/api/chat/stop", summary="Stop the conversation's running answer", **returns(Stopped, 404))
    async def stop(body: StopBody, who: Identity = Depends(caller)) -> dict:
        return {"stopped": await conversations.stop(who, body.conversation_id)}

    @router.post("/api/corrections", summary="Say an answer was wrong and what is right",
                 **returns(CorrectionRecorded, 403, 404))
    async def correct(body: CorrectionBody, who: Identity = Depends(caller)) -> dict:
        author = who.acting_for(body.tenant, body.user_id)
        record = CorrectionRecord("", author.tenant, author.user, body.question, body.wrong_answer, body.correction,
                                  body.conversation_id)
        correction_id = await asyncio.to_thread(memory.record_correction, author, record, body.message_id)
        return {"correction_id": correction_id}

    return router
