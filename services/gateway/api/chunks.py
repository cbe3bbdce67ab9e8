"""`GET /api/chunks/{chunk_id}`: one chunk of the caller's tenant as a citation panel shows it (its
text, its parent's text, its metadata and its document); another tenant's, and any of the conversation
memory (personal), is a 404 like an unknown id."""
from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Depends

from ragmesh.identity import Identity
from services.gateway.library import Library


def chunks_router(library: Library, caller: Callable[..., Awaitable[Identity]]) -> APIRouter:
    router = APIRouter()

    @router.get("/api/chunks/{chunk_id:path}")
    async def get_chunk(chunk_id: str, who: Identity = Depends(caller)) -> dict:
        found = await library.chunk(who, chunk_id)
        c, d = found.chunk, found.document
        return {
            "chunk_id": c.chunk_id, "doc_id": c.doc_id, "collection": c.collection, "text": c.text,
            "parent_text": found.parent_text, "date": c.date, "page": c.metadata.get("page", ""),
            "fund": c.metadata.get("fund_name", ""),
            "metadata": c.metadata,
            "document": None if d is None else {"doc_id": d.doc_id, "collection": d.collection, "title": d.title,
                                                "date": d.date, "chunk_count": d.chunk_count,
                                                "summary": d.summary, "metadata": d.metadata},
        }

    return router
