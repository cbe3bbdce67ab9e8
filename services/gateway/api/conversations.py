"""A caller's conversations: list (newest first, paged), read back with each answer's citations and
how it was made, rename, delete."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict

from ragmesh.identity import Identity
from ragmesh.paging import DEFAULT_PAGE
from ragmesh.store import MessageRecord
from services.gateway.conversations import Conversations


class RenameBody(BaseModel):  # the title is checked by Conversations.rename (400 naming it)
    model_config = ConfigDict(strict=True)

    title: str


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


def conversations_router(conversations: Conversations, caller: Callable[..., Awaitable[Identity]]) -> APIRouter:
    router = APIRouter()

    @router.get("/api/conversations")
    async def list_conversations(limit: int = Query(DEFAULT_PAGE), offset: int = Query(0),
                                 who: Identity = Depends(caller)) -> dict:
        found = await conversations.list(who, limit, offset)
        return {"conversations": [asdict(c) for c in found.items], "next_offset": found.next_offset}

    @router.get("/api/conversations/{conversation_id}")
    async def read(conversation_id: str, who: Identity = Depends(caller)) -> dict:
        messages = await conversations.messages(who, conversation_id)
        return {"conversation_id": conversation_id, "messages": [message_json(m) for m in messages]}

    @router.patch("/api/conversations/{conversation_id}")
    async def rename(conversation_id: str, body: RenameBody, who: Identity = Depends(caller)) -> dict:
        return {"conversation_id": conversation_id,
                "title": await conversations.rename(who, conversation_id, body.title)}

    @router.delete("/api/conversations/{conversation_id}")
    async def delete(conversation_id: str, who: Identity = Depends(caller)) -> dict:
        await conversations.delete(who, conversation_id)
        return {"deleted": True}

    return router
