"""`GET /api/chunks/{chunk_id}`: one chunk of the caller's tenant as a citation panel shows it (its
text, its parent's text, its metadata and its document); another tenant's, and any of the conversation
memory (personal), is a 404 like an unknown id."""
from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Depends

from ragmesh.clients import RetrieverClient
from ragmesh.errors import NotFound
from ragmesh.identity import Identity
from ragmesh.types import MEMORY_COLLECTION
from ragmesh.validation import shown


def chunks_router(retriever: Callable[[], RetrieverClient], caller: Callable[..., Awaitable[Identity]]) -> APIRouter:
    router = APIRouter()

    @router.get("/api/chunks/{chunk_id:path}")
    async def get_chunk(chunk_id: str, who: Identity = Depends(caller)) -> dict:
        unknown = NotFound(f"chunk {shown(chunk_id)} not found")
        try:
            found = await retriever().get_chunk(chunk_id)
        except NotFound:
            raise unknown from None
        c, d = found.chunk, found.document
        if c.collection == MEMORY_COLLECTION:  # a message of the conversation memory: its author's, through Ask
            raise unknown
        return {
            "chunk_id": c.chunk_id, "doc_id": c.doc_id, "collection": c.collection, "text": c.text,
            "parent_text": found.parent_text, "date": c.date, "page": c.metadata.get("page", ""),
            "fund": c.metadata.get("fund_name", ""),
            "metadata": {k: v for k, v in c.metadata.items() if k != "full_document"},
            "document": None if d is None else {"doc_id": d.doc_id, "collection": d.collection, "title": d.title,
                                                "date": d.date, "chunk_count": d.chunk_count,
                                                "summary": d.summary, "metadata": d.metadata},
        }

    return router
