"""A caller's conversations: list, read back, delete."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict

from fastapi import APIRouter, Depends, Query

from ragmesh.identity import Identity
from services.gateway.conversations import Conversations


def conversations_router(conversations: Conversations, caller: Callable[..., Awaitable[Identity]]) -> APIRouter:
    router = APIRouter()

    @router.get("/api/conversations")
    async def list_conversations(limit: int = Query(50), who: Identity = Depends(caller)) -> dict:
        return {"conversations": [asdict(c) for c in await conversations.list(who, limit)]}

    @router.get("/api/conversations/{conversation_id}")
    async def read(conversation_id: str, who: Identity = Depends(caller)) -> dict:
        messages = await conversations.messages(who, conversation_id)
        return {"conversation_id": conversation_id,
                "messages": [{"message_id": m.message_id, "role": m.role, "content": m.content,
                              "created_at": m.created_at, "meta": m.meta} for m in messages]}

    @router.delete("/api/conversations/{conversation_id}")
    async def delete(conversation_id: str, who: Identity = Depends(caller)) -> dict:
        await conversations.delete(who, conversation_id)
        return {"deleted": True}

    return router
