"""What pickers offer: the tenant's collections (with the data sources that search them; not the
conversation memory, which is personal) and its fund names."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict

from fastapi import APIRouter, Depends

from ragmesh.identity import Identity
from services.gateway.api.schemas import Collections, Funds, returns
from services.gateway.library import Library


def catalog_router(library: Library, caller: Callable[..., Awaitable[Identity]]) -> APIRouter:
    router = APIRouter()

    @router.get("/api/collections", summary="The tenant's collections, for pickers", **returns(Collections, 502))
    async def list_collections(who: Identity = Depends(caller)) -> dict:
        return {"collections": [asdict(c) for c in await library.collections(who)]}

    @router.get("/api/funds", summary="The tenant's fund names, for pickers", **returns(Funds))
    async def list_funds(who: Identity = Depends(caller)) -> dict:
        return {"funds": await library.funds(who)}

    return router
