"""Asking (streamed as Server-Sent Events, or whole as JSON), stopping, and corrections."""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing

from fastapi import APIRouter, Depends
from fastapi.responses import Response, StreamingResponse

from ragmesh.identity import Identity
from ragmesh.store import CorrectionRecord
from services.gateway.api.openapi import streams
from services.gateway.api.schemas import Answer, CorrectionRecorded, NotesAnswer, Stopped, returns
from services.gateway.conversations import Conversations
from services.gateway.correction_request import CorrectionBody
from services.gateway.events import Event, event_json
from services.gateway.memory import Memory
from services.gateway.notes_contract import notes_answer, notes_json
from services.gateway.pipeline import AskPipeline
from services.gateway.request import AskRequest, ConversationId, Declared
from services.gateway.whole_answer import whole_answer, whole_json

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _frame(event: Event) -> str:
    """One Server-Sent Event: the event's JSON on one `data:` line."""
    return f"data: {json.dumps(event_json(event))}\n\n"


def _followed_at_once(event: Event) -> bool:
    """An event the pipeline always yields right before another (the search's end before the strategy, the
    citations before the end): the two go out in one socket write, as they would arrive together anyway."""
    return event.kind == "citations" or (event.kind == "searching" and event.value is False)


class StopBody(Declared):
    conversation_id: ConversationId


def chat_router(pipeline: AskPipeline, memory: Memory, conversations: Conversations,
                caller: Callable[..., Awaitable[Identity]]) -> APIRouter:
    router = APIRouter()

    @router.post("/api/chat/ask/stream", summary="Ask, the answer streamed as Server-Sent Events",
                 **streams("AskEvent", 403, 404))
    async def ask_stream(body: AskRequest, who: Identity = Depends(caller)) -> Response:
        prepared = await pipeline.prepare(body.to_input(), who)  # bad input: 400 before the stream starts
        if prepared.refused:  # its events are known at once: sent whole, with no stream held open for them
            return Response("".join([_frame(e) async for e in pipeline.run(prepared)]),
                            media_type="text/event-stream", headers=SSE_HEADERS)

        async def sse() -> AsyncIterator[str]:
            held = ""  # frames written with the next one
            async with aclosing(pipeline.run(prepared)) as events:
                async for event in events:
                    if _followed_at_once(event):
                        held += _frame(event)
                        continue
                    yield held + _frame(event)
                    held = ""
            if held:
                yield held

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
