"""`GET /api/chunks/{chunk_id}`: one chunk of the caller's tenant as a citation panel shows it (its
text, its parent's text, its metadata and its document); another tenant's, and any of the conversation
memory (personal), is a 404 like an unknown id."""
from __future__ import annotations

from collections.abc import Awaitable, Callable

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from ragmesh import access
from ragmesh.identity import Identity
from ragmesh.types import ChunkContext
from ragmesh.validation import MAX_CHUNK_ID_CHARS, NOT_BLANK
from services.gateway.api.schemas import ChunkView, returns
from services.gateway.library import Library

ChunkId = Annotated[str, Path(max_length=MAX_CHUNK_ID_CHARS, pattern=NOT_BLANK, description=(
    "A citation's chunk_id (tenant/collection/doc_id#n: percent-encode '#' and '/')"))]


def chunk_json(found: ChunkContext) -> dict:
    """A chunk as a citation panel (and the MCP edge's get_chunk) shows it."""
    c, d = found.chunk, found.document
    return {
        "chunk_id": c.chunk_id, "doc_id": c.doc_id, "collection": c.collection, "text": c.text,
        "parent_text": found.parent_text, "date": c.date, "page": c.metadata.get("page", ""),
        "fund": c.metadata.get("fund_name", ""),
        "metadata": c.metadata,
        "document": None if d is None else {"doc_id": d.doc_id, "collection": d.collection, "title": d.title,
                                            "date": d.date, "chunk_count": d.chunk_count,
                                            "summary": d.summary, "metadata": access.shown(d.metadata)},
    }


def chunks_router(library: Library, caller: Callable[..., Awaitable[Identity]]) -> APIRouter:
    router = APIRouter()

    @router.get("/api/chunks/{chunk_id:path}", summary="A chunk with its parent's text and its document (citation "
                                                       "panels)", **returns(ChunkView, 404, 502))
    async def get_chunk(chunk_id: ChunkId, who: Identity = Depends(caller)) -> dict:
        return chunk_json(await library.chunk(who, chunk_id))

    return router
