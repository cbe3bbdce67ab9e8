"""What pickers offer: the tenant's collections (with the data sources that search them; not the
conversation memory, which is personal) and its fund names."""
from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Depends

from ragmesh.clients import RetrieverClient
from ragmesh.identity import Identity
from ragmesh.types import MEMORY_COLLECTION
from services.gateway.request import SOURCE_COLLECTIONS


def catalog_router(retriever: Callable[[], RetrieverClient], funds: Callable[[str], Awaitable[list[str]]],
                   caller: Callable[..., Awaitable[Identity]]) -> APIRouter:
    router = APIRouter()

    @router.get("/api/collections")
    async def list_collections(who: Identity = Depends(caller)) -> dict:
        sources = {collection: source for source, collection in SOURCE_COLLECTIONS.items()}
        return {"collections": [{"name": c.name, "documents": c.documents, "chunks": c.chunks,
                                 "data_source": sources.get(c.name, "")}
                                for c in await retriever().own_collections() if c.name != MEMORY_COLLECTION]}

    @router.get("/api/funds")
    async def list_funds(who: Identity = Depends(caller)) -> dict:
        return {"funds": await funds(who.tenant)}

    return router
