"""A caller's conversations: list (newest first, paged), read back with each answer's citations and
how it was made, rename, delete."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from pydantic import Field

from ragmesh.identity import Identity
from ragmesh.paging import DEFAULT_PAGE
from ragmesh.store import MessageRecord
from services.gateway.api.paging import Limit, Offset
from services.gateway.api.schemas import (Conversation, ConversationDeleted, ConversationRenamed, Conversations,
                                          returns)
from services.gateway.conversations import MAX_TITLE_CHARS, Conversations as CallerConversations
from services.gateway.request import ConversationId, Declared

# A conversation named in the path: an id no conversation can have is 400, a well-formed unknown one 404.
PathConversationId = Annotated[ConversationId, Path()]


class RenameBody(Declared):
    title: str = Field(max_length=MAX_TITLE_CHARS, description="Empty or blank: the first question again; spaces "
                                                               "are collapsed")


def message_json(m: MessageRecord) -> dict[str, Any]:
    """A stored message (its whole meta too), with what an answer's meta holds lifted out: the citations (and the chunk
    map that resolves their persistent refs), the model, the route, the strategy event and the timings."""
    meta = m.meta or {}
    return {"message_id": m.message_id, "role": m.role, "content": m.content, "created_at": m.created_at,
            "model": meta.get("model", ""), "route": meta.get("route", ""), "retrieval": meta.get("retrieval", ""),
            "citations": meta.get("citations", []), "web_queries": meta.get("web_queries", []),
            "chunk_map": meta.get("chunk_map", {}), "strategy": meta.get("strategy") or None,
            "timings": meta.get("timings", {}),
            "usage": meta.get("usage", {}), "failed": meta.get("failed", ""), "meta": meta}


def conversations_router(conversations: CallerConversations, caller: Callable[..., Awaitable[Identity]]) -> APIRouter:
    router = APIRouter()

    @router.get("/api/conversations", summary="The caller's conversations, newest first, titled by their first "
                                              "question", **returns(Conversations))
    async def list_conversations(limit: Limit = DEFAULT_PAGE, offset: Offset = 0,
                                 who: Identity = Depends(caller)) -> dict:
        found = await conversations.list(who, limit, offset)
        return {"conversations": [asdict(c) for c in found.items], "next_offset": found.next_offset}

    @router.get("/api/conversations/{conversation_id}", summary="A conversation's messages with each answer's "
                                                                "citations, model, route and timings",
                **returns(Conversation, 404))
    async def read_conversation(conversation_id: PathConversationId, who: Identity = Depends(caller)) -> dict:
        messages = await conversations.messages(who, conversation_id)
        return {"conversation_id": conversation_id, "messages": [message_json(m) for m in messages]}

    @router.patch("/api/conversations/{conversation_id}", summary="Rename a conversation",
                  **returns(ConversationRenamed, 404))
    async def rename_conversation(conversation_id: PathConversationId, body: RenameBody,
                                  who: Identity = Depends(caller)) -> dict:
        return {"conversation_id": conversation_id,
                "title": await conversations.rename(who, conversation_id, body.title)}

    @router.delete("/api/conversations/{conversation_id}", summary="Delete a conversation: messages, summary, "
                                                                   "corrections and its conversation memory",
                   **returns(ConversationDeleted, 404, 502, 503))
    async def delete_conversation(conversation_id: PathConversationId, who: Identity = Depends(caller)) -> dict:
        await conversations.delete(who, conversation_id)
        return {"deleted": True}

    return router
